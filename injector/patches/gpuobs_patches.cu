// Patch functions the Compute Sanitizer inserts into the served program's SASS. Compiled with
// `nvcc --fatbin --compile-as-tools-patch` (without it, patching fails).
//
// Every patch runs in every thread that executes the patched instruction, on a minimal
// register budget: per-block work is gated on one leader thread, per-access work is
// aggregated per warp, nothing allocates and nothing waits (a full ring is a counted drop).
// The config in force (mode, shift, the filter's verdict, whether the kernel's module carries the
// access hooks) is one word in the kernel's device slot
// that the userdata points at (device_state.h), so a switch needs no re-patching and reaches
// replays of graphs instantiated and launched before it. The launch census
// (launch_census.h) runs in every mode: launches, blocks and shapes are exact without a host
// callback.
#include <sanitizer_patching.h>

#include <cstdint>

#include "gpuobs/device_state.h"
#include "gpuobs/launch_census.h"
#include "gpuobs/layout.h"
#include "gpuobs/replay_spans.h"
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
// Through L1 here (the per-access patches); the block-entry patch reads it with fresh_flags_of.
__device__ __forceinline__ uint32_t flags_of(void* userdata) {
  const uint64_t bits = reinterpret_cast<uint64_t>(userdata);
  return (bits & kBoundConfig) ? bound_flags(bits) : slot_word_flags(bits, __ldg(&kernel_of(userdata)->flags));
}

// The same from L2, never from L1: measured on the H200, an SM's L1 kept a line across kernel
// launches although the tool thread had rewritten it since (copies on the tool's own stream), so
// a block read the mode before the switch while the launch after it, on another SM, read the new
// one. The leader then reduces the line's `touch` word, which drops the line from its SM's L1,
// so that the per-access patches of the blocks that follow read the new config too.
__device__ __forceinline__ uint32_t fresh_flags_of(void* userdata) {
  const uint64_t bits = reinterpret_cast<uint64_t>(userdata);
  if (bits & kBoundConfig) return bound_flags(bits);
  uint32_t value;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(value) : "l"(&kernel_of(userdata)->flags) : "memory");
  return slot_word_flags(bits, value);
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
                  offsetof(EventRecord, block_z) == 38,
              "word 4: block_x, block_y, block_z");
static_assert(offsetof(EventRecord, thread) == 40 && offsetof(EventRecord, sm_id) == 42 &&
                  offsetof(EventRecord, kernel_slot) == 44,
              "word 5: thread, sm_id, kernel_slot");
static_assert(offsetof(EventRecord, replay) == 48 && offsetof(EventRecord, kind) == 52 &&
                  offsetof(EventRecord, access_bytes) == 53 && offsetof(EventRecord, flags) == 54,
              "word 6: replay, kind, access_bytes, flags");

// Half of a word: 0 the low 32 bits, 1 the high.
__device__ __forceinline__ void put_half(EventRecord* record, int word, int half, uint32_t value) {
  reinterpret_cast<volatile uint32_t*>(record)[2 * word + half] = value;
}

// %ctaid.x, .y, .z (0, 1, 2), read afresh (volatile: not kept live from an earlier read).
template <int kAxis>
__device__ __forceinline__ uint32_t block_index() {
  uint32_t value;
  if (kAxis == 0) asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(value));
  if (kAxis == 1) asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(value));
  if (kAxis == 2) asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(value));
  return value;
}

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
  put_word(record, 6,
           (__ldg(reinterpret_cast<const unsigned long long*>(&context->config.replay)) & 0xffffffffULL) |
               (uint64_t(kind) << 32) | (uint64_t(access_bytes & 0xff) << 40) | (uint64_t(flags & 0xffff) << 48));
  put_word(record, 4, block);
  put_word(record, 3, grid_id());
  put_word(record, 0, globaltimer());
  ring::commit(&record->seq, ticket);
}

__device__ __forceinline__ ring::ProducerView producer_view(DeviceContextState* context) {
  return ring::ProducerView{&context->ring_head,    &context->ring_reserved, &context->ring_limit,
                            context->consumer_tail, context->ring_capacity,  &context->ring_refresh_after};
}

// One block-level event from the leader thread: its own claim (enter and exit are separate
// patch calls, far apart in time). `flags`: BlockEventFlags.
__device__ __forceinline__ void record_block_event(DeviceKernelSlot* kernel, DeviceContextState* context, uint64_t pc,
                                                   EventKind kind, uint32_t sm, uint32_t flags) {
  ring::add(&kernel->events_produced, 1ULL);
  uint64_t ticket = 0;
  if (!ring::claim(producer_view(context), 1, &ticket)) {
    ring::add(&kernel->events_dropped, 1ULL);
    return;
  }
  write_record(context, ticket, pc, 0, 0, sm, slot_of(kernel), kind, 0, flags);
}

// A block leader's record (a launch, or a block's enter), written with as few registers live as
// can be: what it needs from memory is loaded up front, in order (strong loads: ptxas does not
// hoist them above the code before, which at its default level took more registers than a patch
// may use without saving some, a stack frame for every thread), then each word is stored as soon
// as it is made.
__device__ __forceinline__ uint64_t load_ordered(const uint64_t* word) {
  uint64_t value;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(word) : "memory");
  return value;
}

// 32 bits (one register): a uint32_t, or the low half of a uint64_t.
__device__ __forceinline__ uint32_t load_ordered_u32(const void* word) {
  uint32_t value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(word) : "memory");
  return value;
}

__device__ __forceinline__ void write_leader_record(const DeviceKernelSlot* kernel, DeviceContextState* context,
                                                    uint64_t ticket, bool launch, bool sampled) {
  const uint64_t ring = load_ordered(reinterpret_cast<const uint64_t*>(&kernel->ring));
  const uint32_t mask = load_ordered_u32(&kernel->ring_mask);  // a capacity is at most 2^31 records
  const uint32_t replay = load_ordered_u32(&context->config.replay);
  const uint64_t pc = load_ordered(&kernel->entry_pc);
  EventRecord* record = reinterpret_cast<EventRecord*>(ring) + (uint32_t(ticket) & mask);
  ring::mark_writing(&record->seq, ticket);
  put_word(record, 1, pc);
  // Words 6, 5, 4 and 2 in 32-bit halves, laid out as write_record and block_word lay them out:
  // single registers rather than aligned pairs, two of three dimensions live at a time.
  put_half(record, 6, 0, replay);
  put_half(
      record, 6, 1,
      uint32_t(launch ? EventKind::Launch : EventKind::BlockEnter) | (sampled ? uint32_t(kBlockSampled) << 16 : 0u));
  put_half(record, 5, 0, (sm_id() & 0xffff) << 16);
  put_half(record, 5, 1, slot_of(kernel));
  put_half(record, 4, 0, launch ? blockDim.x : block_index<0>());
  put_half(
      record, 4, 1,
      launch ? (blockDim.y & 0xffff) | (blockDim.z << 16) : (block_index<1>() & 0xffff) | (block_index<2>() << 16));
  put_word(record, 3, grid_id());
  put_half(record, 2, 0, launch ? gridDim.x : 0);
  put_half(record, 2, 1, launch ? (gridDim.y & 0xffff) | (gridDim.z << 16) : 0);
  put_word(record, 0, globaltimer());
  ring::commit(&record->seq, ticket);
}

// The block-entry patch has no call in it, so that no thread pays a stack frame: with one call
// site anywhere in the function, every thread of every block saved and restored its return
// address through local memory, and on a graph of small kernels (the decode graph, 96 kernels
// of ~4 us) that frame alone cost 3.4% of the step, more than a load from device memory. The
// exit patch is opt-in and keeps its work behind a call.

__device__ __forceinline__ bool first_block_now() {
  return (block_index<0>() | block_index<1>() | block_index<2>()) == 0;
}

// Event modes: one record from a block leader (its own claim, so that nothing but the slot's
// address stays live from one record to the next: two records sharing one claim needed more
// registers than a patch may use without saving some, and a save is a frame for every thread).
// `launch` and `sampled` are constants at every call: they cost no register.
__device__ __forceinline__ void leader_event(DeviceKernelSlot* kernel, bool launch, bool sampled) {
  DeviceContextState* context = context_of(kernel);
  ring::add(&kernel->events_produced, 1ULL);
  uint64_t ticket = 0;
  ring::ProducerView view = producer_view(context);
  view.limit = &context->moved_limit;
  if (!ring::claim_cached(view, 1, &ticket)) {
    ring::add(&kernel->events_dropped, 1ULL);
    return;
  }
  write_leader_record(kernel, context, ticket, launch, sampled);
}

// Block (0,0,0)'s leader, in `counter` and up: its entry into the span of the replay in progress
// (replay_spans.h), reductions it never waits for, after two loads it does wait for (its
// context's address, then the replay word from L2, as the host rewrites it between replays).
// Issued before the census they kept a pointer live across it: a stack frame for every thread.
__device__ __forceinline__ void fold_replay_span(const DeviceKernelSlot* kernel) {
  DeviceContextState* context = context_of(kernel);
  const uint64_t word = load_ordered(&context->config.replay);
  note_replay_span(replay_spans_of(context), word, globaltimer());
}

// The leader of every block, before the kernel's own code: what it waits for is added to the
// kernel's time (every block of a one-wave kernel is on its critical path), so the one load it
// needs, the config word, is issued first and block (0,0,0)'s launch census runs while it is in
// flight.
__device__ __forceinline__ void block_enter_leader(void* userdata) {
  DeviceKernelSlot* kernel = kernel_of(userdata);
  const uint32_t flags = fresh_flags_of(userdata);
  if (first_block_now())
    count_launch(kernel, pack_grid(gridDim.x, gridDim.y, gridDim.z), pack_block(blockDim.x, blockDim.y, blockDim.z));
  count_block(kernel, flags_mode(flags) >= uint32_t(Mode::Counter), sm_id());
  ring::add(&kernel->touch, 1);
  if (spans_replays(flags) && first_block_now()) fold_replay_span(kernel);
  const BlockCapture capture = block_capture(flags);
  if (capture == BlockCapture::None) return;
  // Every block's enter (blocks), or the 1 in 2^shift the hash keeps (sampled, in kernels without
  // access hooks: no load, the hash of registers); from block (0,0,0), when its enter is recorded
  // or the kernel's accesses are, also the launch as an event (grid id, grid and block shape,
  // time, SM), written after its enter so that nothing but the slot's address stays live across
  // a record (one register more than that and the patch needs a frame).
  if (capture == BlockCapture::Sampled) {
    if (!block_sample_keep(grid_id(), linear_block(), block_epoch(globaltimer()), flags_shift(flags))) return;
    leader_event(kernel, false, true);
  } else if (capture == BlockCapture::Every) {
    leader_event(kernel, false, false);
  }
  if (first_block_now()) leader_event(kernel, true, false);
}

__device__ __noinline__ SanitizerPatchResult block_exit_leader(void* userdata, uint64_t pc) {
  // counted in every mode (as block entries are, observed or not): blocks in flight from counts
  // alone, whatever the event rings and the daemon's analyses did
  count_block_exit(kernel_of(userdata), sm_id());
  const uint32_t flags = flags_of(userdata);
  const BlockCapture capture = block_capture(flags);
  uint32_t event_flags = 0;
  if (capture == BlockCapture::Sampled) {
    const uint32_t choice = block_exit_choice(grid_id(), linear_block(), globaltimer(), flags_shift(flags));
    if (choice == 0) return SANITIZER_PATCH_SUCCESS;
    event_flags = kBlockSampled | (choice == 2 ? kBlockEarlierEpoch : 0);
  } else if (capture != BlockCapture::Every) {
    return SANITIZER_PATCH_SUCCESS;
  }
  DeviceKernelSlot* kernel = kernel_of(userdata);
  record_block_event(kernel, context_of(kernel), pc, EventKind::BlockExit, sm_id(), event_flags);
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
// sharded by SM), block (0,0,0)'s leader the launch, and in the event modes they record events.
extern "C" __device__ __noinline__ SanitizerPatchResult gpuobs_block_enter(void* userdata, uint64_t pc) {
  if (userdata != nullptr && is_block_leader()) block_enter_leader(userdata);
  return SANITIZER_PATCH_SUCCESS;
}

// Block exit, in every thread as it exits (hooked only with GPUOBS_BLOCK_EXIT=1): the leader's exit
// stands for the block's; it counts the exit and, in the event modes, records it.
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
__device__ __noinline__ SanitizerPatchResult memory_access(void* userdata, uint64_t pc, void* ptr,
                                                           uint32_t access_bytes, uint32_t flags) {
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

#ifdef GPUOBS_DIAGNOSTICS
#include "diagnostic_patches.cuh"
#endif
