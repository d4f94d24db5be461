// The one definition of the gpuobs shared-memory segment and its records.
//
// Everything that crosses a process boundary is defined here, once: the injector and
// gpuobs-synth write it, the native reader reads it, and Python gets the numpy dtypes, dicts,
// names and constants from the pybind11 module built from this header (never from a second
// copy). Fixed widths, little endian, no pointers, every struct size pinned by static_assert
// and every struct's members listed in its field table (field_table.h), which must account for
// every byte. Bump kLayoutVersion on any change that moves a byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuobs/field_table.h"

// Functions shared by host code and patch functions.
#if defined(__CUDACC__)
#define GPUOBS_HD __host__ __device__ __forceinline__
#else
#define GPUOBS_HD inline
#endif

namespace gpuobs {

constexpr uint64_t kMagic = 0x474553424f555047ULL;  // "GPUOBSEG" read as little-endian bytes
constexpr uint32_t kLayoutVersion = 8;              // 2: graph launch and graph exec records; 3: the launch census;
                                        // 4: op records, a launch's thread, identity and GPUs in the header;
                                        // 5: graph nodes an op captured, the graph an exec was made from
                                        // moved to the device (launch events, kernel shapes section);
                                        // 6: sampled in the block set (block event flags), access hooks
                                        // for chosen kernels (kernel entry flags, a counter), a 1 KiB
                                        // header with start-up settings (the chosen kernels, the cubin
                                        // directory), blocks exited per kernel;
                                        // 7: step text lines carry each request's scheduled
                                        // tokens ('id\ttokens'), sent when ids or counts change;
                                        // 8: replay span records and their counters
constexpr uint32_t kEventRecordBytes = 64;
constexpr uint32_t kLaunchRecordBytes = 128;
constexpr uint32_t kPageBytes = 4096;

// Bit 63 of a record's seq marks "claimed, being written": a reader that finds it on a slot
// whose writer is dead knows the slot is torn, not merely not yet claimed.
constexpr uint64_t kSeqWriting = 1ULL << 63;

// ---- enums (wire values) -----------------------------------------------------------------

// A wire value and the name Python, the CLI and the environment know it by.
template <class E>
struct Named {
  E value;
  const char* name;
};

// True when `table` lists the values first, first + 1, ... in order (names are found by value).
template <class E, size_t N>
constexpr bool dense_from(const Named<E> (&table)[N], uint32_t first) {
  for (size_t i = 0; i < N; ++i)
    if (uint32_t(table[i].value) != first + i) return false;
  return true;
}

constexpr bool same_text(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

// The name of `value` in a dense table starting at `first`; "unknown" for a value it lacks.
template <class E, size_t N>
constexpr const char* name_in(const Named<E> (&table)[N], uint32_t first, uint32_t value) {
  return value >= first && value - first < N ? table[value - first].name : "unknown";
}

// The value named `name`; false when the table has no such name.
template <class E, size_t N>
constexpr bool parse_name(const Named<E> (&table)[N], const char* name, E* out) {
  for (size_t i = 0; i < N; ++i) {
    if (same_text(table[i].name, name)) {
      *out = table[i].value;
      return true;
    }
  }
  return false;
}

enum class Mode : uint32_t { Off = 0, Noop = 1, Counter = 2, Blocks = 3, Memory = 4, Sampled = 5 };
constexpr uint32_t kMaxShift = 31;

// Every mode, once: its name and what it asks of the patches. A new mode is a value above and a
// row here; the patches' and gpuobs-synth's handling of it (block_capture in device_state.h)
// are the only other code to change.
//
// What each mode records depends on the kernel's hooks: a kernel whose module carries the memory
// access hooks (the memory patch set, or a kernel chosen by GPUOBS_MEMORY_KERNELS in the block
// set) records accesses in `memory` and `sampled`; any other kernel records nothing in `memory`
// (it is counted, as in `counter`) and 1 in 2^shift blocks in `sampled`.
struct ModeInfo {
  Mode mode;
  const char* name;
  bool records_accesses;  // records nothing but accesses: a process with no access hook anywhere
                          // needs the memory patch set for it
  bool emits_events;      // puts events into the event ring at all
  bool sampled;           // the sample shift applies
};
inline constexpr ModeInfo kModes[] = {
    {Mode::Off, "off", false, false, false},         {Mode::Noop, "noop", false, false, false},
    {Mode::Counter, "counter", false, false, false}, {Mode::Blocks, "blocks", false, true, false},
    {Mode::Memory, "memory", true, true, false},     {Mode::Sampled, "sampled", false, true, true},
};
constexpr uint32_t kModeCount = uint32_t(sizeof(kModes) / sizeof(kModes[0]));
constexpr bool modes_in_order() {
  for (uint32_t i = 0; i < kModeCount; ++i)
    if (uint32_t(kModes[i].mode) != i) return false;
  return true;
}
static_assert(modes_in_order(), "kModes lists every mode at its wire value");

constexpr const char* mode_name(Mode m) { return uint32_t(m) < kModeCount ? kModes[uint32_t(m)].name : "unknown"; }
constexpr bool mode_records_accesses(Mode m) {
  return uint32_t(m) < kModeCount && kModes[uint32_t(m)].records_accesses;
}
constexpr bool mode_emits_events(Mode m) { return uint32_t(m) < kModeCount && kModes[uint32_t(m)].emits_events; }
// Parses a mode's name; false when unknown.
constexpr bool parse_mode(const char* name, Mode* out) {
  for (const ModeInfo& info : kModes) {
    if (same_text(info.name, name)) {
      *out = info.mode;
      return true;
    }
  }
  return false;
}

// Patch sets: which instructions a process patches, fixed at its start.
enum class PatchSet : uint32_t { Block = 0, Memory = 1 };
inline constexpr Named<PatchSet> kPatchSetNames[] = {{PatchSet::Block, "block"}, {PatchSet::Memory, "memory"}};
static_assert(dense_from(kPatchSetNames, 0), "patch sets in wire order");
constexpr uint32_t kPatchSetCount = uint32_t(sizeof(kPatchSetNames) / sizeof(kPatchSetNames[0]));
constexpr const char* patch_set_name(PatchSet set) { return name_in(kPatchSetNames, 0, uint32_t(set)); }

enum class EventKind : uint8_t {
  Invalid = 0,
  BlockEnter = 1,
  BlockExit = 2,
  MemoryAccess = 3,
  BulkCopy = 4,  // cp.async.bulk and friends (one record per block-level copy): its size is `thread`
                 // blocks of `access_bytes` (16) bytes
  Launch = 5,    // a kernel launch, from the leader of its block (0,0,0) in the event modes: address
                 // holds the grid shape (pack_grid), block_x/y/z the block shape
};
inline constexpr Named<EventKind> kEventKindNames[] = {
    {EventKind::BlockEnter, "block_enter"},
    {EventKind::BlockExit, "block_exit"},
    {EventKind::MemoryAccess, "memory_access"},
    {EventKind::BulkCopy, "bulk_copy"},
    {EventKind::Launch, "launch"},
};
static_assert(dense_from(kEventKindNames, 1), "event kinds from 1 (0 is invalid), in wire order");
constexpr uint32_t kEventKindCount = 1 + uint32_t(sizeof(kEventKindNames) / sizeof(kEventKindNames[0]));

// Memory access flags carried in EventRecord::flags (match SANITIZER_MEMORY_DEVICE_FLAG_*).
enum MemoryFlags : uint16_t {
  kAccessRead = 0x1,
  kAccessWrite = 0x2,
  kAccessAtomic = 0x4,
  kAccessPrefetch = 0x8,
};
// Block event flags (EventRecord::flags of block enters, exits and launch events).
enum BlockEventFlags : uint16_t {
  kBlockSampled = 0x10,       // recorded in `sampled`: its block was one of 1 in 2^shift (sample_hash.h)
  kBlockEarlierEpoch = 0x20,  // a sampled exit recorded by the choice of the epoch before its own
                              // (its block may have entered in it): without its enter it is no anomaly
};

// Launch table records: kernel launches (1, 2) and the graph events around them (3-5), which
// carry no kernel (kernel_slot = UINT32_MAX, no geometry).
// Kernel launch records (1, 2) come from host callbacks, which the steady state does not make:
// the device counts launches (KernelCounters, KernelShapes). Eager records exist only with the
// opt-in launch trace (kLaunchTrace); node records for a graph exec's first replays (the
// injector learns its nodes' grid ids) and with the trace; a graph launch record says which.
enum class LaunchKind : uint32_t {
  Eager = 1,               // LAUNCH_BEGIN of an ordinary launch (launch trace only)
  GraphNode = 2,           // NODE_LAUNCH_BEGIN inside a graph replay (kernel nodes only)
  GraphLaunch = 3,         // GRAPHS_LAUNCH_BEGIN: one replay; graph_exec, stream, replay
  GraphExecCreated = 4,    // GRAPHEXEC_CREATED: graph_exec
  GraphExecDestroyed = 5,  // GRAPHEXEC_DESTROYING: graph_exec
  Step = 6,                // a serving engine's step (StepRecord), written by a framework plugin
  StepText = 7,            // request ids and scheduled tokens of the step before it (StepTextRecord)
  Op = 8,                  // a framework op about to launch its kernels (OpRecord), from a plugin
  OpText = 9,              // the op's label (StepTextRecord's layout, `step` = the op's number)
  OpNodes = 10,            // graph nodes an op added to a graph being captured (OpNodesRecord)
  ReplaySpan = 11,         // a graph replay's span on the device (ReplaySpanRecord), from the tool thread
};
inline constexpr Named<LaunchKind> kLaunchKindNames[] = {
    {LaunchKind::Eager, "eager"},
    {LaunchKind::GraphNode, "graph_node"},
    {LaunchKind::GraphLaunch, "graph_launch"},
    {LaunchKind::GraphExecCreated, "graph_exec_created"},
    {LaunchKind::GraphExecDestroyed, "graph_exec_destroyed"},
    {LaunchKind::Step, "step"},
    {LaunchKind::StepText, "step_text"},
    {LaunchKind::Op, "op"},
    {LaunchKind::OpText, "op_text"},
    {LaunchKind::OpNodes, "op_nodes"},
    {LaunchKind::ReplaySpan, "replay_span"},
};
static_assert(dense_from(kLaunchKindNames, 1), "launch kinds from 1 (0 is invalid), in wire order");
constexpr uint32_t kLaunchKindCount = 1 + uint32_t(sizeof(kLaunchKindNames) / sizeof(kLaunchKindNames[0]));
constexpr bool is_kernel_launch(uint32_t kind) {
  return kind == uint32_t(LaunchKind::Eager) || kind == uint32_t(LaunchKind::GraphNode);
}

enum class ControlStatus : uint32_t {
  Ok = 0,
  InvalidArgument = 1,     // bad mode/shift/filter: previous config kept
  FailedPrecondition = 2,  // needs another patch set while graph execs are alive
  Internal = 3,
};
inline constexpr Named<ControlStatus> kControlStatusNames[] = {
    {ControlStatus::Ok, "ok"},
    {ControlStatus::InvalidArgument, "invalid_argument"},
    {ControlStatus::FailedPrecondition, "failed_precondition"},
    {ControlStatus::Internal, "internal"},
};
static_assert(dense_from(kControlStatusNames, 0), "control statuses in wire order");

enum class SegmentState : uint32_t { Initialising = 0, Live = 1, Exited = 2 };
inline constexpr Named<SegmentState> kSegmentStateNames[] = {
    {SegmentState::Initialising, "initialising"}, {SegmentState::Live, "live"}, {SegmentState::Exited, "exited"}};
static_assert(dense_from(kSegmentStateNames, 0), "segment states in wire order");

enum class ProducerKind : uint32_t { Injector = 1, Synth = 2, Test = 3 };
inline constexpr Named<ProducerKind> kProducerKindNames[] = {
    {ProducerKind::Injector, "injector"}, {ProducerKind::Synth, "synth"}, {ProducerKind::Test, "test"}};
static_assert(dense_from(kProducerKindNames, 1), "producer kinds in wire order");

// What a producer's events can say, fixed at its start.
enum ProducerFlags : uint32_t {
  kBlockExitsHooked = 0x1,  // block exits are recorded (GPUOBS_BLOCK_EXIT=1): in-flight blocks and
                            // block durations can be derived; without it an enter has no partner
  kLaunchTrace = 0x2,       // a host record per kernel launch (GPUOBS_LAUNCH_TRACE=1, opt-in: each
                            // launch then costs a host callback)
};
// The header's producer_flags by name: Python sees each as a bool in the header.
inline constexpr Named<uint32_t> kProducerFlagNames[] = {{kBlockExitsHooked, "block_exits_hooked"},
                                                         {kLaunchTrace, "launch_trace"}};

// ---- records -----------------------------------------------------------------------------

// One device event: one cache line, written by the device (or gpuobs-synth playing it).
// seq is stored last, after a system fence: seq == ticket + 1 means the record is complete.
struct alignas(64) EventRecord {
  uint64_t globaltimer_ns;  // device %globaltimer (raw ns); never mixed with host clocks
  uint64_t pc;              // SASS pc of the patched instruction
  uint64_t address;         // memory events: the accessed address; 0 otherwise
  uint64_t grid_id;         // %gridid: join key with LaunchRecord::grid_id
  uint32_t block_x;         // blockIdx.x
  uint16_t block_y;         // blockIdx.y (gridDim.y <= 65535)
  uint16_t block_z;         // blockIdx.z (gridDim.z <= 65535)
  uint16_t thread;          // linear thread index in the block (memory events)
  uint16_t sm_id;           // %smid
  uint32_t kernel_slot;     // index into the kernel table
  uint32_t replay;          // low 32 bits of the replay sequence in force on the device: the join
                            // key with LaunchRecord::replay for graph nodes (grid ids repeat across
                            // replays); meaningless for eager launches, whose grid id is unique
  uint8_t kind;             // EventKind
  uint8_t access_bytes;     // memory events: access size in bytes
  uint16_t flags;           // MemoryFlags for memory events
  uint64_t seq;             // ticket + 1, stored last; kSeqWriting while being written
};
static_assert(sizeof(EventRecord) == kEventRecordBytes, "EventRecord is one cache line");
static_assert(offsetof(EventRecord, seq) == 56, "seq is the last word");
inline constexpr Field kEventRecordFields[] = {
    GPUOBS_FIELD(EventRecord, globaltimer_ns), GPUOBS_FIELD(EventRecord, pc),      GPUOBS_FIELD(EventRecord, address),
    GPUOBS_FIELD(EventRecord, grid_id),        GPUOBS_FIELD(EventRecord, block_x), GPUOBS_FIELD(EventRecord, block_y),
    GPUOBS_FIELD(EventRecord, block_z),        GPUOBS_FIELD(EventRecord, thread),  GPUOBS_FIELD(EventRecord, sm_id),
    GPUOBS_FIELD(EventRecord, kernel_slot),    GPUOBS_FIELD(EventRecord, replay),  GPUOBS_FIELD(EventRecord, kind),
    GPUOBS_FIELD(EventRecord, access_bytes),   GPUOBS_FIELD(EventRecord, flags),   GPUOBS_FIELD(EventRecord, seq),
};
static_assert(covers(kEventRecordFields, sizeof(EventRecord)), "kEventRecordFields lists every member");

// One launch as the host callbacks saw it (eager launch or graph node launch).
struct alignas(64) LaunchRecord {
  uint64_t host_time_ns;     // CLOCK_MONOTONIC at the launch callback
  uint64_t grid_id;          // Sanitizer_LaunchData.gridId (== device %gridid)
  uint64_t stream;           // stream handle as an integer
  uint64_t graph_exec;       // graph exec handle, 0 for eager launches
  uint64_t graph_node;       // graph node handle (GraphNode); for GraphExecCreated the CUgraph the exec
                             // was instantiated from (what OpNodes records name); 0 otherwise
  uint64_t graph_launch_id;  // replay launch id of the graph exec, 0 for eager launches
  uint32_t kernel_slot;
  uint32_t grid_x;
  uint32_t grid_y;
  uint32_t grid_z;
  uint32_t block_x;
  uint32_t block_y;
  uint32_t block_z;
  uint32_t context_index;  // which event ring the device events of this launch go to
  uint32_t kind;           // LaunchKind
  uint32_t mode;           // Mode in force for this launch
  uint32_t shift;          // sample shift in force for this launch
  uint32_t flags;          // bit 0: captured by the kernel filter
  uint64_t replay;         // graph nodes and graph launches: the replay sequence the host pushed
                           // to the device for this replay (its low 32 bits are EventRecord::replay);
                           // 0 for eager launches and for a node whose replay was not seen
  uint64_t thread;         // OS thread id of the launching thread (eager launches; 0 otherwise)
  uint64_t op;             // the framework op open on the launching thread (its OpRecord's number),
                           // 0 for none: set per thread by gpuobs_record_op, so a dropped record
                           // never shifts the launches of one op onto another
  uint64_t seq;            // ticket + 1, stored last
};
static_assert(sizeof(LaunchRecord) == kLaunchRecordBytes, "LaunchRecord is two cache lines");
static_assert(offsetof(LaunchRecord, seq) == 120, "seq is the last word");
inline constexpr Field kLaunchRecordFields[] = {
    GPUOBS_FIELD(LaunchRecord, host_time_ns), GPUOBS_FIELD(LaunchRecord, grid_id),
    GPUOBS_FIELD(LaunchRecord, stream),       GPUOBS_FIELD(LaunchRecord, graph_exec),
    GPUOBS_FIELD(LaunchRecord, graph_node),   GPUOBS_FIELD(LaunchRecord, graph_launch_id),
    GPUOBS_FIELD(LaunchRecord, kernel_slot),  GPUOBS_FIELD(LaunchRecord, grid_x),
    GPUOBS_FIELD(LaunchRecord, grid_y),       GPUOBS_FIELD(LaunchRecord, grid_z),
    GPUOBS_FIELD(LaunchRecord, block_x),      GPUOBS_FIELD(LaunchRecord, block_y),
    GPUOBS_FIELD(LaunchRecord, block_z),      GPUOBS_FIELD(LaunchRecord, context_index),
    GPUOBS_FIELD(LaunchRecord, kind),         GPUOBS_FIELD(LaunchRecord, mode),
    GPUOBS_FIELD(LaunchRecord, shift),        GPUOBS_FIELD(LaunchRecord, flags),
    GPUOBS_FIELD(LaunchRecord, replay),       GPUOBS_FIELD(LaunchRecord, thread),
    GPUOBS_FIELD(LaunchRecord, op),           GPUOBS_FIELD(LaunchRecord, seq),
};
static_assert(covers(kLaunchRecordFields, sizeof(LaunchRecord)), "kLaunchRecordFields lists every member");
constexpr uint32_t kLaunchCaptured = 0x1;
// Graph launch records: the node launches of this replay follow as GraphNode records. Without
// it, the replay ran the nodes last recorded for its graph exec (a graph exec's kernel nodes
// and their grid ids never change), and no host callback was made per node.
constexpr uint32_t kGraphNodesRecorded = 0x2;

// Host annotations travel in the launch ring, in records of a launch record's size with `kind`
// and `seq` where a launch record has them, so they are ordered with the launches they explain:
// the launches a thread makes after its step record belong to that step.
struct alignas(64) StepRecord {
  uint64_t host_time_ns;  // CLOCK_MONOTONIC when the step began
  uint64_t step;          // the engine's step number in this process
  uint64_t thread;        // OS thread id of the engine thread (its launches follow this record)
  uint32_t requests;      // requests scheduled in this step
  uint32_t tokens;        // tokens scheduled in this step
  uint32_t text_bytes;    // bytes of the step's text (its grammar below) in the StepText records that follow
  uint32_t text_records;  // how many StepText records follow
  uint64_t flops;         // the engine's estimate of the step's floating-point operations per GPU
                          // (vLLM with --enable-mfu-metrics); 0: it gives none (or an older writer)
  uint8_t unused[32];
  uint32_t kind;   // LaunchKind::Step
  uint32_t flags;  // kStepSameRequests
  uint64_t reserved[4];
  uint64_t seq;
};
static_assert(sizeof(StepRecord) == kLaunchRecordBytes, "StepRecord is a launch ring record");
static_assert(offsetof(StepRecord, kind) == offsetof(LaunchRecord, kind), "kind where a launch record has it");
static_assert(offsetof(StepRecord, seq) == 120, "seq is the last word");
inline constexpr Field kStepRecordFields[] = {
    GPUOBS_FIELD(StepRecord, host_time_ns), GPUOBS_FIELD(StepRecord, step),   GPUOBS_FIELD(StepRecord, thread),
    GPUOBS_FIELD(StepRecord, requests),     GPUOBS_FIELD(StepRecord, tokens), GPUOBS_FIELD(StepRecord, text_bytes),
    GPUOBS_FIELD(StepRecord, text_records), GPUOBS_FIELD(StepRecord, flops),  GPUOBS_RESERVED(StepRecord, unused),
    GPUOBS_FIELD(StepRecord, kind),         GPUOBS_FIELD(StepRecord, flags),  GPUOBS_RESERVED(StepRecord, reserved),
    GPUOBS_FIELD(StepRecord, seq),
};
static_assert(covers(kStepRecordFields, sizeof(StepRecord)), "kStepRecordFields lists every member");
constexpr uint32_t kStepSameRequests = 0x2;  // the same requests and tokens each as the step before: no text
// A step's text: UTF-8 lines split by '\n'. A line for each request scheduled, in the scheduler's
// order: ID '\t' TOKENS, then, where KV-cache blocks became the request's in this step (all of a
// new or resumed request's, then those appended), '\t' and their ids, comma separated. A line
// that begins with kStepTextDirective is a directive: kStepTextSame (the requests and tokens are
// those of the step before; the request lines that follow carry only blocks, TOKENS empty), or
// kStepTextKvCache, a space and the KV cache's layout as JSON (gpuobs.step_text says its keys).
constexpr char kStepTextDirective = '\x1f';
constexpr const char* kStepTextSame = "same";
constexpr const char* kStepTextKvCache = "kv-cache";

// A framework op (a PyTorch op: its module path, op name, input dtypes and shapes, as one label)
// about to launch its kernels on `thread`: the launch records whose `op` is its number are the
// op's. Its label follows in OpText records.
constexpr uint32_t kMaxOpLabelBytes = 4096;
struct alignas(64) OpRecord {
  uint64_t host_time_ns;  // CLOCK_MONOTONIC when the op began
  uint64_t op;            // the op's number in this process (from 1)
  uint64_t thread;        // OS thread id of the thread that runs it
  uint32_t text_bytes;    // bytes of label in the OpText records that follow
  uint32_t text_records;  // how many OpText records follow
  uint8_t unused[48];
  uint32_t kind;  // LaunchKind::Op
  uint32_t flags;
  uint64_t reserved[4];
  uint64_t seq;
};
static_assert(sizeof(OpRecord) == kLaunchRecordBytes, "OpRecord is a launch ring record");
static_assert(offsetof(OpRecord, kind) == offsetof(LaunchRecord, kind), "kind where a launch record has it");
static_assert(offsetof(OpRecord, seq) == 120, "seq is the last word");
inline constexpr Field kOpRecordFields[] = {
    GPUOBS_FIELD(OpRecord, host_time_ns), GPUOBS_FIELD(OpRecord, op),           GPUOBS_FIELD(OpRecord, thread),
    GPUOBS_FIELD(OpRecord, text_bytes),   GPUOBS_FIELD(OpRecord, text_records), GPUOBS_RESERVED(OpRecord, unused),
    GPUOBS_FIELD(OpRecord, kind),         GPUOBS_FIELD(OpRecord, flags),        GPUOBS_RESERVED(OpRecord, reserved),
    GPUOBS_FIELD(OpRecord, seq),
};
static_assert(covers(kOpRecordFields, sizeof(OpRecord)), "kOpRecordFields lists every member");

// A graph replay's span on the device, in `counter` mode and up (replay_spans.h): block
// (0,0,0)'s entries of its kernels, first to last, folded on the device and written by the
// injector's tool thread once the replay was done. It follows its replay's graph launch record.
struct alignas(64) ReplaySpanRecord {
  uint64_t host_time_ns;    // CLOCK_MONOTONIC when the tool thread read it
  uint64_t replay;          // the replay's number (its graph launch record's `replay`)
  uint64_t first_entry_ns;  // device %globaltimer: the earliest block (0,0,0) entry of its kernels
  uint64_t last_entry_ns;   // ... the latest: the last kernel's own run after it is not in the span
  uint64_t launches;        // kernel launches of the replay that folded in (its kernel nodes)
  uint32_t context_index;   // the context (event ring) it ran in
  uint32_t unused0;
  uint8_t unused[32];
  uint32_t kind;  // LaunchKind::ReplaySpan
  uint32_t flags;
  uint64_t reserved[4];
  uint64_t seq;
};
static_assert(sizeof(ReplaySpanRecord) == kLaunchRecordBytes, "ReplaySpanRecord is a launch ring record");
static_assert(offsetof(ReplaySpanRecord, kind) == offsetof(LaunchRecord, kind), "kind where a launch record has it");
static_assert(offsetof(ReplaySpanRecord, seq) == 120, "seq is the last word");
inline constexpr Field kReplaySpanRecordFields[] = {
    GPUOBS_FIELD(ReplaySpanRecord, host_time_ns),   GPUOBS_FIELD(ReplaySpanRecord, replay),
    GPUOBS_FIELD(ReplaySpanRecord, first_entry_ns), GPUOBS_FIELD(ReplaySpanRecord, last_entry_ns),
    GPUOBS_FIELD(ReplaySpanRecord, launches),       GPUOBS_FIELD(ReplaySpanRecord, context_index),
    GPUOBS_RESERVED(ReplaySpanRecord, unused0),     GPUOBS_RESERVED(ReplaySpanRecord, unused),
    GPUOBS_FIELD(ReplaySpanRecord, kind),           GPUOBS_FIELD(ReplaySpanRecord, flags),
    GPUOBS_RESERVED(ReplaySpanRecord, reserved),    GPUOBS_FIELD(ReplaySpanRecord, seq),
};
static_assert(covers(kReplaySpanRecordFields, sizeof(ReplaySpanRecord)), "kReplaySpanRecordFields lists every member");

// Graph nodes that the op `op` added to the graph `graph` while a stream captured it: the nodes
// of graph execs instantiated from that graph (GraphExecCreated names it) carry the op's label.
// Node handles are the ones the Sanitizer's node-launch callbacks give at replay (the same
// values, measured on the H200 with the captured graph kept; tests/gpu/test_ops_graph_gpu.py).
// Nodes added outside any op have op 0: they keep the capture's kernel order whole, which
// places a node by its position when handles do not match.
constexpr uint32_t kOpNodesPerRecord = 6;
struct CapturedNode {
  uint64_t node;  // CUgraphNode
};
inline constexpr Field kCapturedNodeFields[] = {GPUOBS_FIELD(CapturedNode, node)};
static_assert(covers(kCapturedNodeFields, sizeof(CapturedNode)), "kCapturedNodeFields lists every member");
struct alignas(64) OpNodesRecord {
  uint64_t host_time_ns;
  uint64_t op;                            // the op's number (its OpRecord), 0 when no op was open on the thread
  uint64_t graph;                         // the CUgraph being captured
  uint32_t count;                         // nodes in this record (1..kOpNodesPerRecord)
  uint32_t kernel_mask;                   // bit i: nodes[i] is a kernel node
  CapturedNode nodes[kOpNodesPerRecord];  // in the order the capture added them
  uint32_t kind;                          // LaunchKind::OpNodes
  uint32_t flags;
  uint64_t capture_id;  // the driver's id of the capture (unique in the process; a graph handle is not)
  uint64_t reserved[3];
  uint64_t seq;
};
static_assert(sizeof(OpNodesRecord) == kLaunchRecordBytes, "OpNodesRecord is a launch ring record");
static_assert(offsetof(OpNodesRecord, kind) == offsetof(LaunchRecord, kind), "kind where a launch record has it");
static_assert(offsetof(OpNodesRecord, seq) == 120, "seq is the last word");
inline constexpr Field kOpNodesRecordFields[] = {
    GPUOBS_FIELD(OpNodesRecord, host_time_ns), GPUOBS_FIELD(OpNodesRecord, op),
    GPUOBS_FIELD(OpNodesRecord, graph),        GPUOBS_FIELD(OpNodesRecord, count),
    GPUOBS_FIELD(OpNodesRecord, kernel_mask),  GPUOBS_RECORDS(OpNodesRecord, nodes, kCapturedNodeFields),
    GPUOBS_FIELD(OpNodesRecord, kind),         GPUOBS_FIELD(OpNodesRecord, flags),
    GPUOBS_FIELD(OpNodesRecord, capture_id),   GPUOBS_RESERVED(OpNodesRecord, reserved),
    GPUOBS_FIELD(OpNodesRecord, seq),
};
static_assert(covers(kOpNodesRecordFields, sizeof(OpNodesRecord)), "kOpNodesRecordFields lists every member");

constexpr uint32_t kStepTextBytes = 56;
struct alignas(64) StepTextRecord {
  uint64_t host_time_ns;
  uint64_t step;    // the step these ids belong to (for OpText: the op this label belongs to)
  uint32_t offset;  // of this piece within the step's text
  uint32_t length;  // bytes of text in this record
  char text[kStepTextBytes];
  uint32_t kind;  // LaunchKind::StepText
  uint32_t reserved32;
  uint64_t reserved[4];
  uint64_t seq;
};
static_assert(sizeof(StepTextRecord) == kLaunchRecordBytes, "StepTextRecord is a launch ring record");
static_assert(offsetof(StepTextRecord, kind) == offsetof(LaunchRecord, kind), "kind where a launch record has it");
static_assert(offsetof(StepTextRecord, seq) == 120, "seq is the last word");
inline constexpr Field kStepTextRecordFields[] = {
    GPUOBS_FIELD(StepTextRecord, host_time_ns),  GPUOBS_FIELD(StepTextRecord, step),
    GPUOBS_FIELD(StepTextRecord, offset),        GPUOBS_FIELD(StepTextRecord, length),
    GPUOBS_FIELD(StepTextRecord, text),          GPUOBS_FIELD(StepTextRecord, kind),
    GPUOBS_RESERVED(StepTextRecord, reserved32), GPUOBS_RESERVED(StepTextRecord, reserved),
    GPUOBS_FIELD(StepTextRecord, seq),
};
static_assert(covers(kStepTextRecordFields, sizeof(StepTextRecord)), "kStepTextRecordFields lists every member");

// ---- segment sections --------------------------------------------------------------------

struct Capacities {
  uint32_t event_rings = 1;                 // one per CUDA context
  uint32_t event_ring_records = 1u << 18;   // power of two
  uint32_t launch_ring_records = 1u << 14;  // power of two
  uint32_t kernel_slots = 4096;
  uint32_t name_arena_bytes = 4u << 20;
};

constexpr uint32_t kMaxEventRings = 64;
constexpr uint32_t kMaxRingRecords = 1u << 26;
constexpr uint32_t kMaxKernelSlots = 1u << 20;
constexpr uint32_t kMaxNameArenaBytes = 256u << 20;

// The GPU one of the process's contexts runs on, as the injector reads it when the context is
// created (the device as the process sees it, after CUDA_VISIBLE_DEVICES).
struct GpuIdentity {
  uint32_t ordinal;     // CUdevice
  uint32_t context;     // the context's index (its event ring)
  char pci_bus_id[16];  // "0000:3b:00.0"
  char uuid[48];        // "GPU-..." (cuDeviceGetUuid_v2: a MIG instance's own UUID under MIG)
};
static_assert(sizeof(GpuIdentity) == 72, "GpuIdentity is 72 bytes");
inline constexpr Field kGpuIdentityFields[] = {
    GPUOBS_FIELD(GpuIdentity, ordinal),
    GPUOBS_FIELD(GpuIdentity, context),
    GPUOBS_FIELD(GpuIdentity, pci_bus_id),
    GPUOBS_FIELD(GpuIdentity, uuid),
};
static_assert(covers(kGpuIdentityFields, sizeof(GpuIdentity)), "kGpuIdentityFields lists every member");
constexpr uint32_t kSegmentGpus = 2;  // GPUs named in the header; gpu_count counts them all

// Who the process is in a serving deployment, as a framework plugin says (vLLM: the engine's
// worker with its rank): fields, so that views and metrics can select and group by them.
enum class ProcessRole : uint32_t { Unknown = 0, Engine = 1, ApiServer = 2, Other = 3 };
inline constexpr Named<ProcessRole> kProcessRoleNames[] = {
    {ProcessRole::Unknown, "unknown"},
    {ProcessRole::Engine, "engine"},
    {ProcessRole::ApiServer, "api_server"},
    {ProcessRole::Other, "other"},
};
constexpr uint32_t kIdentitySet = 0x1;     // identity_flags: role, rank, world size and model were set
constexpr uint32_t kTakesOpWindows = 0x2;  // identity_flags: a framework plugin asks for op windows (each step)

constexpr uint32_t kHeaderTextBytes = 256;                  // a start-up setting's text, its terminating zero included
constexpr uint32_t kMemoryKernelsBytes = kHeaderTextBytes;  // GPUOBS_MEMORY_KERNELS: at most 255 bytes

struct SegmentHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_bytes;
  uint64_t segment_bytes;
  uint32_t pid;
  uint32_t producer_kind;       // ProducerKind
  uint64_t pid_start_ticks;     // /proc/PID/stat field 22: tells a reused pid apart
  uint64_t start_monotonic_ns;  // CLOCK_MONOTONIC at creation
  uint64_t start_realtime_ns;   // CLOCK_REALTIME at creation
  uint32_t event_rings;
  uint32_t event_ring_records;
  uint32_t launch_ring_records;
  uint32_t kernel_slots;
  uint32_t name_arena_bytes;
  uint32_t event_record_bytes;
  uint32_t launch_record_bytes;
  uint32_t patch_set;  // PatchSet the process started with
  uint64_t control_offset;
  uint64_t counters_offset;
  uint64_t ring_controls_offset;
  uint64_t kernel_counters_offset;
  uint64_t kernel_table_offset;
  uint64_t name_arena_offset;
  uint64_t launch_ring_offset;
  uint64_t event_rings_offset;
  uint32_t state;            // SegmentState (atomic)
  uint32_t kernel_count;     // kernel table entries published (atomic, release)
  uint64_t heartbeat_ns;     // CLOCK_MONOTONIC of the producer's last publish (atomic)
  uint32_t name_arena_used;  // bytes of the arena in use (atomic, release)
  uint32_t producer_flags;   // ProducerFlags, set at creation
  char producer[32];         // "gpuobs-injector", "gpuobs-synth"
  char label[64];            // free text: role, rank, model
  uint32_t identity_flags;   // kIdentitySet, kTakesOpWindows
  uint32_t role;             // ProcessRole
  uint32_t rank;             // in the serving job (tensor/pipeline parallel ranks)
  uint32_t world_size;
  uint32_t local_rank;  // on this host
  uint32_t gpu_count;   // contexts whose GPU was recorded (the first kSegmentGpus are in gpus)
  char model[64];       // the served model's name
  GpuIdentity gpus[kSegmentGpus];
  uint8_t reserved[8];
  // Start-up settings a reader needs, written before the segment is published:
  char memory_kernels[kHeaderTextBytes];  // GPUOBS_MEMORY_KERNELS as taken ("" for none)
  char cubin_dir[kHeaderTextBytes];       // where module cubins are kept ("" when none can be)
};
static_assert(sizeof(SegmentHeader) == 1024, "SegmentHeader is 1 KiB");
inline constexpr Field kSegmentHeaderFields[] = {
    GPUOBS_FIELD(SegmentHeader, magic),
    GPUOBS_FIELD(SegmentHeader, layout_version),
    GPUOBS_FIELD(SegmentHeader, header_bytes),
    GPUOBS_FIELD(SegmentHeader, segment_bytes),
    GPUOBS_FIELD(SegmentHeader, pid),
    GPUOBS_FIELD(SegmentHeader, producer_kind),
    GPUOBS_FIELD(SegmentHeader, pid_start_ticks),
    GPUOBS_FIELD(SegmentHeader, start_monotonic_ns),
    GPUOBS_FIELD(SegmentHeader, start_realtime_ns),
    GPUOBS_FIELD(SegmentHeader, event_rings),
    GPUOBS_FIELD(SegmentHeader, event_ring_records),
    GPUOBS_FIELD(SegmentHeader, launch_ring_records),
    GPUOBS_FIELD(SegmentHeader, kernel_slots),
    GPUOBS_FIELD(SegmentHeader, name_arena_bytes),
    GPUOBS_FIELD(SegmentHeader, event_record_bytes),
    GPUOBS_FIELD(SegmentHeader, launch_record_bytes),
    GPUOBS_FIELD(SegmentHeader, patch_set),
    GPUOBS_FIELD(SegmentHeader, control_offset),
    GPUOBS_FIELD(SegmentHeader, counters_offset),
    GPUOBS_FIELD(SegmentHeader, ring_controls_offset),
    GPUOBS_FIELD(SegmentHeader, kernel_counters_offset),
    GPUOBS_FIELD(SegmentHeader, kernel_table_offset),
    GPUOBS_FIELD(SegmentHeader, name_arena_offset),
    GPUOBS_FIELD(SegmentHeader, launch_ring_offset),
    GPUOBS_FIELD(SegmentHeader, event_rings_offset),
    GPUOBS_FIELD(SegmentHeader, state),
    GPUOBS_FIELD(SegmentHeader, kernel_count),
    GPUOBS_FIELD(SegmentHeader, heartbeat_ns),
    GPUOBS_FIELD(SegmentHeader, name_arena_used),
    GPUOBS_FIELD(SegmentHeader, producer_flags),
    GPUOBS_FIELD(SegmentHeader, producer),
    GPUOBS_FIELD(SegmentHeader, label),
    GPUOBS_FIELD(SegmentHeader, identity_flags),
    GPUOBS_FIELD(SegmentHeader, role),
    GPUOBS_FIELD(SegmentHeader, rank),
    GPUOBS_FIELD(SegmentHeader, world_size),
    GPUOBS_FIELD(SegmentHeader, local_rank),
    GPUOBS_FIELD(SegmentHeader, gpu_count),
    GPUOBS_FIELD(SegmentHeader, model),
    GPUOBS_RECORDS(SegmentHeader, gpus, kGpuIdentityFields),
    GPUOBS_RESERVED(SegmentHeader, reserved),
    GPUOBS_FIELD(SegmentHeader, memory_kernels),
    GPUOBS_FIELD(SegmentHeader, cubin_dir),
};
static_assert(covers(kSegmentHeaderFields, sizeof(SegmentHeader)), "kSegmentHeaderFields lists every member");

// Desired config (written by the daemon under a seqlock) and applied config (written by the
// producer, applied_generation stored last). One cache-line-separated half per writer.
constexpr uint32_t kFilterBytes = 256;
constexpr uint32_t kStatusMessageBytes = 192;
// The most engine steps one op window may span: a window is a bounded look (the launch trace is on
// for its steps), never a way to leave it on.
constexpr uint32_t kMaxOpsSteps = 1024;
struct ControlBlock {
  // daemon -> producer
  uint64_t desired_seq;  // seqlock: odd while the daemon writes
  uint64_t desired_generation;
  uint32_t desired_mode;
  uint32_t desired_shift;
  uint32_t desired_patch_set;
  uint32_t desired_filter_bytes;
  char desired_filter[kFilterBytes];  // ECMAScript regex on kernel names; empty = all
  uint32_t desired_ops_steps;         // > 0: also open an op window of this many engine steps (a plugin records them)
  uint8_t pad0[92];
  // producer -> daemon
  uint64_t applied_generation;  // stored last
  uint32_t applied_mode;
  uint32_t applied_shift;
  uint32_t applied_patch_set;
  uint32_t status;  // ControlStatus of the last request
  uint64_t applied_time_ns;
  uint32_t applied_filter_bytes;
  uint32_t reserved1;
  char applied_filter[kFilterBytes];
  char status_message[kStatusMessageBytes];
  uint8_t pad1[152];
};
static_assert(sizeof(ControlBlock) == 1024, "ControlBlock is 1 KiB");
static_assert(offsetof(ControlBlock, applied_generation) == 384, "halves on separate lines");
inline constexpr Field kControlBlockFields[] = {
    GPUOBS_FIELD(ControlBlock, desired_seq),
    GPUOBS_FIELD(ControlBlock, desired_generation),
    GPUOBS_FIELD(ControlBlock, desired_mode),
    GPUOBS_FIELD(ControlBlock, desired_shift),
    GPUOBS_FIELD(ControlBlock, desired_patch_set),
    GPUOBS_FIELD(ControlBlock, desired_filter_bytes),
    GPUOBS_TEXT(ControlBlock, desired_filter, desired_filter_bytes),
    GPUOBS_FIELD(ControlBlock, desired_ops_steps),
    GPUOBS_RESERVED(ControlBlock, pad0),
    GPUOBS_FIELD(ControlBlock, applied_generation),
    GPUOBS_FIELD(ControlBlock, applied_mode),
    GPUOBS_FIELD(ControlBlock, applied_shift),
    GPUOBS_FIELD(ControlBlock, applied_patch_set),
    GPUOBS_FIELD(ControlBlock, status),
    GPUOBS_FIELD(ControlBlock, applied_time_ns),
    GPUOBS_FIELD(ControlBlock, applied_filter_bytes),
    GPUOBS_RESERVED(ControlBlock, reserved1),
    GPUOBS_TEXT(ControlBlock, applied_filter, applied_filter_bytes),
    GPUOBS_FIELD(ControlBlock, status_message),
    GPUOBS_RESERVED(ControlBlock, pad1),
};
static_assert(covers(kControlBlockFields, sizeof(ControlBlock)), "kControlBlockFields lists every member");

// Process-wide counters, monotonic. The device part is a snapshot published by the producer
// under publish_seq (a seqlock), so a reader sees one consistent snapshot.
struct GlobalCounters {
  uint64_t publish_seq;
  uint64_t publish_time_ns;
  uint64_t device_events_produced;  // events the device tried to record (after filter+sample)
  uint64_t device_events_dropped;   // ... of which dropped: event ring full ("device" stage)
  uint64_t device_events_claimed;   // ... of which got a ring slot (sum of ring heads)
  uint64_t device_memory_accesses;  // exact access count, all kernels
  uint64_t device_blocks;           // exact observed blocks, all kernels
  uint64_t device_quiescent;        // 1 when the snapshot was taken with no device work in flight
  // host side, updated live (atomic adds)
  uint64_t launches;
  uint64_t launch_records_dropped;  // launch ring full ("host" stage)
  uint64_t kernels_dropped;         // kernel table or name arena full ("table" stage)
  uint64_t launches_unattributed;   // launches of a kernel with no slot (kernel table full), seen by
                                    // the host's launch callbacks, which such a kernel turns on
  uint64_t modules_loaded;
  uint64_t modules_patched;
  uint64_t patch_failures;
  uint64_t control_requests;
  uint64_t cubins_kept;     // module cubins written to the cubin directory (or already there)
  uint64_t cubins_skipped;  // not kept: over the disk budget, unreadable, or the write failed
  // wall time the injector spent inside its own callbacks, so that a slow start or a slow launch
  // rate can be attributed to us or ruled out (the sanitizer's own work is not in these)
  uint64_t resource_callback_ns;  // contexts and module loads, cubin keeping and patching included
  uint64_t launch_callback_ns;    // eager launches
  uint64_t graph_callback_ns;     // graph launches, node launches, graph exec lifetimes
  uint64_t patch_ns;              // ... of resource_callback_ns: patching modules
  uint64_t cubin_ns;              // ... of resource_callback_ns: keeping cubins
  // The graph replay the device began last (its replay word, read with the counters): one
  // stream's replays run in order, so every replay numbered below it has finished and its events
  // are in the rings. With replays in several contexts, the least of theirs (a context that never
  // replayed does not count); 0 before any replay began. The daemon finishes judging a replay only
  // below it: a replay out of its window may not have run yet when the host is far ahead.
  uint64_t device_replay_begun;
  // Profilers started in this process (torch.profiler, vLLM's start_profile), as the vLLM plugin
  // or gpuobs.profiler_notice tells the injector: CUPTI records no GPU activity beside a Sanitizer
  // subscriber (the driver admits one tool), so each of them got an empty trace. 0 in segments of
  // injectors that predate it (the word was reserved).
  uint64_t profiler_starts;
  // Modules given the memory access hooks (every patched module in the memory patch set; in the
  // block set those holding a kernel GPUOBS_MEMORY_KERNELS chose), counted as they are patched.
  uint64_t modules_access_hooked;
  // Graph replays whose device span was read and written as a ReplaySpan record (replay_spans.h),
  // and span slots read that could not say one replay's span (two replays folded into one slot
  // because the tool thread read it too late, or a reset that may have cut one short).
  uint64_t replay_spans;
  uint64_t replay_spans_unclean;
  uint64_t reserved[4];
};
static_assert(sizeof(GlobalCounters) == 256, "GlobalCounters is 256 bytes");
inline constexpr Field kGlobalCountersFields[] = {
    GPUOBS_FIELD(GlobalCounters, publish_seq),
    GPUOBS_FIELD(GlobalCounters, publish_time_ns),
    GPUOBS_FIELD(GlobalCounters, device_events_produced),
    GPUOBS_FIELD(GlobalCounters, device_events_dropped),
    GPUOBS_FIELD(GlobalCounters, device_events_claimed),
    GPUOBS_FIELD(GlobalCounters, device_memory_accesses),
    GPUOBS_FIELD(GlobalCounters, device_blocks),
    GPUOBS_FIELD(GlobalCounters, device_quiescent),
    GPUOBS_FIELD(GlobalCounters, launches),
    GPUOBS_FIELD(GlobalCounters, launch_records_dropped),
    GPUOBS_FIELD(GlobalCounters, kernels_dropped),
    GPUOBS_FIELD(GlobalCounters, launches_unattributed),
    GPUOBS_FIELD(GlobalCounters, modules_loaded),
    GPUOBS_FIELD(GlobalCounters, modules_patched),
    GPUOBS_FIELD(GlobalCounters, patch_failures),
    GPUOBS_FIELD(GlobalCounters, control_requests),
    GPUOBS_FIELD(GlobalCounters, cubins_kept),
    GPUOBS_FIELD(GlobalCounters, cubins_skipped),
    GPUOBS_FIELD(GlobalCounters, resource_callback_ns),
    GPUOBS_FIELD(GlobalCounters, launch_callback_ns),
    GPUOBS_FIELD(GlobalCounters, graph_callback_ns),
    GPUOBS_FIELD(GlobalCounters, patch_ns),
    GPUOBS_FIELD(GlobalCounters, cubin_ns),
    GPUOBS_FIELD(GlobalCounters, device_replay_begun),
    GPUOBS_FIELD(GlobalCounters, profiler_starts),
    GPUOBS_FIELD(GlobalCounters, modules_access_hooked),
    GPUOBS_FIELD(GlobalCounters, replay_spans),
    GPUOBS_FIELD(GlobalCounters, replay_spans_unclean),
    GPUOBS_RESERVED(GlobalCounters, reserved),
};
static_assert(covers(kGlobalCountersFields, sizeof(GlobalCounters)), "kGlobalCountersFields lists every member");

// Per ring: the producer's cache line and the consumer's cache line.
struct RingControl {
  // producer side
  uint64_t head;         // host rings: the live claim counter; event rings: published snapshot
  uint64_t limit_cache;  // producer's cached tail + capacity (host rings only)
  uint64_t produced;     // records the producer tried to put in
  uint64_t dropped;      // ... of which dropped because the ring was full
  uint64_t reserved;     // room promised to producers (host rings only; see ring::claim)
  uint64_t producer_reserved[3];
  // consumer side
  uint64_t tail;       // next ticket the consumer reads (atomic, release)
  uint64_t delivered;  // records handed on intact
  uint64_t torn;       // claimed slots skipped: writer died or never finished
  uint64_t corrupt;    // complete records that failed validation (skipped)
  uint64_t consumer_reserved[4];
};
static_assert(sizeof(RingControl) == 128, "RingControl is two cache lines");
static_assert(offsetof(RingControl, tail) == 64, "consumer half on its own line");
inline constexpr Field kRingControlFields[] = {
    GPUOBS_FIELD(RingControl, head),
    GPUOBS_FIELD(RingControl, limit_cache),
    GPUOBS_FIELD(RingControl, produced),
    GPUOBS_FIELD(RingControl, dropped),
    GPUOBS_FIELD(RingControl, reserved),
    GPUOBS_RESERVED(RingControl, producer_reserved),
    GPUOBS_FIELD(RingControl, tail),
    GPUOBS_FIELD(RingControl, delivered),
    GPUOBS_FIELD(RingControl, torn),
    GPUOBS_FIELD(RingControl, corrupt),
    GPUOBS_RESERVED(RingControl, consumer_reserved),
};
static_assert(covers(kRingControlFields, sizeof(RingControl)), "kRingControlFields lists every member");

// Per kernel slot, published by the producer under publish_seq. The device counts launches of
// patched kernels (the leader of block (0,0,0) counts its launch and grid size, every block
// leader its block); the host adds launches of kernels it could not patch (seen by its launch
// callbacks, which it enables only then). blocks_expected = observed + unpatched + unobserved.
struct KernelCounters {
  uint64_t launches;           // launches (device census, plus host-counted unpatched ones)
  uint64_t blocks_expected;    // sum of grid sizes over launches
  uint64_t blocks_observed;    // device: blocks counted by the patches (counter and up)
  uint64_t blocks_unpatched;   // host: blocks of launches the patches could not see
  uint64_t memory_accesses;    // device: exact access count
  uint64_t events_produced;    // device: events this kernel tried to record
  uint64_t events_dropped;     // device: ... dropped (ring full)
  uint64_t blocks_unobserved;  // device: blocks that ran in a mode that counts none (off, noop)
  uint64_t blocks_exited;      // device: blocks that exited, in every mode, where exits are hooked
                               // (kBlockExitsHooked); blocks in flight = observed + unobserved - exited
  uint64_t reserved[7];
};
static_assert(sizeof(KernelCounters) == 128, "KernelCounters is two cache lines");
inline constexpr Field kKernelCountersFields[] = {
    GPUOBS_FIELD(KernelCounters, launches),        GPUOBS_FIELD(KernelCounters, blocks_expected),
    GPUOBS_FIELD(KernelCounters, blocks_observed), GPUOBS_FIELD(KernelCounters, blocks_unpatched),
    GPUOBS_FIELD(KernelCounters, memory_accesses), GPUOBS_FIELD(KernelCounters, events_produced),
    GPUOBS_FIELD(KernelCounters, events_dropped),  GPUOBS_FIELD(KernelCounters, blocks_unobserved),
    GPUOBS_FIELD(KernelCounters, blocks_exited),   GPUOBS_RESERVED(KernelCounters, reserved),
};
static_assert(covers(kKernelCountersFields, sizeof(KernelCounters)), "kKernelCountersFields lists every member");

// Per kernel slot, the (grid, block) shapes of its launches, counted on the device without a
// host callback (launch_census.h) and published with the counters. A launch whose shape the
// device could not attribute exactly (two shapes met in one bucket) counts in other_launches,
// so the shapes' launches plus other_launches equal KernelCounters::launches.
constexpr uint32_t kShapesPerKernel = 8;
struct ShapeCount {
  uint32_t grid_x;
  uint16_t grid_y;
  uint16_t grid_z;
  uint16_t block_x;
  uint16_t block_y;
  uint16_t block_z;
  uint16_t reserved;
  uint64_t launches;  // 0: unused entry
};
static_assert(sizeof(ShapeCount) == 24, "ShapeCount is 24 bytes");
inline constexpr Field kShapeCountFields[] = {
    GPUOBS_FIELD(ShapeCount, grid_x),      GPUOBS_FIELD(ShapeCount, grid_y),   GPUOBS_FIELD(ShapeCount, grid_z),
    GPUOBS_FIELD(ShapeCount, block_x),     GPUOBS_FIELD(ShapeCount, block_y),  GPUOBS_FIELD(ShapeCount, block_z),
    GPUOBS_RESERVED(ShapeCount, reserved), GPUOBS_FIELD(ShapeCount, launches),
};
static_assert(covers(kShapeCountFields, sizeof(ShapeCount)), "kShapeCountFields lists every member");
struct KernelShapes {
  ShapeCount shapes[kShapesPerKernel];
  uint64_t other_launches;
  uint64_t reserved[7];
};
static_assert(sizeof(KernelShapes) == 256, "KernelShapes is 256 bytes");
inline constexpr Field kKernelShapesFields[] = {
    GPUOBS_RECORDS(KernelShapes, shapes, kShapeCountFields),
    GPUOBS_FIELD(KernelShapes, other_launches),
    GPUOBS_RESERVED(KernelShapes, reserved),
};
static_assert(covers(kKernelShapesFields, sizeof(KernelShapes)), "kKernelShapesFields lists every member");

// KernelEntry::flags.
enum KernelEntryFlags : uint32_t {
  kKernelAccessHooksChosen = 0x1,  // its module carries the memory access hooks in the block set:
                                   // GPUOBS_MEMORY_KERNELS chose a kernel of it (in the memory
                                   // patch set every kernel's module carries them)
};

// Kernel table entry: names live in the name arena. Published by storing kernel_count.
struct KernelEntry {
  uint64_t function;  // CUfunction handle as an integer (0 in gpuobs-synth)
  uint64_t module;    // CUmodule handle as an integer
  uint32_t mangled_offset;
  uint32_t mangled_bytes;
  uint32_t demangled_offset;
  uint32_t demangled_bytes;
  uint64_t registered_ns;  // CLOCK_MONOTONIC
  uint32_t slot;
  uint32_t flags;        // KernelEntryFlags
  uint64_t cubin_hash;   // the module's cubin kept at load (cubin_file_name), 0 when not kept
  uint64_t function_pc;  // device address of the function's first instruction: event pc minus
                         // this is the offset in the cubin's function; 0 when unknown
};
static_assert(sizeof(KernelEntry) == 64, "KernelEntry is one cache line");
inline constexpr Field kKernelEntryFields[] = {
    GPUOBS_FIELD(KernelEntry, function),
    GPUOBS_FIELD(KernelEntry, module),
    GPUOBS_FIELD(KernelEntry, mangled_offset),
    GPUOBS_FIELD(KernelEntry, mangled_bytes),
    GPUOBS_FIELD(KernelEntry, demangled_offset),
    GPUOBS_FIELD(KernelEntry, demangled_bytes),
    GPUOBS_FIELD(KernelEntry, registered_ns),
    GPUOBS_FIELD(KernelEntry, slot),
    GPUOBS_FIELD(KernelEntry, flags),
    GPUOBS_FIELD(KernelEntry, cubin_hash),
    GPUOBS_FIELD(KernelEntry, function_pc),
};
static_assert(covers(kKernelEntryFields, sizeof(KernelEntry)), "kKernelEntryFields lists every member");

// ---- geometry ----------------------------------------------------------------------------

struct Geometry {
  uint64_t control_offset;
  uint64_t counters_offset;
  uint64_t ring_controls_offset;  // launch ring first, then event rings
  uint64_t kernel_counters_offset;
  uint64_t kernel_shapes_offset;  // right after the kernel counters (not in the header: derived)
  uint64_t kernel_table_offset;
  uint64_t name_arena_offset;
  uint64_t launch_ring_offset;
  uint64_t event_rings_offset;
  uint64_t segment_bytes;
};
inline constexpr Field kGeometryFields[] = {
    GPUOBS_FIELD(Geometry, control_offset),       GPUOBS_FIELD(Geometry, counters_offset),
    GPUOBS_FIELD(Geometry, ring_controls_offset), GPUOBS_FIELD(Geometry, kernel_counters_offset),
    GPUOBS_FIELD(Geometry, kernel_shapes_offset), GPUOBS_FIELD(Geometry, kernel_table_offset),
    GPUOBS_FIELD(Geometry, name_arena_offset),    GPUOBS_FIELD(Geometry, launch_ring_offset),
    GPUOBS_FIELD(Geometry, event_rings_offset),   GPUOBS_FIELD(Geometry, segment_bytes),
};
static_assert(covers(kGeometryFields, sizeof(Geometry)), "kGeometryFields lists every member");

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

constexpr bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

// Where each section lives, from the capacities alone: a reader never trusts the offsets a
// header claims, it recomputes them and compares.
constexpr Geometry compute_geometry(const Capacities& caps) {
  Geometry g{};
  uint64_t at = sizeof(SegmentHeader);
  g.control_offset = at;
  at += sizeof(ControlBlock);
  g.counters_offset = at;
  at += sizeof(GlobalCounters);
  g.ring_controls_offset = at;
  at += sizeof(RingControl) * (1 + uint64_t(caps.event_rings));
  at = align_up(at, kPageBytes);
  g.kernel_counters_offset = at;
  at = align_up(at + sizeof(KernelCounters) * uint64_t(caps.kernel_slots), kPageBytes);
  g.kernel_shapes_offset = at;
  at = align_up(at + sizeof(KernelShapes) * uint64_t(caps.kernel_slots), kPageBytes);
  g.kernel_table_offset = at;
  at = align_up(at + sizeof(KernelEntry) * uint64_t(caps.kernel_slots), kPageBytes);
  g.name_arena_offset = at;
  at = align_up(at + caps.name_arena_bytes, kPageBytes);
  g.launch_ring_offset = at;
  at = align_up(at + uint64_t(kLaunchRecordBytes) * caps.launch_ring_records, kPageBytes);
  g.event_rings_offset = at;
  at += uint64_t(kEventRecordBytes) * caps.event_ring_records * caps.event_rings;
  g.segment_bytes = align_up(at, kPageBytes);
  return g;
}

// Every wire struct, under the name Python knows it by (gpuobs._native's FIELDS, STRUCT_SIZES).
inline constexpr FieldTable kWireStructs[] = {
    GPUOBS_TABLE("header", SegmentHeader, kSegmentHeaderFields),
    GPUOBS_TABLE("control", ControlBlock, kControlBlockFields),
    GPUOBS_TABLE("global_counters", GlobalCounters, kGlobalCountersFields),
    GPUOBS_TABLE("ring_control", RingControl, kRingControlFields),
    GPUOBS_TABLE("kernel_counters", KernelCounters, kKernelCountersFields),
    GPUOBS_TABLE("shape_count", ShapeCount, kShapeCountFields),
    GPUOBS_TABLE("kernel_shapes", KernelShapes, kKernelShapesFields),
    GPUOBS_TABLE("kernel_entry", KernelEntry, kKernelEntryFields),
    GPUOBS_TABLE("event_record", EventRecord, kEventRecordFields),
    GPUOBS_TABLE("launch_record", LaunchRecord, kLaunchRecordFields),
    GPUOBS_TABLE("step_record", StepRecord, kStepRecordFields),
    GPUOBS_TABLE("step_text_record", StepTextRecord, kStepTextRecordFields),
    GPUOBS_TABLE("op_record", OpRecord, kOpRecordFields),
    GPUOBS_TABLE("op_nodes_record", OpNodesRecord, kOpNodesRecordFields),
    GPUOBS_TABLE("replay_span_record", ReplaySpanRecord, kReplaySpanRecordFields),
};

// Empty string when the capacities are acceptable, else the reason.
inline const char* capacities_problem(const Capacities& caps) {
  if (caps.event_rings == 0 || caps.event_rings > kMaxEventRings) return "event ring count out of range";
  if (!is_power_of_two(caps.event_ring_records) || caps.event_ring_records > kMaxRingRecords)
    return "event ring records not a power of two in range";
  if (!is_power_of_two(caps.launch_ring_records) || caps.launch_ring_records > kMaxRingRecords)
    return "launch ring records not a power of two in range";
  if (caps.kernel_slots == 0 || caps.kernel_slots > kMaxKernelSlots) return "kernel slots out of range";
  if (caps.name_arena_bytes == 0 || caps.name_arena_bytes > kMaxNameArenaBytes) return "name arena size out of range";
  return "";
}

}  // namespace gpuobs
