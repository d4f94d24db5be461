// Patch functions the Compute Sanitizer inserts into the served program's SASS. Compiled with
// `nvcc --fatbin --compile-as-tools-patch` (without it, patching fails).
//
// Every patch runs in every thread that executes the patched instruction, on a minimal
// register budget: per-block work is gated on one leader thread, per-access work is
// aggregated per warp, nothing allocates and nothing waits (a full ring is a counted drop).
// The config in force (mode, shift, the filter's verdict) is one word in the kernel's device slot
// that the userdata points at (device_state.h), so a switch needs no re-patching and reaches
// replays of graphs instantiated and launched before it. The launch census
// (launch_census.h) runs in every mode: launches, blocks and shapes are exact without a host
// callback.
#include <sanitizer_patching.h>

#include <cstdint>

#include "gpuobs/device_state.h"
#include "gpuobs/launch_census.h"
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

__device__ __forceinline__ bool is_first_block() { return (blockIdx.x | blockIdx.y | blockIdx.z) == 0; }

// Read-only cached loads: the words below change only between launches (the host writes them
// before the launches they are for). A volatile (.sys) load here made the per-access floor 63x.
__device__ __forceinline__ DeviceContextState* context_of(const DeviceKernelSlot* kernel) {
  return reinterpret_cast<DeviceContextState*>(__ldg(reinterpret_cast<const unsigned long long*>(&kernel->context)));
}

__device__ __forceinline__ uint32_t slot_of(const DeviceKernelSlot* kernel) { return __ldg(&kernel->slot); }

__device__ __forceinline__ DeviceKernelSlot* kernel_of(void* userdata) {
  return reinterpret_cast<DeviceKernelSlot*>(reinterpret_cast<uint64_t>(userdata) & kSlotAddressMask);
}

// The config in force for this launch: from the userdata's high bits when the function is
// bound with it (GPUOBS_CONFIG_WORD=bound: no load at all), else from the kernel's slot (one load).
__device__ __forceinline__ uint32_t flags_of(void* userdata) {
  const uint64_t bits = reinterpret_cast<uint64_t>(userdata);
  return (bits & kBoundConfig) ? bound_flags(bits) : __ldg(&kernel_of(userdata)->flags);
}

// Writes one record into a claimed slot of the segment's ring (host memory over PCIe): the
// WRITING mark, the body one word at a time (volatile: stores stay in order and few registers
// stay live, so the patch needs no stack frame), then seq after a system fence.
__device__ __forceinline__ void put_word(EventRecord* record, int word, uint64_t value) {
  reinterpret_cast<volatile uint64_t*>(record)[word] = value;
}

// The patches store an EventRecord word by word (put_word): the words as layout.h has them.
static_assert(offsetof(EventRecord, globaltimer_ns) == 0 && offsetof(EventRecord, pc) == 8 &&
                  offsetof(EventRecord, address) == 16 && offsetof(EventRecord, grid_id) == 24,
              "words 0-3");
static_assert(offsetof(EventRecord, block_x) == 32 && offsetof(EventRecord, block_y) == 36 &&
                  offsetof(EventRecord, block_z) == 38, "word 4: block_x, block_y, block_z");
static_assert(offsetof(EventRecord, thread) == 40 && offsetof(EventRecord, sm_id) == 42 &&
                  offsetof(EventRecord, kernel_slot) == 44, "word 5: thread, sm_id, kernel_slot");
static_assert(offsetof(EventRecord, replay) == 48 && offsetof(EventRecord, kind) == 52 &&
                  offsetof(EventRecord, access_bytes) == 53 && offsetof(EventRecord, flags) == 54,
              "word 6: replay, kind, access_bytes, flags");

// EventRecord's word 4: block_x, block_y, block_z (this block's index; a launch event puts its
// block shape there).
__device__ __forceinline__ uint64_t block_word(uint32_t x, uint32_t y, uint32_t z) {
  return uint64_t(x) | (uint64_t(y & 0xffff) << 32) | (uint64_t(z & 0xffff) << 48);
}

__device__ __forceinline__ void write_record(DeviceContextState* context, uint64_t ticket, uint64_t pc,
                                             uint64_t address, uint32_t thread, uint32_t sm, uint32_t slot,
                                             EventKind kind, uint32_t access_bytes, uint32_t flags,
                                             uint64_t block = block_word(blockIdx.x, blockIdx.y, blockIdx.z)) {
  const uint64_t mask = __ldg(reinterpret_cast<const unsigned long long*>(&context->ring_capacity)) - 1;
  EventRecord* record =
      reinterpret_cast<EventRecord*>(__ldg(reinterpret_cast<const unsigned long long*>(&context->ring))) +
      (ticket & mask);
  ring::mark_writing(&record->seq, ticket);
  // Stored in the order their inputs die, to keep few registers live.
  put_word(record, 1, pc);
  put_word(record, 2, address);
  put_word(record, 5, uint64_t(thread & 0xffff) | (uint64_t(sm & 0xffff) << 16) | (uint64_t(slot) << 32));
  put_word(record, 6, (__ldg(reinterpret_cast<const unsigned long long*>(&context->config.replay)) & 0xffffffffULL) |
                          (uint64_t(kind) << 32) | (uint64_t(access_bytes & 0xff) << 40) |
                          (uint64_t(flags & 0xffff) << 48));
  put_word(record, 4, block);
  put_word(record, 3, grid_id());
  put_word(record, 0, globaltimer());
  ring::commit(&record->seq, ticket);
}

__device__ __forceinline__ ring::ProducerView producer_view(DeviceContextState* context) {
  return ring::ProducerView{&context->ring_head, &context->ring_reserved, &context->ring_limit,
                            context->consumer_tail, context->ring_capacity, &context->ring_refresh_after};
}

// One block-level event from the leader thread: its own claim (enter and exit are separate
// patch calls, far apart in time).
__device__ __forceinline__ void record_block_event(DeviceKernelSlot* kernel, DeviceContextState* context, uint64_t pc,
                                                   EventKind kind, uint32_t sm) {
  ring::add(&kernel->events_produced, 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    ring::add(&kernel->events_dropped, 1ULL);
    return;
  }
  write_record(context, ticket, pc, 0, 0, sm, slot_of(kernel), kind, 0, 0);
}


// Entry points are split in two: the patch itself does only what every thread must do (a few
// register-only tests, no load) and returns; the work for leaders, counted accesses and
// recorded events is in __noinline__ functions. Compiled as one function, the patch needed
// a 40-byte stack frame saved and restored by every thread of every block: `off` measured 4.5x
// on SiLU-and-mul before the split.

// The leader of block (0,0,0) in the event modes: the launch as an event (kernel slot, grid
// id, grid and block shape, time, SM), one ring claim per launch.
__device__ __noinline__ void record_launch(DeviceKernelSlot* kernel, uint64_t pc, uint64_t grid, uint64_t block_shape) {
  DeviceContextState* context = context_of(kernel);
  ring::add(&kernel->events_produced, 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    ring::add(&kernel->events_dropped, 1ULL);
    return;
  }
  write_record(context, ticket, pc, grid, 0, sm_id(), slot_of(kernel), EventKind::Launch, 0, 0, block_shape);
}

// Once per launch, from the leader of block (0,0,0): the census, and in the event modes the
// launch event and, in blocks, its enter. Behind a call: one thread per launch gets here, and
// the hashing must not cost registers on the path every block takes.
__device__ __noinline__ void first_block(DeviceKernelSlot* kernel, uint64_t pc, uint32_t flags) {
  const uint64_t grid = pack_grid(gridDim.x, gridDim.y, gridDim.z);
  const uint64_t block = pack_block(blockDim.x, blockDim.y, blockDim.z);
  count_launch(kernel, grid, block);
  if (flags_mode(flags) < uint32_t(Mode::Blocks) || !(flags & kFlagsCaptured)) return;
  record_launch(kernel, pc, grid, block_word(blockDim.x, blockDim.y, blockDim.z));
  if (flags_mode(flags) == uint32_t(Mode::Blocks))
    record_block_event(kernel, context_of(kernel), pc, EventKind::BlockEnter, sm_id());
}

__device__ __noinline__ void record_block_enter(DeviceKernelSlot* kernel, uint64_t pc) {
  record_block_event(kernel, context_of(kernel), pc, EventKind::BlockEnter, sm_id());
}

// A block leader's work, inline in the entry point: the config word (one load), the block's
// count (a reduction). What is rare (the first block of a launch, blocks-mode recording) is
// behind calls in tail position, so that nothing stays live across them and every thread's
// frame stays at the 16 bytes one call site costs. Measured on the decode graph: a call for
// every leader (with its own frame) cost more than the loads it saved.
__device__ __forceinline__ SanitizerPatchResult block_enter_leader(void* userdata, uint64_t pc) {
  DeviceKernelSlot* kernel = kernel_of(userdata);
  const uint32_t flags = flags_of(userdata);
  const uint32_t mode = flags_mode(flags);
  count_block(kernel, mode >= uint32_t(Mode::Counter), sm_id());
  if (is_first_block()) {
    first_block(kernel, pc, flags);
  } else if (mode == uint32_t(Mode::Blocks) && (flags & kFlagsCaptured)) {
    record_block_enter(kernel, pc);
  }
  return SANITIZER_PATCH_SUCCESS;
}

__device__ __noinline__ SanitizerPatchResult block_exit_leader(void* userdata, uint64_t pc) {
  const uint32_t flags = flags_of(userdata);
  if (flags_mode(flags) == uint32_t(Mode::Blocks) && (flags & kFlagsCaptured)) {
    DeviceKernelSlot* kernel = kernel_of(userdata);
    record_block_event(kernel, context_of(kernel), pc, EventKind::BlockExit, sm_id());
  }
  return SANITIZER_PATCH_SUCCESS;
}

// The threads of a warp that keep an event (all in memory, the hashed 1 in 2^shift in sampled)
// share one ring claim made by the first of them. Behind a call: few warps get here in
// sampled mode, and what every access pays must stay small.
__device__ __noinline__ void record_warp_events(DeviceKernelSlot* kernel, uint64_t pc, uint64_t address,
                                                uint32_t access_bytes, uint32_t flags, uint32_t keepers) {
  DeviceContextState* context = context_of(kernel);
  const uint32_t lane = lane_id();
  const uint32_t first_keeper = uint32_t(__ffs(keepers) - 1);
  unsigned long long first_ticket = 0;
  int claimed = 0;
  if (lane == first_keeper) {
    const uint32_t count = uint32_t(__popc(keepers));
    ring::add(&kernel->events_produced, uint64_t(count));
    uint64_t ticket = 0;
    claimed = ring::claim(producer_view(context), count, &ticket) ? 1 : 0;
    if (!claimed) ring::add(&kernel->events_dropped, uint64_t(count));
    first_ticket = ticket;
  }
  first_ticket = __shfl_sync(keepers, first_ticket, first_keeper);
  claimed = __shfl_sync(keepers, claimed, first_keeper);
  if (!claimed) return;
  const uint32_t rank = uint32_t(__popc(keepers & ((1u << lane) - 1)));
  write_record(context, first_ticket + rank, pc, address, linear_thread(), sm_id(), slot_of(kernel),
               EventKind::MemoryAccess, access_bytes, flags);
}

}  // namespace

// Block entry, in every thread of every block: the leader counts the block (counter and up,
// sharded by SM) and records an enter event (blocks).
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_enter(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  return block_enter_leader(userdata, pc);
}

// Block exit, in every thread as it exits: the leader's exit stands for the block's.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_exit(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  return block_exit_leader(userdata, pc);
}

// Global memory access, in every thread that executes an access instruction. Below `memory`
// it costs two cached loads and a compare: the floor of the memory patch set. In memory and
// sampled modes the warp's first active lane adds the warp's count to a shard (exact, one
// reduction per warp, no single hot word), then each thread decides by hash whether it keeps
// an event; only keepers go on to record.
namespace {

// The memory modes' work for one access (behind a call, so that the other modes return from
// the patch without the frame this needs).
__device__ __noinline__ SanitizerPatchResult memory_access(void* userdata, uint64_t pc, void* ptr, uint32_t access_bytes,
                                                           uint32_t flags) {
  const uint32_t bound = flags_of(userdata);
  if (flags_mode(bound) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = kernel_of(userdata);
  const uint32_t active = __activemask();
  if (lane_id() == uint32_t(__ffs(active) - 1))
    ring::add(&kernel->accesses[sm_id() % kAccessShards], uint64_t(__popc(active)));
  if (!(bound & kFlagsCaptured)) return SANITIZER_PATCH_SUCCESS;
  const bool keep = flags_mode(bound) == uint32_t(Mode::Memory) ||
                    sample_keep(pc, linear_thread(), linear_block(), flags_shift(bound));
  const uint32_t keepers = __ballot_sync(active, keep);
  if (keep) record_warp_events(kernel, pc, reinterpret_cast<uint64_t>(ptr), access_bytes, flags, keepers);
  return SANITIZER_PATCH_SUCCESS;
}

}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_memory_access(void* userdata, uint64_t pc, void* ptr,
                                                                            uint32_t access_bytes, uint32_t flags,
                                                                            const void* new_value) {
  if (userdata == nullptr || flags_mode(flags_of(userdata)) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  return memory_access(userdata, pc, ptr, access_bytes, flags);
}

namespace {

// Bulk copies (cp.async.bulk global<->shared): issued once per block by one thread, with the
// global address and size. Counted as accesses and recorded like memory events (not sampled:
// there are few). TMA tensor copies (cp.async.bulk.tensor) fire no patch at all (measured on the H200).
// The size travels as the sanitizer gives it, in 16-byte blocks (layout.h: a BulkCopy event's
// `thread` holds them, `access_bytes` says 16).
__device__ __noinline__ SanitizerPatchResult bulk_copy(void* userdata, uint64_t pc, uint64_t global_address,
                                                          uint32_t blocks16, uint32_t flags) {
  if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
  const uint32_t bound = flags_of(userdata);
  if (flags_mode(bound) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = kernel_of(userdata);
  DeviceContextState* context = context_of(kernel);
  const uint32_t sm = sm_id();
  ring::add(&kernel->accesses[sm % kAccessShards], 1ULL);
  if (!(bound & kFlagsCaptured)) return SANITIZER_PATCH_SUCCESS;
  ring::add(&kernel->events_produced, 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    ring::add(&kernel->events_dropped, 1ULL);
    return SANITIZER_PATCH_SUCCESS;
  }
  write_record(context, ticket, pc, global_address, blocks16 & 0xffff, sm, slot_of(kernel), EventKind::BulkCopy, 16,
               flags);
  return SANITIZER_PATCH_SUCCESS;
}

}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_bulk_global_to_shared(void* userdata, uint64_t pc,
                                                                                    uint64_t src, uint32_t dst,
                                                                                    uint32_t barrier, uint32_t data,
                                                                                    uint32_t is_multicast) {
  return bulk_copy(userdata, pc, src, data & 0xffff, kAccessRead);  // bits 0-15: 16-byte blocks
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
  if (flags_mode(flags_of(userdata)) < uint32_t(Mode::Memory)) return SANITIZER_PATCH_SUCCESS;
  DeviceKernelSlot* kernel = kernel_of(userdata);
  ring::add(&kernel->accesses[0], 1ULL);
  ring::add(&kernel->reserved[0], uint64_t(access_bytes));
  return SANITIZER_PATCH_SUCCESS;
}

// Diagnostics only (GPUOBS_DEBUG_PATCHES=empty): patches that return at once, to measure what
// the instrumentation itself costs on a kernel, apart from anything gpuobs does in it.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_empty_block(void* userdata, uint64_t pc) {
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_empty_access(void* userdata, uint64_t pc, void* ptr,
                                                                           uint32_t access_bytes, uint32_t flags,
                                                                           const void* new_value) {
  return SANITIZER_PATCH_SUCCESS;
}

// Diagnostics only (GPUOBS_DEBUG_PATCHES=<step>): block-entry patches that do one part of a
// leader's work each, so that one benchmark run prices each part on a graph of small kernels,
// where the block set costs most over the empty patch. All but `count_inline` contain a call
// that never happens, so that every thread pays the 16-byte frame the production patch pays:
//   leader:       the leader test alone (and the frame);
//   load:         + the kernel slot's config word (one load, kept by a branch that never calls);
//   load_context: + the context's config word instead, its address computed from the userdata
//                 (the slot index rides in the userdata's bits 48-62: no chain of loads);
//   red:          the leader test and the block's count (a reduction), no load;
//   count:        load + count, what every block but the first does in `counter`;
//   count_inline: load + count with no call anywhere, so no frame for any thread;
//   census:       only block (0,0,0)'s launch census (its config load included).
// The counts these leave are wrong by design: for the overhead benchmark, never for a service.
namespace {
__device__ __noinline__ void never_called(DeviceKernelSlot* kernel) { ring::add(&kernel->reserved[1], 1ULL); }
}  // namespace

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_leader(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  if (pc == 0) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_load(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  if (flags_of(userdata) == ~0u) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_load_context(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  const uint64_t bits = reinterpret_cast<uint64_t>(userdata);
  const uint64_t state = (bits & kSlotAddressMask) - device_slots_offset() -
                         ((bits >> 48) & 0x7fff) * sizeof(DeviceKernelSlot);
  const auto* context = reinterpret_cast<const DeviceContextState*>(state);
  if (uint32_t(__ldg(reinterpret_cast<const unsigned long long*>(&context->config.config))) == ~0u)
    never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_red(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  count_block(kernel_of(userdata), true, sm_id());
  if (pc == 0) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_count(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  const uint32_t flags = flags_of(userdata);
  count_block(kernel_of(userdata), flags_mode(flags) >= uint32_t(Mode::Counter), sm_id());
  if (flags == ~0u) never_called(kernel_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_count_inline(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader()) return SANITIZER_PATCH_SUCCESS;
  count_block(kernel_of(userdata), flags_mode(flags_of(userdata)) >= uint32_t(Mode::Counter), sm_id());
  return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_debug_census(void* userdata, uint64_t pc) {
  if (userdata == nullptr || !is_block_leader() || !is_first_block()) return SANITIZER_PATCH_SUCCESS;
  first_block(kernel_of(userdata), pc, flags_of(userdata));
  return SANITIZER_PATCH_SUCCESS;
}
