// Kernels of known geometry and known memory traffic, for exact-count checks under the
// injector. Prints one JSON object: per kernel its grid, block, launches and the global memory
// accesses it must make, plus a checksum of every output (to compare runs with and without the
// injector). With --phases N it runs N rounds and waits for a line on stdin between rounds, so
// a test can switch modes at known points. With --loop SECONDS it launches until time is up.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "program_support.h"

// one store per thread with i < n
__global__ void fill_1d(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(i) * 0.5f;
}

// two loads and one store per thread, 3-D grid and 3-D blocks
__global__ void saxpy_3d(const float* x, float* y, float a) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int i = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  y[i] = a * x[i] + y[i];
}

// one load and one store per thread, 1024-thread blocks
__global__ void copy_1024(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i] + 1.0f;
}

// a single warp, one store
__global__ void tiny(int* out) { out[threadIdx.x] = int(threadIdx.x) * 3; }

struct Buffers {
  float *fill = nullptr, *x = nullptr, *y = nullptr, *in = nullptr, *out = nullptr;
  int* small = nullptr;
};

constexpr int kFillBlocks = 1000, kFillThreads = 256, kFillN = kFillBlocks * kFillThreads - 100;
const dim3 kSaxpyGrid(7, 5, 3), kSaxpyBlock(8, 4, 2);
constexpr int kSaxpyN = 7 * 5 * 3 * 8 * 4 * 2;
constexpr int kCopyBlocks = 37, kCopyThreads = 1024, kCopyN = kCopyBlocks * kCopyThreads;

void launch_round(Buffers& b) {
  fill_1d<<<kFillBlocks, kFillThreads>>>(b.fill, kFillN);
  saxpy_3d<<<kSaxpyGrid, kSaxpyBlock>>>(b.x, b.y, 2.0f);
  copy_1024<<<kCopyBlocks, kCopyThreads>>>(b.in, b.out);
  tiny<<<1, 32>>>(b.small);
  CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
  int rounds = 3, phases = 0;
  double loop_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--phases") && i + 1 < argc) phases = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--loop") && i + 1 < argc) loop_seconds = std::atof(argv[++i]);
  }
  Buffers b;
  CHECK(cudaMalloc(&b.fill, kFillN * sizeof(float)));
  CHECK(cudaMalloc(&b.x, kSaxpyN * sizeof(float)));
  CHECK(cudaMalloc(&b.y, kSaxpyN * sizeof(float)));
  CHECK(cudaMalloc(&b.in, kCopyN * sizeof(float)));
  CHECK(cudaMalloc(&b.out, kCopyN * sizeof(float)));
  CHECK(cudaMalloc(&b.small, 32 * sizeof(int)));
  std::vector<float> ones(kCopyN, 1.0f);
  CHECK(cudaMemcpy(b.x, ones.data(), kSaxpyN * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.y, ones.data(), kSaxpyN * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.in, ones.data(), kCopyN * sizeof(float), cudaMemcpyHostToDevice));

  long launched_rounds = 0;
  if (loop_seconds > 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(loop_seconds);
    while (std::chrono::steady_clock::now() < end) {
      launch_round(b);
      ++launched_rounds;
      CHECK(cudaDeviceSynchronize());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } else {
    const int total_phases = phases > 0 ? phases : 1;
    for (int phase = 0; phase < total_phases; ++phase) {
      if (phase > 0) {
        std::printf("{\"phase_done\": %d}\n", phase - 1);
        std::fflush(stdout);
        std::string line;
        std::getline(std::cin, line);  // the test switches the mode, then lets us go on
      }
      for (int r = 0; r < rounds; ++r) launch_round(b);
      launched_rounds += rounds;
      CHECK(cudaDeviceSynchronize());
    }
  }
  CHECK(cudaDeviceSynchronize());
  uint64_t hash = kChecksumStart;
  hash = checksum(b.fill, kFillN * sizeof(float), hash);
  hash = checksum(b.y, kSaxpyN * sizeof(float), hash);
  hash = checksum(b.out, kCopyN * sizeof(float), hash);
  hash = checksum(b.small, 32 * sizeof(int), hash);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the tool publish
  std::printf(
      "{\"rounds\": %ld, \"checksum\": \"%016llx\", \"kernels\": {"
      "\"fill_1d\": {\"grid\": [%d,1,1], \"block\": [%d,1,1], \"accesses_per_launch\": %d},"
      "\"saxpy_3d\": {\"grid\": [7,5,3], \"block\": [8,4,2], \"accesses_per_launch\": %d},"
      "\"copy_1024\": {\"grid\": [%d,1,1], \"block\": [%d,1,1], \"accesses_per_launch\": %d},"
      "\"tiny\": {\"grid\": [1,1,1], \"block\": [32,1,1], \"accesses_per_launch\": 32}}}\n",
      launched_rounds, (unsigned long long)hash, kFillBlocks, kFillThreads, kFillN, 3 * kSaxpyN, kCopyBlocks,
      kCopyThreads, 2 * kCopyN);
  return 0;
}
