// Runs the symbolisation fixture's kernels on the GPU (built with -lineinfo by the test), so
// that sampled PCs of a live process can be mapped back to tests/fixtures/inline_chain.cu.
#include <cuda_runtime.h>

#include <cstdio>

#include "../../fixtures/inline_chain.cu"

int main() {
  const int n = 1 << 20;
  float *in = nullptr, *out = nullptr;
  // level1 reads in[i + 1]: one element past n, so `in` has room for it
  if (cudaMalloc(&in, (n + 8) * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&out, (n + 8) * sizeof(float)) != cudaSuccess)
    return 1;
  cudaMemset(in, 0, (n + 8) * sizeof(float));
  for (int round = 0; round < 20; ++round) {
    hot_kernel<<<n / 256, 256>>>(in, out, n);
    hot_loop_kernel<<<n / 256, 256>>>(in, out, n);
  }
  const cudaError_t status = cudaDeviceSynchronize();
  std::printf("{\"status\": \"%s\"}\n", cudaGetErrorString(status));
  if (status != cudaSuccess) std::fprintf(stderr, "inline_chain: %s\n", cudaGetErrorString(status));
  return status == cudaSuccess ? 0 : 1;
}
