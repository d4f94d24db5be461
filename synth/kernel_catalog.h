// Kernels gpuobs-synth pretends to run: real-world mangled names (cuBLAS, FlashAttention,
// CUTLASS, vLLM, PyTorch, Triton) and launch shapes like theirs, so names, demangling and
// label cardinality are exercised as in a vLLM process.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gpuobs {
namespace synth {

struct KernelProfile {
  std::string mangled;
  uint32_t grid_x;  // typical grid
  uint32_t grid_y;
  uint32_t grid_z;
  uint32_t block_threads;        // threads per block (multiple of 32)
  uint32_t accesses_per_thread;  // global memory instructions each thread executes
  uint64_t base_pc;
  std::vector<uint32_t> access_offsets;  // when set: the offset of each access instruction (--cubin-offsets)
};

// `count` kernels: the catalogue first, then numbered vLLM-like layer kernels.
std::vector<KernelProfile> make_catalog(uint32_t count, std::mt19937_64& rng);

}  // namespace synth
}  // namespace gpuobs
