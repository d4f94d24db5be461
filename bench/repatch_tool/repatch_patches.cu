// The repatch tool's patches (bench/repatch_tool): two patch sets that count, so a program can tell
// which code a launch ran. Set a: a block-entry patch counting blocks in counter 0. Set b: another
// block-entry patch counting blocks in counter 1 and a global-access patch counting accesses in
// counter 2 (a different instruction set, as gpuobs's memory set differs from its block set).
// The counters are the userdata the tool binds to every function; none bound, nothing counted.
// Compiled with `nvcc --fatbin --compile-as-tools-patch`.
#include <sanitizer_patching.h>

#include <cstdint>

namespace {

__device__ __forceinline__ bool is_block_leader() { return (threadIdx.x | threadIdx.y | threadIdx.z) == 0; }

__device__ __forceinline__ void count(void* userdata, int counter) {
  atomicAdd(static_cast<unsigned long long*>(userdata) + counter, 1ull);
}

}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_repatch_enter_a(void* userdata, uint64_t pc) {
  if (userdata != nullptr && is_block_leader()) count(userdata, 0);
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_repatch_enter_b(void* userdata, uint64_t pc) {
  if (userdata != nullptr && is_block_leader()) count(userdata, 1);
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_repatch_access_b(void* userdata, uint64_t pc, void* ptr,
                                                                                uint32_t access_bytes, uint32_t flags,
                                                                                const void* new_value) {
  if (userdata != nullptr) count(userdata, 2);
  return SANITIZER_PATCH_SUCCESS;
}
