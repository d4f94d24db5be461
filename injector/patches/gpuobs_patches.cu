// Patch functions the Compute Sanitizer inserts into the served program's SASS. Compiled with
// `nvcc --fatbin --compile-as-tools-patch` (DEVICE.md: without it, patching fails). Patches run
// on a minimal register budget in every thread of the patched kernel: keep them small, gate
// per-block work on one leader thread, never allocate, never wait.
//
// Spine stage: the block-entry counter (mode `counter`) against per-function device data; the
// rest of the ladder builds on the same entry points.
#include <sanitizer_patching.h>

#include <cstdint>

#include "gpuobs/layout.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"

namespace {

// Per-function device data bound with sanitizerSetCallbackData (exact under graph replay).
struct FunctionDeviceData {
  unsigned long long blocks;
  unsigned long long accesses;
};

__device__ __forceinline__ unsigned lane_id() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

__device__ __forceinline__ bool is_block_leader() {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_enter(void* userdata, uint64_t pc) {
  if (userdata != nullptr && is_block_leader()) {
    atomicAdd(&static_cast<FunctionDeviceData*>(userdata)->blocks, 1ULL);
  }
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_exit(void* userdata, uint64_t pc) {
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_memory_access(void* userdata, uint64_t pc, void* ptr,
                                                                            uint32_t access_bytes, uint32_t flags,
                                                                            const void* new_value) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  // Warp-aggregated exact count: one atomic per warp per access instruction.
  const unsigned active = __activemask();
  const int leader = __ffs(active) - 1;
  if (lane_id() == unsigned(leader)) {
    atomicAdd(&static_cast<FunctionDeviceData*>(userdata)->accesses, (unsigned long long)__popc(active));
  }
  return SANITIZER_PATCH_SUCCESS;
}
