// SiLU-and-mul as vLLM's MLP runs it: out[t, i] = silu(x[t, i]) * x[t, d + i], bf16, one block
// of 1024 threads per token, 6,098 tokens, d = 8,192: 300 MB moved per launch, memory-bound.
// Prints the median kernel time (cudaEvents around each launch) of --iters launches after
// --warmup launches, and a checksum of the output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_support.h"  // tests/gpu/programs: CHECK

constexpr int kTokens = 6098, kWidth = 8192, kThreads = 1024;

__global__ void silu_and_mul(const __nv_bfloat16* input, __nv_bfloat16* out) {
  const size_t row = blockIdx.x;
  const __nv_bfloat16* gate = input + row * 2 * kWidth;
  const __nv_bfloat16* up = gate + kWidth;
  for (int i = threadIdx.x; i < kWidth; i += blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    const float u = __bfloat162float(up[i]);
    out[row * kWidth + i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void fill(__nv_bfloat16* data, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    data[i] = __float2bfloat16(float((i * 2654435761u) % 1000) / 500.0f - 1.0f);
}

int main(int argc, char** argv) {
  int iters = 30, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = std::atoi(argv[++i]);
  }
  __nv_bfloat16 *input = nullptr, *out = nullptr;
  const size_t in_elems = size_t(kTokens) * 2 * kWidth, out_elems = size_t(kTokens) * kWidth;
  CHECK(cudaMalloc(&input, in_elems * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&out, out_elems * sizeof(__nv_bfloat16)));
  fill<<<1024, 256>>>(input, in_elems);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < warmup + iters; ++i) {
    CHECK(cudaEventRecord(start));
    silu_and_mul<<<kTokens, kThreads>>>(input, out);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  std::vector<unsigned short> host(out_elems);
  CHECK(cudaMemcpy(host.data(), out, out_elems * 2, cudaMemcpyDeviceToHost));
  unsigned long long hash = 1469598103934665603ULL;
  for (unsigned short v : host) hash = (hash ^ v) * 1099511628211ULL;
  std::printf("{\"median_ms\": %.5f, \"checksum\": \"%016llx\"}\n", times[times.size() / 2], hash);
  return 0;
}
