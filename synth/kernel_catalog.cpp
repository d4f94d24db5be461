#include "kernel_catalog.h"

namespace gpuobs {
namespace synth {
namespace {

struct Seed {
  const char* mangled;
  uint32_t grid_x, grid_y, grid_z, block_threads, accesses_per_thread;
};

// Shapes are small on purpose: gpuobs-synth exercises the pipeline, not the GPU.
const Seed kSeeds[] = {
    {"nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 132, 1, 1, 384, 1},
    {"_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_tEE"
     "Lb1ELb0ELb0ELb0ELb1ELb1ELb0ELb0EEEv16Flash_fwd_params",
     16, 8, 2, 128, 4},
    {"_ZN4vllm30reshape_and_cache_flash_kernelIN3c108BFloat16ES2_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S6_PT0_S8_"
     "PKlllllliiiPKfSC_",
     16, 1, 1, 256, 2},
    {"_ZN4vllm15rms_norm_kernelIN3c108BFloat16ELi8EEEvPT_PKS3_S6_fii", 8, 1, 1, 256, 3},
    {"_ZN4vllm18act_and_mul_kernelIN3c108BFloat16EXadL_ZNS_11silu_kernelIS2_EET_RKS4_EELb1EEEvPS4_PKS4_i", 48, 1, 1,
     1024, 3},
    {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_", 64, 1, 1, 128,
     1},
    {"_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS_25Sm90GemmTma128x128x64Bf16EEEEEvNT_6ParamsE", 66, 2,
     1, 384, 2},
    {"triton_poi_fused_add_mul_0", 32, 1, 1, 128, 3},
};

}  // namespace

std::vector<KernelProfile> make_catalog(uint32_t count, std::mt19937_64& rng) {
  std::vector<KernelProfile> catalog;
  const uint32_t seeds = uint32_t(sizeof(kSeeds) / sizeof(kSeeds[0]));
  for (uint32_t index = 0; index < count; ++index) {
    KernelProfile profile;
    if (index < seeds) {
      const Seed& seed = kSeeds[index];
      profile = {seed.mangled, seed.grid_x, seed.grid_y, seed.grid_z, seed.block_threads, seed.accesses_per_thread, 0};
    } else {
      // void vllm::synthetic_layer_kernel<N>(float*, float const*, int)
      profile.mangled = "_ZN4vllm22synthetic_layer_kernelILi" + std::to_string(index) + "EEEvPfPKfi";
      profile.grid_x = uint32_t(4 + rng() % 60);
      profile.grid_y = 1;
      profile.grid_z = 1;
      profile.block_threads = uint32_t(32 * (1 + rng() % 8));
      profile.accesses_per_thread = uint32_t(1 + rng() % 3);
    }
    profile.base_pc = 0x7f0000000000ULL + uint64_t(index) * 0x100000ULL;
    catalog.push_back(profile);
  }
  return catalog;
}

}  // namespace synth
}  // namespace gpuobs
