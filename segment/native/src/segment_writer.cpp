#include "gpuobs/segment_writer.h"

#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace gpuobs {
namespace {

void add(uint64_t* word, uint64_t delta) { __atomic_fetch_add(word, delta, __ATOMIC_RELAXED); }
void put_relaxed(uint64_t* word, uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELAXED); }

// Stores a struct of uint64 words one relaxed store at a time (a reader copies it under the
// publish seqlock, word by word).
template <class T>
void put_words(T* out, const T* in) {
  static_assert(sizeof(T) % sizeof(uint64_t) == 0, "word-sized struct");
  const uint64_t* from = reinterpret_cast<const uint64_t*>(in);
  uint64_t* to = reinterpret_cast<uint64_t*>(out);
  for (size_t i = 0; i < sizeof(T) / sizeof(uint64_t); ++i) put_relaxed(to + i, from[i]);
}

void copy_bounded(char* out, size_t capacity, const std::string& text, uint32_t* length_out) {
  const size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
  std::memcpy(out, text.data(), n);
  std::memset(out + n, 0, capacity - n);
  if (length_out) *length_out = uint32_t(n);
}

}  // namespace

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) {
    std::free(text);
    return mangled;
  }
  std::string result(text);
  std::free(text);
  return result;
}

SegmentWriter::SegmentWriter(std::unique_ptr<MappedSegment> segment) : segment_(std::move(segment)) {}

int64_t SegmentWriter::register_kernel(uint64_t function, uint64_t module, const std::string& mangled,
                                       uint64_t cubin_hash, uint64_t function_pc, uint32_t entry_flags) {
  const SegmentView& v = view();
  const std::string demangled = demangle(mangled);
  std::lock_guard<std::mutex> lock(registration_mutex_);
  const uint32_t slot = __atomic_load_n(&v.header->kernel_count, __ATOMIC_RELAXED);
  const uint32_t used = __atomic_load_n(&v.header->name_arena_used, __ATOMIC_RELAXED);
  const uint64_t needed = uint64_t(mangled.size()) + 1 + demangled.size() + 1;
  if (slot >= v.caps.kernel_slots || used + needed > v.caps.name_arena_bytes) {
    add(&v.counters->kernels_dropped, 1);
    return -1;
  }
  char* arena = v.name_arena;
  std::memcpy(arena + used, mangled.c_str(), mangled.size() + 1);
  std::memcpy(arena + used + mangled.size() + 1, demangled.c_str(), demangled.size() + 1);
  KernelEntry& entry = v.kernel_table[slot];
  entry.function = function;
  entry.module = module;
  entry.mangled_offset = used;
  entry.mangled_bytes = uint32_t(mangled.size());
  entry.demangled_offset = used + uint32_t(mangled.size()) + 1;
  entry.demangled_bytes = uint32_t(demangled.size());
  entry.registered_ns = monotonic_ns();
  entry.slot = slot;
  entry.flags = entry_flags;
  entry.cubin_hash = cubin_hash;
  entry.function_pc = function_pc;
  __atomic_store_n(&v.header->name_arena_used, used + uint32_t(needed), __ATOMIC_RELEASE);
  __atomic_store_n(&v.header->kernel_count, slot + 1, __ATOMIC_RELEASE);
  return slot;
}

bool SegmentWriter::write_launch(const LaunchRecord& record) { return put_launch_ring(record); }

bool SegmentWriter::put_launch_ring(const LaunchRecord& record) {
  const SegmentView& v = view();
  RingControl& control = *v.launch_ring_control;
  add(&control.produced, 1);
  const ring::ProducerView producer{&control.head, &control.reserved, &control.limit_cache, &control.tail,
                                    v.caps.launch_ring_records};
  if (ring::put(producer, v.launch_ring, record)) return true;
  add(&control.dropped, 1);
  add(&v.counters->launch_records_dropped, 1);
  return false;
}

namespace {
template <class Record>
LaunchRecord as_launch_record(const Record& record) {
  static_assert(sizeof(Record) == sizeof(LaunchRecord), "one ring, one record size");
  LaunchRecord raw;
  std::memcpy(&raw, &record, sizeof raw);
  return raw;
}
}  // namespace

uint64_t current_thread_id() {
  thread_local const uint64_t id = uint64_t(::gettid());  // a system call once per thread, not per record
  return id;
}

bool SegmentWriter::write_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                               uint32_t flags, uint64_t flops) {
  if (flags & kStepSameRequests || ids == nullptr) ids_bytes = 0;
  StepRecord record{};
  record.host_time_ns = monotonic_ns();
  record.step = step;
  record.thread = current_thread_id();
  record.requests = requests;
  record.tokens = tokens;
  record.text_bytes = ids_bytes;
  record.text_records = (ids_bytes + kStepTextBytes - 1) / kStepTextBytes;
  record.flops = flops;
  record.kind = uint32_t(LaunchKind::Step);
  record.flags = flags;
  const bool all = put_launch_ring(as_launch_record(record));
  return put_text(LaunchKind::StepText, step, record.host_time_ns, ids, ids_bytes) && all;
}

bool SegmentWriter::write_op(uint64_t op, const char* label, uint32_t label_bytes) {
  if (label == nullptr) label_bytes = 0;
  OpRecord record{};
  record.host_time_ns = monotonic_ns();
  record.op = op;
  record.thread = current_thread_id();
  record.text_bytes = label_bytes;
  record.text_records = (label_bytes + kStepTextBytes - 1) / kStepTextBytes;
  record.kind = uint32_t(LaunchKind::Op);
  const bool all = put_launch_ring(as_launch_record(record));
  return put_text(LaunchKind::OpText, op, record.host_time_ns, label, label_bytes) && all;
}

bool SegmentWriter::write_replay_span(const ReplaySpanFound& span, uint32_t context_index) {
  ReplaySpanRecord record{};
  record.host_time_ns = monotonic_ns();
  record.replay = span.replay;
  record.first_entry_ns = span.first_entry_ns;
  record.last_entry_ns = span.last_entry_ns;
  record.launches = span.launches;
  record.context_index = context_index;
  record.kind = uint32_t(LaunchKind::ReplaySpan);
  return put_launch_ring(as_launch_record(record));
}

bool SegmentWriter::write_op_nodes(uint64_t op, uint64_t graph, uint64_t capture_id, const uint64_t* nodes,
                                   const uint8_t* kernel, size_t count) {
  bool all = true;
  const uint64_t now = monotonic_ns();
  for (size_t first = 0; first < count; first += kOpNodesPerRecord) {
    OpNodesRecord record{};
    record.host_time_ns = now;
    record.op = op;
    record.graph = graph;
    record.capture_id = capture_id;
    record.count = uint32_t(std::min<size_t>(kOpNodesPerRecord, count - first));
    for (uint32_t i = 0; i < record.count; ++i) {
      record.nodes[i].node = nodes[first + i];
      if (kernel[first + i]) record.kernel_mask |= 1u << i;
    }
    record.kind = uint32_t(LaunchKind::OpNodes);
    all = put_launch_ring(as_launch_record(record)) && all;
  }
  return all;
}

bool SegmentWriter::put_text(LaunchKind kind, uint64_t owner, uint64_t host_time_ns, const char* text, uint32_t bytes) {
  bool all = true;
  for (uint32_t offset = 0; offset < bytes; offset += kStepTextBytes) {
    StepTextRecord piece{};
    piece.host_time_ns = host_time_ns;
    piece.step = owner;
    piece.offset = offset;
    piece.length = std::min(kStepTextBytes, bytes - offset);
    std::memcpy(piece.text, text + offset, piece.length);
    piece.kind = uint32_t(kind);
    all = put_launch_ring(as_launch_record(piece)) && all;
  }
  return all;
}

void SegmentWriter::set_label(const std::string& label) {
  SegmentHeader& header = *view().header;
  copy_bounded(header.label, sizeof(header.label), label, nullptr);  // a reader may see a mix for a moment
}

void SegmentWriter::set_identity(ProcessRole role, uint32_t rank, uint32_t world_size, uint32_t local_rank,
                                 const std::string& model) {
  SegmentHeader& header = *view().header;
  header.role = uint32_t(role);
  header.rank = rank;
  header.world_size = world_size;
  header.local_rank = local_rank;
  copy_bounded(header.model, sizeof(header.model), model, nullptr);
  __atomic_fetch_or(&header.identity_flags, kIdentitySet, __ATOMIC_RELEASE);
}

void SegmentWriter::note_takes_op_windows() {
  __atomic_fetch_or(&view().header->identity_flags, kTakesOpWindows, __ATOMIC_RELEASE);
}

void SegmentWriter::add_gpu(uint32_t context, uint32_t ordinal, const std::string& pci_bus_id,
                            const std::string& uuid) {
  SegmentHeader& header = *view().header;
  const uint32_t index = __atomic_load_n(&header.gpu_count, __ATOMIC_ACQUIRE);
  if (index < kSegmentGpus) {
    GpuIdentity& gpu = header.gpus[index];
    gpu.ordinal = ordinal;
    gpu.context = context;
    copy_bounded(gpu.pci_bus_id, sizeof(gpu.pci_bus_id), pci_bus_id, nullptr);
    copy_bounded(gpu.uuid, sizeof(gpu.uuid), uuid, nullptr);
  }
  __atomic_store_n(&header.gpu_count, index + 1, __ATOMIC_RELEASE);  // contexts are created one at a time
}

void SegmentWriter::note_profiler_start() {
  __atomic_fetch_add(&view().counters->profiler_starts, 1, __ATOMIC_RELAXED);
}

ring::ProducerView SegmentWriter::event_ring_producer(uint32_t index, uint64_t* head, uint64_t* reserved,
                                                      uint64_t* limit) const {
  const SegmentView& v = view();
  return ring::ProducerView{head, reserved, limit, &v.event_ring_controls[index].tail, v.caps.event_ring_records};
}

void SegmentWriter::publish(const DeviceSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  const SegmentView& v = view();
  GlobalCounters& counters = *v.counters;
  const uint64_t seq = __atomic_load_n(&counters.publish_seq, __ATOMIC_RELAXED);
  __atomic_store_n(&counters.publish_seq, seq + 1, __ATOMIC_RELAXED);  // odd: writing
  __atomic_thread_fence(__ATOMIC_RELEASE);
  put_relaxed(&counters.publish_time_ns, monotonic_ns());
  put_relaxed(&counters.device_events_produced, snapshot.events_produced);
  put_relaxed(&counters.device_events_dropped, snapshot.events_dropped);
  uint64_t claimed = 0;
  for (size_t ring_index = 0; ring_index < snapshot.ring_heads.size() && ring_index < v.caps.event_rings;
       ++ring_index) {
    RingControl& control = v.event_ring_controls[ring_index];
    put_relaxed(&control.head, snapshot.ring_heads[ring_index]);
    claimed += snapshot.ring_heads[ring_index];
  }
  put_relaxed(&counters.device_events_claimed, claimed);
  put_relaxed(&counters.device_memory_accesses, snapshot.memory_accesses);
  put_relaxed(&counters.device_blocks, snapshot.blocks);
  put_relaxed(&counters.device_quiescent, snapshot.quiescent ? 1 : 0);
  put_relaxed(&counters.device_replay_begun, snapshot.replay_begun);
  put_relaxed(&counters.replay_spans, snapshot.replay_spans);
  put_relaxed(&counters.replay_spans_unclean, snapshot.replay_spans_unclean);
  put_relaxed(&counters.launches, snapshot.launches);
  const uint32_t kernels = snapshot.kernel_count < v.caps.kernel_slots ? snapshot.kernel_count : v.caps.kernel_slots;
  for (uint32_t slot = 0; snapshot.kernels && slot < kernels; ++slot)
    put_words(&v.kernel_counters[slot], &snapshot.kernels[slot]);
  for (uint32_t slot = 0; snapshot.shapes && slot < kernels; ++slot)
    put_words(&v.kernel_shapes[slot], &snapshot.shapes[slot]);
  __atomic_store_n(&counters.publish_seq, seq + 2, __ATOMIC_RELEASE);  // even: consistent
  heartbeat();
}

void SegmentWriter::heartbeat() { __atomic_store_n(&view().header->heartbeat_ns, monotonic_ns(), __ATOMIC_RELEASE); }

bool SegmentWriter::poll_control(uint64_t seen_generation, ControlRequest* request) const {
  const ControlBlock& control = *view().control;
  const uint64_t before = __atomic_load_n(&control.desired_seq, __ATOMIC_ACQUIRE);
  if (before & 1) return false;  // the daemon is writing: look again next poll
  const uint64_t generation = __atomic_load_n(&control.desired_generation, __ATOMIC_RELAXED);
  if (generation <= seen_generation) return false;
  ControlRequest copy;
  copy.generation = generation;
  copy.mode = Mode(__atomic_load_n(&control.desired_mode, __ATOMIC_RELAXED));
  copy.shift = __atomic_load_n(&control.desired_shift, __ATOMIC_RELAXED);
  copy.patch_set = PatchSet(__atomic_load_n(&control.desired_patch_set, __ATOMIC_RELAXED));
  copy.ops_steps = __atomic_load_n(&control.desired_ops_steps, __ATOMIC_RELAXED);
  uint32_t filter_bytes = __atomic_load_n(&control.desired_filter_bytes, __ATOMIC_RELAXED);
  if (filter_bytes >= kFilterBytes) filter_bytes = kFilterBytes - 1;
  char filter[kFilterBytes];
  for (uint32_t i = 0; i < filter_bytes; ++i) filter[i] = __atomic_load_n(&control.desired_filter[i], __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&control.desired_seq, __ATOMIC_RELAXED) != before) return false;
  copy.filter.assign(filter, filter_bytes);
  *request = std::move(copy);
  return true;
}

void SegmentWriter::acknowledge(uint64_t generation, const ControlRequest& in_force, ControlStatus status,
                                const std::string& message) {
  ControlBlock& control = *view().control;
  __atomic_store_n(&control.applied_mode, uint32_t(in_force.mode), __ATOMIC_RELAXED);
  __atomic_store_n(&control.applied_shift, in_force.shift, __ATOMIC_RELAXED);
  __atomic_store_n(&control.applied_patch_set, uint32_t(in_force.patch_set), __ATOMIC_RELAXED);
  copy_bounded(control.applied_filter, kFilterBytes, in_force.filter, &control.applied_filter_bytes);
  copy_bounded(control.status_message, kStatusMessageBytes, message, nullptr);
  __atomic_store_n(&control.status, uint32_t(status), __ATOMIC_RELAXED);
  __atomic_store_n(&control.applied_time_ns, monotonic_ns(), __ATOMIC_RELAXED);
  __atomic_store_n(&control.applied_generation, generation, __ATOMIC_RELEASE);
}

void total_snapshot(DeviceSnapshot* snapshot) {
  snapshot->events_produced = snapshot->events_dropped = snapshot->memory_accesses = snapshot->blocks = 0;
  snapshot->launches = 0;
  for (uint32_t slot = 0; snapshot->kernels && slot < snapshot->kernel_count; ++slot) {
    const KernelCounters& kernel = snapshot->kernels[slot];
    snapshot->events_produced += kernel.events_produced;
    snapshot->events_dropped += kernel.events_dropped;
    snapshot->memory_accesses += kernel.memory_accesses;
    snapshot->blocks += kernel.blocks_observed;
    snapshot->launches += kernel.launches;
  }
}

LaunchRecord graph_event_record(LaunchKind kind, uint64_t graph_exec) {
  LaunchRecord record{};
  record.host_time_ns = monotonic_ns();
  record.graph_exec = graph_exec;
  record.kernel_slot = UINT32_MAX;
  record.context_index = UINT32_MAX;
  record.kind = uint32_t(kind);
  return record;
}

}  // namespace gpuobs
