// Two modules (one per translation unit): this one's kernels and two_modules_cache.cu's, for
// GPUOBS_MEMORY_KERNELS, which gives the access hooks to the modules holding a chosen kernel only.
// Prints one JSON object: per kernel its grid, block and the global memory accesses a launch
// makes, and a checksum of every output. --rounds N (default 3).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_support.h"

void launch_cache_round(const float* key, float* cache, float* scratch, int slot);

// one store per thread
__global__ void fill_kernel(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = float(threadIdx.x); }

// one load and one store per thread
__global__ void scale_kernel(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = 2.0f * in[i];
}

constexpr int kRows = 64 * 128, kSlots = 16;

int main(int argc, char** argv) {
  int rounds = 3;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
  float *filled, *scaled, *cache, *scratch;
  CHECK(cudaMalloc(&filled, 200 * 256 * sizeof(float)));
  CHECK(cudaMalloc(&scaled, 200 * 256 * sizeof(float)));
  CHECK(cudaMalloc(&cache, size_t(kSlots) * kRows * sizeof(float)));
  CHECK(cudaMalloc(&scratch, 16 * 256 * sizeof(float)));
  CHECK(cudaMemset(cache, 0, size_t(kSlots) * kRows * sizeof(float)));
  for (int round = 0; round < rounds; ++round) {
    fill_kernel<<<200, 256>>>(filled);
    scale_kernel<<<200, 256>>>(filled, scaled);
    launch_cache_round(scaled, cache, scratch, round % kSlots);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  uint64_t hash = kChecksumStart;
  hash = checksum(scaled, 200 * 256 * sizeof(float), hash);
  hash = checksum(cache, size_t(kSlots) * kRows * sizeof(float), hash);
  hash = checksum(scratch, 16 * 256 * sizeof(float), hash);
  std::printf(
      "{\"rounds\": %d, \"checksum\": \"%016llx\", \"kernels\": {"
      "\"fill_kernel\": {\"grid\": [200,1,1], \"block\": [256,1,1], \"accesses_per_launch\": %d},"
      "\"scale_kernel\": {\"grid\": [200,1,1], \"block\": [256,1,1], \"accesses_per_launch\": %d},"
      "\"cache_write_kernel\": {\"grid\": [64,1,1], \"block\": [128,1,1], \"accesses_per_launch\": %d},"
      "\"cache_neighbour_kernel\": {\"grid\": [16,1,1], \"block\": [256,1,1], \"accesses_per_launch\": %d}}}\n",
      rounds, (unsigned long long)hash, 200 * 256, 2 * 200 * 256, 2 * kRows, 16 * 256);
  return 0;
}
