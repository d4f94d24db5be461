// The second module of two_modules: a cache-write kernel (the kind GPUOBS_MEMORY_KERNELS chooses,
// as vLLM's reshape_and_cache) and a neighbour in the same module, which the choice covers too
// (the access hooks are patched per module).
#include <cuda_runtime.h>

// one load and one store per thread: row `blockIdx.x` of `key` into the cache at `slot`
__global__ void cache_write_kernel(const float* key, float* cache, int slot) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  cache[slot * gridDim.x * blockDim.x + i] = key[i];
}

// one store per thread
__global__ void cache_neighbour_kernel(float* scratch) { scratch[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }

void launch_cache_round(const float* key, float* cache, float* scratch, int slot) {
  cache_write_kernel<<<64, 128>>>(key, cache, slot);
  cache_neighbour_kernel<<<16, 256>>>(scratch);
}
