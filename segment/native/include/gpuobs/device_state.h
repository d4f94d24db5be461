// What the patches read and write in device memory, one struct per CUDA context, shared by the
// patch functions (device) and the injector (host). Not part of the segment: the host copies
// counters out of it into the segment, and writes each kernel's config into it when the daemon
// changes it.
//
// Hot config lives here, in device memory: measured on the H200: ~35 ns per call for a config
// word read from host-mapped memory in a per-access hook, and ~0 from device memory. It sits in
// each kernel's own slot, the one the patch's userdata points at: one load, not a chain.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuobs/layout.h"
#include "gpuobs/replay_spans.h"

namespace gpuobs {

constexpr uint32_t kBlockShards = 8;                  // blocks counters per kernel, picked by %smid
constexpr uint32_t kAccessShards = 16;                // access counters per kernel, picked by %smid
constexpr uint32_t kShapeBuckets = kShapesPerKernel;  // launch shapes per kernel (launch_census.h)

struct DeviceContextState;

// One bucket of a kernel's launch shapes: every launch whose shape hashes here adds 1 and its
// hash, and stores its shape. All launches of the bucket had the stored shape exactly when
// hash_sum == launches * hash(shape) (mod 2^64); else two shapes met here (launch_census.h).
struct DeviceShapeBucket {
  uint64_t launches;
  uint64_t hash_sum;
  uint64_t grid;   // pack_grid
  uint64_t block;  // pack_block
};
static_assert(sizeof(DeviceShapeBucket) == 32, "DeviceShapeBucket is 32 bytes");

// Per kernel slot; the patch's userdata points here (bound to the CUfunction when it loads,
// never per launch: per-launch data misbehaved under graph replay). Every
// counter is a reduction the patch fires and forgets: nothing here is read back on the device.
struct alignas(256) DeviceKernelSlot {
  // Line 0, the host's words for the patches: written by the host only, but for `touch`.
  DeviceContextState* context;  // back pointer, written once at context creation
  uint32_t slot;
  uint32_t flags;      // make_flags: the config in force for this kernel, written by the tool thread
  uint64_t entry_pc;   // the function's first instruction, written when the function is bound
  EventRecord* ring;   // the context's event ring and its capacity - 1 (copies of the context's, so
  uint64_t ring_mask;  // that a block leader's record needs no load from another line but replay's)
  uint64_t touch;      // reduced by every block leader: drops this line from its SM's L1 (patches)
  uint64_t header_reserved[10];
  // Counters, from line 1 on.
  uint64_t launches;                         // leader of block (0,0,0): one per launch
  uint64_t blocks_expected;                  // leader of block (0,0,0): the launch's grid size
  uint64_t blocks[kBlockShards];             // block leaders, counter and up
  uint64_t blocks_unobserved[kBlockShards];  // block leaders, off and noop
  uint64_t accesses[kAccessShards];
  uint64_t events_produced;
  uint64_t events_dropped;
  uint64_t reserved[4];  // [0]: bytes of the naive access count (benchmarks)
  DeviceShapeBucket shapes[kShapeBuckets];
  // block leaders at exit, in every mode, where exits are hooked (GPUOBS_BLOCK_EXIT=1): blocks
  // in flight are the blocks counted in (observed + unobserved) less these, whatever the rings
  // and the daemon's analyses did
  uint64_t blocks_exited[kBlockShards];
};
static_assert(sizeof(DeviceKernelSlot) == 768, "DeviceKernelSlot is 768 bytes");
static_assert(offsetof(DeviceKernelSlot, launches) == 128, "the host-written line is a line of its own");
static_assert(offsetof(DeviceKernelSlot, shapes) % 32 == 0, "shape buckets aligned");

// Config word: mode in bits 0-7, shift in bits 8-15.
GPUOBS_HD constexpr uint64_t make_config(Mode mode, uint32_t shift) {
  return uint64_t(mode) | (uint64_t(shift & 0xff) << 8);
}
GPUOBS_HD constexpr uint32_t config_mode(uint64_t config) { return uint32_t(config & 0xff); }
GPUOBS_HD constexpr uint32_t config_shift(uint64_t config) { return uint32_t((config >> 8) & 0xff); }

// Where a patch finds the config in force: by default in its kernel's slot (DeviceKernelSlot::
// flags, one load). With GPUOBS_CONFIG_WORD=bound the userdata a function is bound to carries it in
// the bits above the slot's address (kBoundConfig set), so no load at all, and a switch rebinds
// every function; measured on the H200: a graph exec keeps the userdata of its first launch, so
// a switch bound that way does not reach graph execs launched before it.
constexpr uint64_t kBoundConfig = 1ULL << 63;
constexpr uint64_t kSlotAddressMask = (1ULL << 48) - 1;
constexpr uint32_t kFlagsModeMask = 0x7;        // flags bits 0-2: Mode
constexpr uint32_t kFlagsCaptured = 0x8;        // flags bit 3: the kernel filter lets it record
constexpr uint32_t kFlagsShiftShift = 4;        // flags bits 4-8: sample shift
constexpr uint32_t kFlagsAccessHooked = 0x200;  // flags bit 9: its module carries the access hooks
// flags bit 10 (GPUOBS_LAUNCH_TIMES=1): in `counter`, block (0,0,0)'s leader records the launch as
// an event (its entry time), the cheapest record that gives an engine step its device span
constexpr uint32_t kFlagsLaunchTimes = 0x400;
// flags bit 11 (GPUOBS_REPLAY_SPANS, on unless 0): in `counter` and up, block (0,0,0)'s leader
// folds its entry time into its replay's span (replay_spans.h)
constexpr uint32_t kFlagsReplaySpans = 0x800;
static_assert(kModeCount <= kFlagsModeMask + 1, "every mode fits the flags' mode bits");
static_assert(kMaxShift <= 0x1f, "every shift fits the flags' shift bits");
GPUOBS_HD constexpr uint32_t make_flags(uint64_t config, bool captured, bool access_hooked, bool launch_times = false,
                                        bool replay_spans = false) {
  return (config_mode(config) & kFlagsModeMask) | (captured ? kFlagsCaptured : 0) |
         ((config_shift(config) & 0x1f) << kFlagsShiftShift) | (access_hooked ? kFlagsAccessHooked : 0) |
         (launch_times ? kFlagsLaunchTimes : 0) | (replay_spans ? kFlagsReplaySpans : 0);
}
GPUOBS_HD constexpr uint32_t flags_mode(uint32_t flags) { return flags & kFlagsModeMask; }
GPUOBS_HD constexpr uint32_t flags_shift(uint32_t flags) { return (flags >> kFlagsShiftShift) & 0x1f; }
// Whether a launch's block (0,0,0) folds its entry into its replay's span: counted and observed.
GPUOBS_HD constexpr bool spans_replays(uint32_t flags) {
  return (flags & kFlagsReplaySpans) && flags_mode(flags) >= uint32_t(Mode::Counter);
}
GPUOBS_HD constexpr uint64_t bound_userdata(uint64_t slot_address, uint32_t flags) {
  return (slot_address & kSlotAddressMask) | kBoundConfig | (uint64_t(flags & 0x7fff) << 48);
}

// What a kernel's block leaders record, from its config word: the one decision of the block
// patches (enter, exit) and gpuobs-synth. Kernels with access hooks record accesses in the
// access modes (their leaders only the launch); the others record every block in `blocks`, 1 in
// 2^shift blocks in `sampled` (block_sample_keep) and nothing in `memory`; in `counter` with
// launch times, every kernel the launch alone.
enum class BlockCapture : uint32_t {
  None = 0,      // counted only
  Launches = 1,  // the launch event from block (0,0,0); accesses are recorded by the access patch
  Sampled = 2,   // the blocks the hash keeps (enter, exit) and, when block (0,0,0) is one, the launch
  Every = 3,     // every block's enter (and exit), and the launch
};
inline constexpr Named<BlockCapture> kBlockCaptureNames[] = {{BlockCapture::None, "none"},
                                                             {BlockCapture::Launches, "launches"},
                                                             {BlockCapture::Sampled, "sampled"},
                                                             {BlockCapture::Every, "every"}};
static_assert(dense_from(kBlockCaptureNames, 0), "block captures in value order");
GPUOBS_HD constexpr BlockCapture block_capture(uint32_t flags) {
  return !(flags & kFlagsCaptured)                                                     ? BlockCapture::None
         : flags_mode(flags) == uint32_t(Mode::Counter) && (flags & kFlagsLaunchTimes) ? BlockCapture::Launches
         : flags_mode(flags) < uint32_t(Mode::Blocks)                                  ? BlockCapture::None
         : flags_mode(flags) == uint32_t(Mode::Blocks)                                 ? BlockCapture::Every
         : (flags & kFlagsAccessHooked)                                                ? BlockCapture::Launches
         : flags_mode(flags) == uint32_t(Mode::Sampled)                                ? BlockCapture::Sampled
                                                                                       : BlockCapture::None;
}
GPUOBS_HD constexpr uint32_t bound_flags(uint64_t userdata) { return uint32_t((userdata >> 48) & 0x7fff); }

// A kernel whose module has the access hooks by choice (GPUOBS_MEMORY_KERNELS: chosen for the
// process's life, in every patch set) says so in the userdata it is bound to, from its first
// launch: its slot's word says so only once the tool thread has rewritten it, and launches before
// that recorded its blocks as a kernel without the hooks would (seen on the H200 at 5e8016a: all
// three launches of a short program came first). The word's bit still says it for the modules
// the memory set hooks, which change with the set.
constexpr uint64_t kUserdataAccessHooked = 1ULL << 62;
GPUOBS_HD constexpr uint32_t slot_word_flags(uint64_t userdata, uint32_t word) {
  return word | ((userdata & kUserdataAccessHooked) ? kFlagsAccessHooked : 0u);
}

// Measurement only (GPUOBS_DEBUG_PATCHES=load_context): the slot's address with the slot's index
// in bits 48-62, from which a diagnostic patch finds its context's state by arithmetic
// (context_of_slot) instead of a load.
constexpr uint32_t kMaxDeviceSlots = 1u << 14;  // bits 48-61: bit 62 is kUserdataAccessHooked
GPUOBS_HD constexpr uint64_t slot_userdata(uint64_t slot_address, uint32_t slot) {
  return (slot_address & kSlotAddressMask) | (uint64_t(slot & (kMaxDeviceSlots - 1)) << 48);
}
GPUOBS_HD constexpr uint32_t slot_in_userdata(uint64_t userdata) {
  return uint32_t((userdata >> 48) & (kMaxDeviceSlots - 1));
}

// The part the host rewrites when the config changes: one contiguous copy.
struct DeviceConfig {
  uint64_t config;
  uint64_t generation;
  uint64_t replay;  // replay sequence of the graph launch in progress, | kReplayEnded once its nodes are done
  uint64_t reserved;
};
static_assert(offsetof(DeviceConfig, replay) == 16, "the replay word the host copies per replay");
static_assert(sizeof(DeviceConfig) == 32, "DeviceConfig is 32 bytes");

struct alignas(256) DeviceContextState {
  // ring (device-written words on their own line)
  uint64_t ring_head;           // tickets claimed
  uint64_t ring_limit;          // cached consumer tail + capacity
  uint64_t ring_reserved;       // room promised (ring::claim)
  uint64_t ring_refresh_after;  // device-clock time before which the tail is not re-read
  uint64_t moved_limit;         // the limit ring::claim_cached claims against, moved by the host only
                                // (a word of its own: a host copy never undoes a device fetch_max)
  uint64_t reserved0[3];
  // ring description (host-written once)
  EventRecord* ring;          // host-mapped event ring in the segment
  uint64_t* consumer_tail;    // host-mapped RingControl::tail in the segment
  uint64_t ring_capacity;     // power of two
  uint64_t reserved_capture;  // (was the capture array: the verdict is in each slot's flags now)
  DeviceKernelSlot* slots;    // [kernel_slots]
  uint32_t kernel_slots;
  uint32_t ring_index;
  uint64_t reserved1[2];
  DeviceConfig config;  // mirrored from the host on change
  uint64_t reserved2[12];
};
static_assert(sizeof(DeviceContextState) == 256, "DeviceContextState header is 256 bytes");
static_assert(offsetof(DeviceContextState, config) % 32 == 0, "config block aligned");

// Layout of one context's device allocation: state, the replay spans, then the slots.
GPUOBS_HD constexpr uint64_t device_spans_offset() { return sizeof(DeviceContextState); }
GPUOBS_HD constexpr uint64_t device_slots_offset() {
  return device_spans_offset() + uint64_t(kReplaySpanSlots) * sizeof(DeviceReplaySpan);
}
GPUOBS_HD DeviceReplaySpan* replay_spans_of(DeviceContextState* context) {
  return reinterpret_cast<DeviceReplaySpan*>(reinterpret_cast<uint8_t*>(context) + device_spans_offset());
}
// The context state a slot belongs to, from the slot's address and index (slot_userdata).
GPUOBS_HD const DeviceContextState* context_of_slot(uint64_t slot_address, uint32_t slot) {
  return reinterpret_cast<const DeviceContextState*>(slot_address - device_slots_offset() -
                                                     uint64_t(slot) * sizeof(DeviceKernelSlot));
}
constexpr uint64_t device_state_bytes(uint32_t kernel_slots) {
  return device_slots_offset() + uint64_t(kernel_slots) * sizeof(DeviceKernelSlot);
}

}  // namespace gpuobs
