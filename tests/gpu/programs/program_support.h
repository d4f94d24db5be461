// What the GPU suite's CUDA programs share: a CUDA call checked (a failure ends the program with
// exit status 3 and the call's place), and a checksum of device memory, to compare outputs with
// and without the injector.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t status_ = (call);                                                          \
    if (status_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(3);                                                                        \
    }                                                                                      \
  } while (0)

// FNV-1a over `bytes` of device memory, continuing from `hash`.
inline uint64_t checksum(const void* device, size_t bytes, uint64_t hash) {
  std::vector<unsigned char> host(bytes);
  CHECK(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  for (unsigned char byte : host) hash = (hash ^ byte) * 1099511628211ULL;
  return hash;
}

constexpr uint64_t kChecksumStart = 1469598103934665603ULL;  // FNV-1a's offset basis
