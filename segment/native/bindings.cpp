// gpuobs._native: the segment layout, reader and writer for Python. The record layouts are
// exported as field tables read off the C++ structs (offsetof, sizeof), from which
// gpuobs.segment builds its numpy dtypes: Python never holds a second copy of an offset.
// Records cross the boundary through the buffer protocol only, so this module does not depend
// on numpy's C API (whose ABI differs between the numpy versions we meet).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "gpuobs/segment_writer.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/launch_census.h"
#include "gpuobs/layout.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"
#include "gpuobs/shm_segment.h"
#include "gpuobs/segment_reader.h"

namespace py = pybind11;
using namespace gpuobs;

namespace {

class SegmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

py::str lenient_text(const char* data, size_t length);

py::list kernel_list(const std::vector<KernelInfo>& infos) {
  py::list out;
  for (const KernelInfo& info : infos) {
    py::dict entry;
    entry["slot"] = info.slot;
    entry["function"] = info.function;
    entry["module"] = info.module;
    entry["mangled"] = lenient_text(info.mangled.data(), info.mangled.size());
    entry["demangled"] = lenient_text(info.demangled.data(), info.demangled.size());
    entry["cubin_hash"] = info.cubin_hash;
    entry["function_pc"] = info.function_pc;
    out.append(entry);
  }
  return out;
}

// Letting go of the GIL is a hand-off: while another thread of the daemon computes in Python,
// taking it back waits for that thread's switch interval (5 ms). For a small copy that wait is
// far longer than the copy, and a drain that paid it on every ring of every producer fell behind
// (its producers lost events) whenever a long query ran. Only a copy that takes longer than a
// hand-off lets the GIL go.
constexpr uint64_t kReleaseGilRecords = 16384;

bool worth_releasing_the_gil(const RingStats& stats) {
  return stats.head > stats.tail && stats.head - stats.tail >= kReleaseGilRecords;
}

py::dict ring_stats_dict(const RingStats& stats) {
  py::dict out;
  out["head"] = stats.head;
  out["tail"] = stats.tail;
  out["produced"] = stats.produced;
  out["dropped"] = stats.dropped;
  out["delivered"] = stats.delivered;
  out["torn"] = stats.torn;
  out["corrupt"] = stats.corrupt;
  out["capacity"] = stats.capacity;
  return out;
}

py::dict global_counters_dict(const GlobalCounters& c) {
  py::dict out;
  out["publish_seq"] = c.publish_seq;
  out["publish_time_ns"] = c.publish_time_ns;
  out["device_events_produced"] = c.device_events_produced;
  out["device_events_dropped"] = c.device_events_dropped;
  out["device_events_claimed"] = c.device_events_claimed;
  out["device_memory_accesses"] = c.device_memory_accesses;
  out["device_blocks"] = c.device_blocks;
  out["device_quiescent"] = c.device_quiescent;
  out["launches"] = c.launches;
  out["launch_records_dropped"] = c.launch_records_dropped;
  out["kernels_dropped"] = c.kernels_dropped;
  out["launches_unattributed"] = c.launches_unattributed;
  out["modules_loaded"] = c.modules_loaded;
  out["modules_patched"] = c.modules_patched;
  out["patch_failures"] = c.patch_failures;
  out["control_requests"] = c.control_requests;
  out["cubins_kept"] = c.cubins_kept;
  out["cubins_skipped"] = c.cubins_skipped;
  out["resource_callback_ns"] = c.resource_callback_ns;
  out["launch_callback_ns"] = c.launch_callback_ns;
  out["graph_callback_ns"] = c.graph_callback_ns;
  out["patch_ns"] = c.patch_ns;
  out["cubin_ns"] = c.cubin_ns;
  return out;
}

Capacities make_caps(uint32_t event_rings, uint32_t event_ring_records, uint32_t launch_ring_records,
                     uint32_t kernel_slots, uint32_t name_arena_bytes) {
  Capacities caps;
  caps.event_rings = event_rings;
  caps.event_ring_records = event_ring_records;
  caps.launch_ring_records = launch_ring_records;
  caps.kernel_slots = kernel_slots;
  caps.name_arena_bytes = name_arena_bytes;
  return caps;
}

// A writable, contiguous buffer of Records (a numpy array of the matching dtype, say).
template <class Record>
std::pair<Record*, size_t> records_of(py::buffer buffer) {
  py::buffer_info info = buffer.request(true);
  if (info.ndim != 1) throw py::value_error("expected a 1-D record array");
  if (info.itemsize != ssize_t(sizeof(Record)) || info.strides[0] != ssize_t(sizeof(Record)))
    throw py::value_error("record array must be contiguous records of " + std::to_string(sizeof(Record)) + " bytes");
  return {static_cast<Record*>(info.ptr), size_t(info.shape[0])};
}

template <class T>
const char* format_of() {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "plain unsigned fields");
  return sizeof(T) == 8 ? "<u8" : sizeof(T) == 4 ? "<u4" : sizeof(T) == 2 ? "<u2" : "u1";
}
#define GPUOBS_FIELD(S, f) fields.append(py::make_tuple(#f, offsetof(S, f), format_of<decltype(S::f)>()))

py::list event_fields() {
  py::list fields;
  GPUOBS_FIELD(EventRecord, globaltimer_ns);
  GPUOBS_FIELD(EventRecord, pc);
  GPUOBS_FIELD(EventRecord, address);
  GPUOBS_FIELD(EventRecord, grid_id);
  GPUOBS_FIELD(EventRecord, block_x);
  GPUOBS_FIELD(EventRecord, block_y);
  GPUOBS_FIELD(EventRecord, block_z);
  GPUOBS_FIELD(EventRecord, thread);
  GPUOBS_FIELD(EventRecord, sm_id);
  GPUOBS_FIELD(EventRecord, kernel_slot);
  GPUOBS_FIELD(EventRecord, replay);
  GPUOBS_FIELD(EventRecord, kind);
  GPUOBS_FIELD(EventRecord, access_bytes);
  GPUOBS_FIELD(EventRecord, flags);
  GPUOBS_FIELD(EventRecord, seq);
  return fields;
}

py::list launch_fields() {
  py::list fields;
  GPUOBS_FIELD(LaunchRecord, host_time_ns);
  GPUOBS_FIELD(LaunchRecord, grid_id);
  GPUOBS_FIELD(LaunchRecord, stream);
  GPUOBS_FIELD(LaunchRecord, graph_exec);
  GPUOBS_FIELD(LaunchRecord, graph_node);
  GPUOBS_FIELD(LaunchRecord, graph_launch_id);
  GPUOBS_FIELD(LaunchRecord, kernel_slot);
  GPUOBS_FIELD(LaunchRecord, grid_x);
  GPUOBS_FIELD(LaunchRecord, grid_y);
  GPUOBS_FIELD(LaunchRecord, grid_z);
  GPUOBS_FIELD(LaunchRecord, block_x);
  GPUOBS_FIELD(LaunchRecord, block_y);
  GPUOBS_FIELD(LaunchRecord, block_z);
  GPUOBS_FIELD(LaunchRecord, context_index);
  GPUOBS_FIELD(LaunchRecord, kind);
  GPUOBS_FIELD(LaunchRecord, mode);
  GPUOBS_FIELD(LaunchRecord, shift);
  GPUOBS_FIELD(LaunchRecord, flags);
  GPUOBS_FIELD(LaunchRecord, replay);
  GPUOBS_FIELD(LaunchRecord, seq);
  return fields;
}

py::list step_fields() {
  py::list fields;
  GPUOBS_FIELD(StepRecord, host_time_ns);
  GPUOBS_FIELD(StepRecord, step);
  GPUOBS_FIELD(StepRecord, thread);
  GPUOBS_FIELD(StepRecord, requests);
  GPUOBS_FIELD(StepRecord, tokens);
  GPUOBS_FIELD(StepRecord, text_bytes);
  GPUOBS_FIELD(StepRecord, text_records);
  GPUOBS_FIELD(StepRecord, kind);
  GPUOBS_FIELD(StepRecord, flags);
  GPUOBS_FIELD(StepRecord, seq);
  return fields;
}

py::list step_text_fields() {
  py::list fields;
  GPUOBS_FIELD(StepTextRecord, host_time_ns);
  GPUOBS_FIELD(StepTextRecord, step);
  GPUOBS_FIELD(StepTextRecord, offset);
  GPUOBS_FIELD(StepTextRecord, length);
  fields.append(py::make_tuple("text", offsetof(StepTextRecord, text), "S" + std::to_string(kStepTextBytes)));
  GPUOBS_FIELD(StepTextRecord, kind);
  GPUOBS_FIELD(StepTextRecord, seq);
  return fields;
}

py::list kernel_counter_fields() {
  py::list fields;
  GPUOBS_FIELD(KernelCounters, launches);
  GPUOBS_FIELD(KernelCounters, blocks_expected);
  GPUOBS_FIELD(KernelCounters, blocks_observed);
  GPUOBS_FIELD(KernelCounters, blocks_unpatched);
  GPUOBS_FIELD(KernelCounters, memory_accesses);
  GPUOBS_FIELD(KernelCounters, events_produced);
  GPUOBS_FIELD(KernelCounters, events_dropped);
  GPUOBS_FIELD(KernelCounters, blocks_unobserved);
  return fields;
}

// A producer for tests and tools: the same SegmentWriter the injector uses, plus event-ring
// heads in process memory standing in for the device's.
class Writer {
 public:
  Writer(const std::string& directory, const Capacities& caps, uint32_t patch_set, uint32_t mode, uint32_t shift,
         const std::string& label) {
    SegmentOptions options;
    options.directory = directory;
    options.caps = caps;
    options.producer_kind = ProducerKind::Test;
    options.patch_set = PatchSet(patch_set);
    options.initial_mode = Mode(mode);
    options.initial_shift = shift;
    options.producer = "gpuobs-test-writer";
    options.label = label;
    std::string error;
    auto segment = MappedSegment::create(options, &error);
    if (!segment) throw SegmentError(error);
    writer_ = std::make_unique<SegmentWriter>(std::move(segment));
    heads_.assign(caps.event_rings, 0);
    limits_.assign(caps.event_rings, 0);
    reserved_.assign(caps.event_rings, 0);
    produced_.assign(caps.event_rings, 0);
    dropped_.assign(caps.event_rings, 0);
    device_.assign(caps.kernel_slots, DeviceKernelSlot{});
  }

  std::string path() const { return writer_->segment().path(); }
  int64_t register_kernel(const std::string& mangled, uint64_t function, uint64_t module) {
    return writer_->register_kernel(function, module, mangled);
  }
  bool write_launch(py::buffer record) {
    auto [records, count] = records_of<LaunchRecord>(record);
    if (count != 1) throw py::value_error("one launch record");
    return writer_->write_launch(*records);
  }
  // Puts each record of `records` into event ring `ring`; returns how many got a slot.
  size_t put_events(uint32_t ring_index, py::buffer records) {
    if (ring_index >= heads_.size()) throw py::index_error("no such event ring");
    auto [in, count] = records_of<EventRecord>(records);
    EventRecord* ring_base = writer_->view().event_ring(ring_index);
    const ring::ProducerView producer =
        writer_->event_ring_producer(ring_index, &heads_[ring_index], &reserved_[ring_index], &limits_[ring_index]);
    size_t written = 0;
    for (size_t i = 0; i < count; ++i) {
      ++produced_[ring_index];
      if (ring::put(producer, ring_base, in[i])) {
        ++written;
      } else {
        ++dropped_[ring_index];
      }
    }
    return written;
  }
  // Claims a slot, writes half of `record` and stops there, as a writer killed mid-record.
  void put_half_event(uint32_t ring_index, py::buffer record) {
    if (ring_index >= heads_.size()) throw py::index_error("no such event ring");
    const EventRecord* body = records_of<EventRecord>(record).first;
    const ring::ProducerView producer =
        writer_->event_ring_producer(ring_index, &heads_[ring_index], &reserved_[ring_index], &limits_[ring_index]);
    uint64_t ticket = 0;
    ++produced_[ring_index];
    if (!ring::claim(producer, 1, &ticket)) {
      ++dropped_[ring_index];
      return;
    }
    EventRecord* slot = writer_->view().event_ring(ring_index) + (ticket & (producer.capacity - 1));
    ring::mark_writing(&slot->seq, ticket);
    std::memcpy(slot, body, 24);
  }
  // One launch as the device census counts it (launch_census.h): its blocks counted too when
  // `observed` (counter and up), else as unobserved.
  void count_launch(uint32_t slot, std::vector<uint32_t> grid, std::vector<uint32_t> block, bool observed) {
    if (slot >= device_.size()) throw py::index_error("no such kernel slot");
    if (grid.size() != 3 || block.size() != 3) throw py::value_error("grid and block are (x, y, z)");
    const uint64_t packed = pack_grid(grid[0], grid[1], grid[2]);
    gpuobs::count_launch(&device_[slot], packed, pack_block(block[0], block[1], block[2]));
    for (uint64_t index = 0; index < grid_blocks(packed); ++index) count_block(&device_[slot], observed, uint32_t(index));
  }
  void publish(bool quiescent) {
    DeviceSnapshot snapshot;
    std::vector<KernelCounters> kernels(device_.size());
    std::vector<KernelShapes> shapes(device_.size());
    for (size_t slot = 0; slot < device_.size(); ++slot) {
      kernels[slot] = census_counters(device_[slot]);
      shapes[slot] = census_shapes(device_[slot]);
    }
    snapshot.kernels = kernels.data();
    snapshot.shapes = shapes.data();
    snapshot.kernel_count = uint32_t(device_.size());
    total_snapshot(&snapshot);
    snapshot.events_produced = snapshot.events_dropped = 0;
    for (size_t i = 0; i < heads_.size(); ++i) {
      snapshot.events_produced += produced_[i];
      snapshot.events_dropped += dropped_[i];
    }
    snapshot.ring_heads = heads_;
    snapshot.quiescent = quiescent;
    writer_->publish(snapshot);
  }
  py::object poll_control(uint64_t seen_generation) {
    ControlRequest request;
    if (!writer_->poll_control(seen_generation, &request)) return py::none();
    py::dict out;
    out["generation"] = request.generation;
    out["mode"] = uint32_t(request.mode);
    out["shift"] = request.shift;
    out["patch_set"] = uint32_t(request.patch_set);
    out["filter"] = request.filter;
    return out;
  }
  void acknowledge(uint64_t generation, uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
                   uint32_t status, const std::string& message) {
    ControlRequest in_force;
    in_force.mode = Mode(mode);
    in_force.shift = shift;
    in_force.patch_set = PatchSet(patch_set);
    in_force.filter = filter;
    writer_->acknowledge(generation, in_force, ControlStatus(status), message);
  }
  void mark_exited() { writer_->segment().mark_exited(); }

 private:
  std::unique_ptr<SegmentWriter> writer_;
  std::vector<uint64_t> heads_, limits_, reserved_, produced_, dropped_;
  std::vector<DeviceKernelSlot> device_;  // the census the device would count
};

std::unique_ptr<SegmentReader> open_reader(const std::string& path, std::vector<uint32_t> owners, bool allow_group,
                                           bool exclusive) {
  TrustPolicy policy;
  for (uint32_t owner : owners) policy.owners.push_back(uid_t(owner));
  policy.allow_group_access = allow_group;
  policy.exclusive = exclusive;
  std::string error;
  auto reader = SegmentReader::open(path, policy, &error);
  if (!reader) throw SegmentError(path + ": " + error);
  return reader;
}

py::str lenient_text(const char* data, size_t length) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(data, ssize_t(length), "replace"));
}

py::dict header_dict(const SegmentReader& reader) {
  const SegmentHeader& h = *reader.view().header;
  py::dict out;
  out["pid"] = h.pid;
  out["producer_kind"] = h.producer_kind;
  out["pid_start_ticks"] = h.pid_start_ticks;
  out["start_monotonic_ns"] = h.start_monotonic_ns;
  out["start_realtime_ns"] = h.start_realtime_ns;
  out["event_rings"] = h.event_rings;
  out["event_ring_records"] = h.event_ring_records;
  out["launch_ring_records"] = h.launch_ring_records;
  out["kernel_slots"] = h.kernel_slots;
  out["name_arena_bytes"] = h.name_arena_bytes;
  out["patch_set"] = h.patch_set;
  out["block_exits_hooked"] = (h.producer_flags & kBlockExitsHooked) != 0;
  out["launch_trace"] = (h.producer_flags & kLaunchTrace) != 0;
  out["segment_bytes"] = h.segment_bytes;
  out["heartbeat_ns"] = __atomic_load_n(&h.heartbeat_ns, __ATOMIC_ACQUIRE);
  // Text from another process: decoded leniently, a bad byte must not make the header unreadable.
  out["producer"] = lenient_text(h.producer, strnlen(h.producer, sizeof(h.producer)));
  out["label"] = lenient_text(h.label, strnlen(h.label, sizeof(h.label)));
  return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "gpuobs segment layout, reader and writer (native)";
  py::register_exception<SegmentError>(m, "SegmentError", PyExc_RuntimeError);
  m.attr("MAGIC") = kMagic;
  m.attr("LAYOUT_VERSION") = kLayoutVersion;
  m.attr("MAX_SHIFT") = kMaxShift;
  m.attr("SEQ_WRITING") = kSeqWriting;
  m.attr("FILTER_BYTES") = kFilterBytes;
  m.attr("EVENT_FIELDS") = event_fields();
  m.attr("LAUNCH_FIELDS") = launch_fields();
  m.attr("STEP_FIELDS") = step_fields();
  m.attr("STEP_TEXT_FIELDS") = step_text_fields();
  m.attr("STEP_SAME_REQUESTS") = kStepSameRequests;
  m.attr("GRAPH_NODES_RECORDED") = kGraphNodesRecorded;
  m.attr("LAUNCH_CAPTURED") = kLaunchCaptured;
  m.attr("KERNEL_COUNTERS_FIELDS") = kernel_counter_fields();
  py::dict modes;
  for (uint32_t value = 0; value < kModeCount; ++value) modes[mode_name(Mode(value))] = value;
  m.attr("MODES") = modes;
  py::dict kinds;
  kinds["block_enter"] = uint32_t(EventKind::BlockEnter);
  kinds["block_exit"] = uint32_t(EventKind::BlockExit);
  kinds["memory_access"] = uint32_t(EventKind::MemoryAccess);
  kinds["bulk_copy"] = uint32_t(EventKind::BulkCopy);
  kinds["launch"] = uint32_t(EventKind::Launch);
  m.attr("EVENT_KINDS") = kinds;
  m.attr("EVENT_KIND_COUNT") = kEventKindCount;
  py::dict launch_kinds;
  launch_kinds["eager"] = uint32_t(LaunchKind::Eager);
  launch_kinds["graph_node"] = uint32_t(LaunchKind::GraphNode);
  launch_kinds["graph_launch"] = uint32_t(LaunchKind::GraphLaunch);
  launch_kinds["graph_exec_created"] = uint32_t(LaunchKind::GraphExecCreated);
  launch_kinds["graph_exec_destroyed"] = uint32_t(LaunchKind::GraphExecDestroyed);
  launch_kinds["step"] = uint32_t(LaunchKind::Step);
  launch_kinds["step_text"] = uint32_t(LaunchKind::StepText);
  m.attr("LAUNCH_KINDS") = launch_kinds;
  py::dict statuses;
  statuses["ok"] = uint32_t(ControlStatus::Ok);
  statuses["invalid_argument"] = uint32_t(ControlStatus::InvalidArgument);
  statuses["failed_precondition"] = uint32_t(ControlStatus::FailedPrecondition);
  statuses["internal"] = uint32_t(ControlStatus::Internal);
  m.attr("CONTROL_STATUS") = statuses;
  py::dict sizes;
  sizes["header"] = sizeof(SegmentHeader);
  sizes["control"] = sizeof(ControlBlock);
  sizes["global_counters"] = sizeof(GlobalCounters);
  sizes["ring_control"] = sizeof(RingControl);
  sizes["kernel_counters"] = sizeof(KernelCounters);
  sizes["kernel_shapes"] = sizeof(KernelShapes);
  sizes["kernel_entry"] = sizeof(KernelEntry);
  sizes["event_record"] = sizeof(EventRecord);
  sizes["launch_record"] = sizeof(LaunchRecord);
  m.attr("STRUCT_SIZES") = sizes;

  m.def(
      "geometry",
      [](uint32_t event_rings, uint32_t event_ring_records, uint32_t launch_ring_records, uint32_t kernel_slots,
         uint32_t name_arena_bytes) {
        const Capacities caps = make_caps(event_rings, event_ring_records, launch_ring_records, kernel_slots,
                                          name_arena_bytes);
        const char* problem = capacities_problem(caps);
        if (*problem) throw py::value_error(problem);
        const Geometry g = compute_geometry(caps);
        py::dict out;
        out["control_offset"] = g.control_offset;
        out["counters_offset"] = g.counters_offset;
        out["ring_controls_offset"] = g.ring_controls_offset;
        out["kernel_counters_offset"] = g.kernel_counters_offset;
        out["kernel_shapes_offset"] = g.kernel_shapes_offset;
        out["kernel_table_offset"] = g.kernel_table_offset;
        out["name_arena_offset"] = g.name_arena_offset;
        out["launch_ring_offset"] = g.launch_ring_offset;
        out["event_rings_offset"] = g.event_rings_offset;
        out["segment_bytes"] = g.segment_bytes;
        return out;
      },
      py::arg("event_rings"), py::arg("event_ring_records"), py::arg("launch_ring_records"), py::arg("kernel_slots"),
      py::arg("name_arena_bytes"));
  m.def("mapping_faults_absorbed", &MappingGuard::faults_absorbed,
        "Loads past a shrunk segment's end turned into an empty segment instead of SIGBUS");
  m.def("fmix64", &fmix64, "MurmurHash3 fmix64, as the patches compute it");
  m.def("pack_grid", &pack_grid, py::arg("x"), py::arg("y"), py::arg("z"));
  m.def("pack_block", &pack_block, py::arg("x"), py::arg("y"), py::arg("z"));
  m.def("shape_hash", &shape_hash, py::arg("grid"), py::arg("block"), "The launch census's shape hash");
  m.def("sample_keep", &sample_keep, py::arg("pc"), py::arg("thread"), py::arg("block"), py::arg("shift"));
  m.def("control_request_problem", &control_request_problem, py::arg("mode"), py::arg("shift"), py::arg("patch_set"),
        py::arg("filter"), "Why a control request is invalid; '' when it is valid (same check as the producers).");
  m.def("demangle", &demangle);
  m.def(
      "kernel_filter_search",
      [](const std::string& pattern, const std::string& text, uint64_t budget) -> py::object {
        // True/False as the injector would judge `text`; None when the search ran out of budget
        KernelFilter filter;
        const std::string problem = KernelFilter::compile(pattern, &filter);
        if (!problem.empty()) throw py::value_error(problem);
        KernelFilter::Verdict verdict;
        {
          py::gil_scoped_release release;
          verdict = filter.search(text, budget);
        }
        if (verdict == KernelFilter::Verdict::TooCostly) return py::none();
        return py::bool_(verdict == KernelFilter::Verdict::Match);
      },
      py::arg("pattern"), py::arg("text"), py::arg("budget") = UINT64_MAX);
  m.def(
      "validate_file",
      [](const std::string& path, std::vector<uint32_t> owners, bool allow_group) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return std::string("cannot open: ") + std::strerror(errno);
        TrustPolicy policy;
        for (uint32_t owner : owners) policy.owners.push_back(uid_t(owner));
        policy.allow_group_access = allow_group;
        std::string reason = validate_segment_file(fd, policy, nullptr);
        ::close(fd);
        return reason;
      },
      py::arg("path"), py::arg("owners") = std::vector<uint32_t>{}, py::arg("allow_group") = true);

  py::class_<SegmentReader>(m, "Reader")
      .def(py::init(&open_reader), py::arg("path"), py::arg("owners") = std::vector<uint32_t>{},
           py::arg("allow_group") = true, py::arg("exclusive") = true)
      .def_property_readonly("path", &SegmentReader::path)
      .def("header", &header_dict)
      .def(
          "read_events",
          [](SegmentReader& reader, uint32_t ring_index, py::buffer out) {
            auto [records, capacity] = records_of<EventRecord>(out);
            const RingStats stats = reader.event_ring_stats(ring_index);
            if (!worth_releasing_the_gil(stats)) return reader.read_events(ring_index, records, capacity);
            py::gil_scoped_release release;
            return reader.read_events(ring_index, records, capacity);
          },
          py::arg("ring"), py::arg("out"))
      .def(
          "read_launches",
          [](SegmentReader& reader, py::buffer out) {
            auto [records, capacity] = records_of<LaunchRecord>(out);
            if (!worth_releasing_the_gil(reader.launch_ring_stats())) return reader.read_launches(records, capacity);
            py::gil_scoped_release release;
            return reader.read_launches(records, capacity);
          },
          py::arg("out"))
      .def("event_ring_stats", [](const SegmentReader& r, uint32_t i) { return ring_stats_dict(r.event_ring_stats(i)); })
      .def("launch_ring_stats", [](const SegmentReader& r) { return ring_stats_dict(r.launch_ring_stats()); })
      .def("kernel_count", &SegmentReader::kernel_count)
      .def(
          "kernels",
          [](const SegmentReader& reader, uint32_t first_slot, uint32_t max_count) {
            return kernel_list(reader.kernels(first_slot, max_count));
          },
          py::arg("first_slot") = 0, py::arg("max_count") = UINT32_MAX)
      .def(
          "kernels_at", [](const SegmentReader& reader, const std::vector<uint32_t>& slots) {
            return kernel_list(reader.kernels_at(slots));
          },
          py::arg("slots"))
      .def("global_counters",
           [](const SegmentReader& reader) -> py::object {
             // the process-wide counters alone: O(1), where counters() copies every kernel's
             GlobalCounters global{};
             if (!reader.counters(&global, nullptr)) return py::none();
             return global_counters_dict(global);
           })
      .def("counters",
           [](const SegmentReader& reader, uint32_t first_slot, uint32_t max_count) -> py::object {
             GlobalCounters global{};
             std::vector<KernelCounters> per_kernel;
             if (!reader.counters(&global, &per_kernel, nullptr, first_slot, max_count)) return py::none();
             py::bytes kernels(reinterpret_cast<const char*>(per_kernel.data()),
                               per_kernel.size() * sizeof(KernelCounters));
             return py::make_tuple(global_counters_dict(global), kernels);
           },
           py::arg("first_slot") = 0, py::arg("max_count") = UINT32_MAX)
      .def(
          "request_control",
          [](SegmentReader& reader, uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter) {
            std::string error;
            const uint64_t generation = reader.request_control(mode, shift, patch_set, filter, &error);
            if (generation == 0) throw py::value_error(error);
            return generation;
          },
          py::arg("mode"), py::arg("shift"), py::arg("patch_set"), py::arg("filter") = "")
      .def("control_state",
           [](const SegmentReader& reader) {
             const ControlState s = reader.control_state();
             py::dict out;
             out["desired_generation"] = s.desired_generation;
             out["applied_generation"] = s.applied_generation;
             out["applied_mode"] = s.applied_mode;
             out["applied_shift"] = s.applied_shift;
             out["applied_patch_set"] = s.applied_patch_set;
             out["status"] = s.status;
             out["applied_filter"] = lenient_text(s.applied_filter.data(), s.applied_filter.size());
             out["status_message"] = lenient_text(s.status_message.data(), s.status_message.size());
             out["applied_time_ns"] = s.applied_time_ns;
             return out;
           })
      .def("producer_alive", &SegmentReader::producer_alive)
      .def("state", [](const SegmentReader& reader) { return uint32_t(reader.state()); })
      .def("size_intact", &SegmentReader::size_intact)
      .def("faulted", &SegmentReader::faulted)
      .def("set_torn_timeout", [](SegmentReader& reader, double seconds) {
        reader.set_torn_timeout_ns(uint64_t(seconds * 1e9));
      })
      .def("launch_shapes", [](const SegmentReader& reader, uint32_t first_slot, uint32_t max_count) -> py::object {
        // {slot: ([(grid, block, launches), ...], other_launches)} for slots launched, from the
        // device's launch census as last published; None when no consistent copy could be had
        GlobalCounters global{};
        std::vector<KernelShapes> shapes;
        if (!reader.counters(&global, nullptr, &shapes, first_slot, max_count)) return py::none();
        py::dict out;
        for (uint32_t index = 0; index < shapes.size(); ++index) {
          const uint32_t slot = first_slot + index;
          const KernelShapes& entry = shapes[index];
          py::list counted;
          for (const ShapeCount& shape : entry.shapes) {
            if (shape.launches == 0) continue;
            counted.append(py::make_tuple(py::make_tuple(shape.grid_x, shape.grid_y, shape.grid_z),
                                          py::make_tuple(shape.block_x, shape.block_y, shape.block_z), shape.launches));
          }
          if (py::len(counted) || entry.other_launches) out[py::int_(slot)] = py::make_tuple(counted, entry.other_launches);
        }
        return out;
      }, py::arg("first_slot") = 0, py::arg("max_count") = UINT32_MAX)
      .def("aggregates", [](const SegmentReader& reader, uint32_t first_slot, uint32_t max_count) {
        // [slots][EVENT_KIND_COUNT] little-endian uint64, for slots [first_slot, + max_count) of
        // the table's capacity
        const EventAggregates& counts = reader.aggregates();
        const size_t slots = counts.size() / kEventKindCount;
        const size_t first = first_slot < slots ? first_slot : slots;
        const size_t count = slots - first < max_count ? slots - first : max_count;
        return py::bytes(reinterpret_cast<const char*>(counts.data() + first * kEventKindCount),
                         count * kEventKindCount * sizeof(uint64_t));
      }, py::arg("first_slot") = 0, py::arg("max_count") = UINT32_MAX);

  py::class_<Writer>(m, "Writer")
      .def(py::init([](const std::string& directory, uint32_t event_rings, uint32_t event_ring_records,
                       uint32_t launch_ring_records, uint32_t kernel_slots, uint32_t name_arena_bytes,
                       uint32_t patch_set, uint32_t mode, uint32_t shift, const std::string& label) {
             return std::make_unique<Writer>(
                 directory,
                 make_caps(event_rings, event_ring_records, launch_ring_records, kernel_slots, name_arena_bytes),
                 patch_set, mode, shift, label);
           }),
           py::arg("directory"), py::arg("event_rings") = 1, py::arg("event_ring_records") = 1024,
           py::arg("launch_ring_records") = 1024, py::arg("kernel_slots") = 64,
           py::arg("name_arena_bytes") = 65536, py::arg("patch_set") = 0, py::arg("mode") = 2, py::arg("shift") = 0,
           py::arg("label") = "")
      .def_property_readonly("path", &Writer::path)
      .def("register_kernel", &Writer::register_kernel, py::arg("mangled"), py::arg("function") = 0,
           py::arg("module") = 0)
      .def("write_launch", &Writer::write_launch)
      .def("put_events", &Writer::put_events, py::arg("ring"), py::arg("records"))
      .def("put_half_event", &Writer::put_half_event, py::arg("ring"), py::arg("record"))
      .def("count_launch", &Writer::count_launch, py::arg("slot"), py::arg("grid"), py::arg("block"),
           py::arg("observed") = true)
      .def("publish", &Writer::publish, py::arg("quiescent") = false)
      .def("poll_control", &Writer::poll_control, py::arg("seen_generation"))
      .def("acknowledge", &Writer::acknowledge, py::arg("generation"), py::arg("mode"), py::arg("shift"),
           py::arg("patch_set"), py::arg("filter"), py::arg("status"), py::arg("message"))
      .def("mark_exited", &Writer::mark_exited);
}
