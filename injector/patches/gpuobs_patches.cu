// Patch functions the Compute Sanitizer inserts into the served program's SASS. Compiled with
// `nvcc --fatbin --compile-as-tools-patch` (DEVICE.md: without it, patching fails).
//
// Every patch runs in every thread that executes the patched instruction, on a minimal
// register budget: per-block work is gated on one leader thread, per-access work is
// aggregated per warp, nothing allocates and nothing waits (a full ring is a counted drop).
// The mode is read from device memory each call, so a mode switch needs no re-patching and
// reaches replays of CUDA graphs instantiated earlier.
#include <sanitizer_patching.h>

#include <cstdint>

#include "gpuobs/device_state.h"
#include "gpuobs/layout.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"

using namespace gpuobs;

namespace {

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t value;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(value));
  return value;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t value;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(value));
  return value;
}

__device__ __forceinline__ uint64_t grid_id() {
  uint64_t value;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(value));
  return value;
}

__device__ __forceinline__ uint32_t lane_id() {
  uint32_t value;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(value));
  return value;
}

__device__ __forceinline__ bool is_block_leader() { return (threadIdx.x | threadIdx.y | threadIdx.z) == 0; }

__device__ __forceinline__ uint32_t linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ uint64_t linear_block() {
  return blockIdx.x + uint64_t(gridDim.x) * (blockIdx.y + uint64_t(gridDim.y) * blockIdx.z);
}

__device__ __forceinline__ uint64_t read_config(const DeviceContextState* context) {
  return *reinterpret_cast<const volatile uint64_t*>(&context->config.config);
}

__device__ __forceinline__ bool captured(const DeviceContextState* context, uint32_t slot) {
  return reinterpret_cast<const volatile uint8_t*>(context->capture)[slot] != 0;
}

// Writes one record into a claimed slot of the segment's ring (host memory over PCIe):
// the WRITING mark, the body as wide stores, then seq after a system fence.
__device__ __forceinline__ void write_record(DeviceContextState* context, uint64_t ticket, uint64_t pc,
                                             uint64_t address, uint32_t thread, uint32_t sm, uint32_t slot,
                                             EventKind kind, uint32_t access_bytes, uint32_t flags) {
  EventRecord* record = context->ring + (ticket & (context->ring_capacity - 1));
  ring::mark_writing(&record->seq, ticket);
  ulonglong2* words = reinterpret_cast<ulonglong2*>(record);
  words[0] = make_ulonglong2(globaltimer(), pc);
  words[1] = make_ulonglong2(address, grid_id());
  const uint64_t block_word =
      uint64_t(blockIdx.x) | (uint64_t(blockIdx.y & 0xffff) << 32) | (uint64_t(blockIdx.z & 0xffff) << 48);
  const uint64_t thread_word = uint64_t(thread & 0xffff) | (uint64_t(sm & 0xffff) << 16) | (uint64_t(slot) << 32);
  words[2] = make_ulonglong2(block_word, thread_word);
  const uint64_t replay = *reinterpret_cast<const volatile uint64_t*>(&context->config.replay);
  reinterpret_cast<uint64_t*>(record)[6] = (replay & 0xffffffffULL) | (uint64_t(kind) << 32) |
                                            (uint64_t(access_bytes & 0xff) << 40) | (uint64_t(flags & 0xffff) << 48);
  ring::commit(&record->seq, ticket);
}

__device__ __forceinline__ ring::ProducerView producer_view(DeviceContextState* context) {
  return ring::ProducerView{&context->ring_head, &context->ring_limit, context->consumer_tail,
                            context->ring_capacity};
}

// One block-level event from the leader thread: its own claim (enter and exit are separate
// patch calls, far apart in time).
__device__ __forceinline__ void record_block_event(DeviceKernelSlot* kernel, DeviceContextState* context, uint64_t pc,
                                                   EventKind kind, uint32_t sm) {
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_produced), 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_dropped), 1ULL);
    return;
  }
  write_record(context, ticket, pc, 0, 0, sm, kernel->slot, kind, 0, 0);
}

}  // namespace

// Block entry, in every thread of every block. counter and above: the leader counts the block
// (sharded by SM); blocks: and records an enter event.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_enter(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = static_cast<DeviceKernelSlot*>(userdata);
  DeviceContextState* context = kernel->context;
  const uint32_t mode = config_mode(read_config(context));
  if (mode < uint32_t(Mode::Counter)) return SANITIZER_PATCH_SUCCESS;
  const uint32_t sm = sm_id();
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->blocks[sm % kBlockShards]), 1ULL);
  if (mode == uint32_t(Mode::Blocks) && captured(context, kernel->slot))
    record_block_event(kernel, context, pc, EventKind::BlockEnter, sm);
  return SANITIZER_PATCH_SUCCESS;
}

// Block exit, in every thread as it exits: the leader's exit stands for the block's.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_exit(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = static_cast<DeviceKernelSlot*>(userdata);
  DeviceContextState* context = kernel->context;
  if (config_mode(read_config(context)) != uint32_t(Mode::Blocks) || !captured(context, kernel->slot))
    return SANITIZER_PATCH_SUCCESS;
  record_block_event(kernel, context, pc, EventKind::BlockExit, sm_id());
  return SANITIZER_PATCH_SUCCESS;
}

// Global memory access, in every thread that executes an access instruction. memory and
// sampled: the warp's leader adds the warp's count to a shard (exact, and no single hot word);
// then the threads that keep an event (all in memory, the hashed 1 in 2^shift in sampled)
// share one ring claim made by the first of them.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_memory_access(void* userdata, uint64_t pc, void* ptr,
                                                                            uint32_t access_bytes, uint32_t flags,
                                                                            const void* new_value) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = static_cast<DeviceKernelSlot*>(userdata);
  DeviceContextState* context = kernel->context;
  const uint64_t config = read_config(context);
  const uint32_t mode = config_mode(config);
  if (mode < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  const uint32_t active = __activemask();
  const uint32_t lane = lane_id();
  const uint32_t sm = sm_id();
  if (lane == uint32_t(__ffs(active) - 1))
    atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->accesses[sm % kAccessShards]),
              (unsigned long long)__popc(active));
  if (!captured(context, kernel->slot)) return SANITIZER_PATCH_SUCCESS;
  const uint32_t thread = linear_thread();
  const bool keep = mode == uint32_t(Mode::Memory) || sample_keep(pc, thread, linear_block(), config_shift(config));
  const uint32_t keepers = __ballot_sync(active, keep);
  if (keepers == 0) return SANITIZER_PATCH_SUCCESS;
  const uint32_t first_keeper = uint32_t(__ffs(keepers) - 1);
  unsigned long long first_ticket = 0;
  int claimed = 0;
  if (lane == first_keeper) {
    const uint32_t count = uint32_t(__popc(keepers));
    atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_produced), (unsigned long long)count);
    uint64_t ticket = 0;
    claimed = ring::claim(producer_view(context), count, &ticket) ? 1 : 0;
    if (!claimed) atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_dropped), (unsigned long long)count);
    first_ticket = ticket;
  }
  first_ticket = __shfl_sync(active, first_ticket, first_keeper);
  claimed = __shfl_sync(active, claimed, first_keeper);
  if (!keep || !claimed) return SANITIZER_PATCH_SUCCESS;
  const uint32_t rank = uint32_t(__popc(keepers & ((1u << lane) - 1)));
  write_record(context, first_ticket + rank, pc, reinterpret_cast<uint64_t>(ptr), thread, sm, kernel->slot,
               EventKind::MemoryAccess, access_bytes, flags);
  return SANITIZER_PATCH_SUCCESS;
}

// Bulk copies (cp.async.bulk global<->shared): issued once per block by one thread, with the
// global address and size. Counted as accesses and recorded like memory events (not sampled:
// there are few). TMA tensor copies (cp.async.bulk.tensor) fire no patch at all (DEVICE.md).
__device__ __forceinline__ SanitizerPatchResult bulk_copy(void* userdata, uint64_t pc, uint64_t global_address,
                                                          uint32_t bytes, uint32_t flags) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = static_cast<DeviceKernelSlot*>(userdata);
  DeviceContextState* context = kernel->context;
  if (config_mode(read_config(context)) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  const uint32_t sm = sm_id();
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->accesses[sm % kAccessShards]), 1ULL);
  if (!captured(context, kernel->slot)) return SANITIZER_PATCH_SUCCESS;
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_produced), 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->events_dropped), 1ULL);
    return SANITIZER_PATCH_SUCCESS;
  }
  write_record(context, ticket, pc, global_address, linear_thread(), sm, kernel->slot, EventKind::BulkCopy,
               bytes > 255 ? 255 : bytes, flags);
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_bulk_global_to_shared(void* userdata, uint64_t pc,
                                                                                    uint64_t src, uint32_t dst,
                                                                                    uint32_t barrier, uint32_t data,
                                                                                    uint32_t is_multicast) {
  return bulk_copy(userdata, pc, src, 0, kAccessRead);
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_bulk_shared_to_global(void* userdata, uint64_t pc,
                                                                                    uint64_t dst, uint32_t src,
                                                                                    uint32_t num_blocks) {
  return bulk_copy(userdata, pc, dst, num_blocks, kAccessWrite);
}

// The naive exact count, for comparison only (GPUOBS_NAIVE_COUNTING=1 with the memory set):
// two atomics per access on two words shared by the whole kernel. Exact, and a queue on one
// address for a streaming kernel; the benchmarks measure what the warp-aggregated, sharded
// count above saves, and the GPU suite checks that both give the same counts.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_memory_access_naive(void* userdata, uint64_t pc,
                                                                                  void* ptr, uint32_t access_bytes,
                                                                                  uint32_t flags,
                                                                                  const void* new_value) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = static_cast<DeviceKernelSlot*>(userdata);
  if (config_mode(read_config(kernel->context)) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->accesses[0]), 1ULL);
  atomicAdd(reinterpret_cast<unsigned long long*>(&kernel->reserved[0]), (unsigned long long)access_bytes);
  return SANITIZER_PATCH_SUCCESS;
}
