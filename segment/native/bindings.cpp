// gpuobs._native: the segment layout, reader and writer for Python. Every wire struct is
// exported as its field table (layout.h: read off the C++ struct with offsetof and sizeof), from
// which gpuobs.segment builds its numpy dtypes and this module its dicts; names and constants
// come from layout.h's tables too: Python never holds a second copy of an offset, a field name
// or a wire value. Records cross the boundary through the buffer protocol only, so this module
// does not depend on numpy's C API (whose ABI differs between the numpy versions we meet).
#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "gpuobs/block_pairer.h"
#include "gpuobs/cubin_functions.h"
#include "gpuobs/cubin_store.h"
#include "gpuobs/device_state.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/launch_census.h"
#include "gpuobs/layout.h"
#include "gpuobs/producer.h"
#include "gpuobs/replay_span_ledger.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"
#include "gpuobs/segment_reader.h"
#include "gpuobs/segment_writer.h"
#include "gpuobs/shm_segment.h"

namespace py = pybind11;
using namespace gpuobs;

namespace {

class SegmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Text from another process: decoded leniently, a bad byte must not make a struct unreadable.
py::str lenient_text(const char* data, size_t length) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(data, ssize_t(length), "replace"));
}

// One unsigned field, loaded whole (the struct may be live shared memory another process writes).
uint64_t load_unsigned(const uint8_t* at, uint32_t bytes) {
  switch (bytes) {
    case 1:
      return __atomic_load_n(at, __ATOMIC_ACQUIRE);
    case 2:
      return __atomic_load_n(reinterpret_cast<const uint16_t*>(at), __ATOMIC_ACQUIRE);
    case 4:
      return __atomic_load_n(reinterpret_cast<const uint32_t*>(at), __ATOMIC_ACQUIRE);
    default:
      return __atomic_load_n(reinterpret_cast<const uint64_t*>(at), __ATOMIC_ACQUIRE);
  }
}

// numpy's name for a field's type: "<u8", "S56", or (fields, itemsize, count) for an array of
// structs, which gpuobs.segment turns into a nested dtype.
py::list field_list(const Field* fields, uint32_t count);
py::object field_format(const Field& field) {
  switch (field.kind) {
    case FieldKind::Unsigned:
      return py::str(field.bytes == 8 ? "<u8" : field.bytes == 4 ? "<u4" : field.bytes == 2 ? "<u2" : "u1");
    case FieldKind::Text:
      return py::str("S" + std::to_string(field.bytes));
    case FieldKind::Records:
      return py::make_tuple(field_list(field.element, field.element_fields), element_bytes(field),
                            field.bytes / element_bytes(field));
    case FieldKind::Reserved:
      break;
  }
  return py::none();  // reserved fields are never listed
}

// [(name, offset, format)] of a table's exported fields (reserved ones left out).
py::list field_list(const Field* fields, uint32_t count) {
  py::list out;
  for (uint32_t i = 0; i < count; ++i) {
    if (fields[i].kind == FieldKind::Reserved) continue;
    out.append(py::make_tuple(fields[i].name, fields[i].offset, field_format(fields[i])));
  }
  return out;
}

// {name: value} of the exported fields of the struct at `base`: integers, text (up to its length
// field or its first NUL), lists of dicts for arrays of structs.
py::dict fields_dict(const Field* fields, uint32_t count, const void* base) {
  const uint8_t* bytes = static_cast<const uint8_t*>(base);
  py::dict out;
  for (uint32_t i = 0; i < count; ++i) {
    const Field& field = fields[i];
    const uint8_t* at = bytes + field.offset;
    switch (field.kind) {
      case FieldKind::Unsigned:
        out[field.name] = load_unsigned(at, field.bytes);
        break;
      case FieldKind::Text: {
        const char* text = reinterpret_cast<const char*>(at);
        size_t length = 0;
        if (field.length_offset != kNoLengthField) {
          length = std::min<size_t>(load_unsigned(bytes + field.length_offset, 4), field.bytes - 1);
        } else {
          length = strnlen(text, field.bytes);
        }
        out[field.name] = lenient_text(text, length);
        break;
      }
      case FieldKind::Records: {
        py::list records;
        for (uint32_t offset = 0; offset < field.bytes; offset += element_bytes(field))
          records.append(fields_dict(field.element, field.element_fields, at + offset));
        out[field.name] = records;
        break;
      }
      case FieldKind::Reserved:
        break;
    }
  }
  return out;
}
template <size_t N>
py::dict fields_dict(const Field (&fields)[N], const void* base) {
  return fields_dict(fields, uint32_t(N), base);
}

// {name: value} of a name table.
template <class E, size_t N>
py::dict names_dict(const Named<E> (&table)[N]) {
  py::dict out;
  for (const Named<E>& entry : table) out[entry.name] = uint32_t(entry.value);
  return out;
}

py::list kernel_list(const std::vector<KernelInfo>& infos) {
  py::list out;
  for (const KernelInfo& info : infos) {
    py::dict entry = fields_dict(kKernelEntryFields, &info.entry);
    entry["slot"] = info.slot;
    entry["mangled"] = lenient_text(info.mangled.data(), info.mangled.size());
    entry["demangled"] = lenient_text(info.demangled.data(), info.demangled.size());
    out.append(entry);
  }
  return out;
}

// UINT32_MAX, "all of them", when Python passes None.
uint32_t or_all(std::optional<uint32_t> count) { return count.value_or(UINT32_MAX); }

// Letting go of the GIL is a hand-off: while another thread of the daemon computes in Python,
// taking it back waits for that thread's switch interval (5 ms). For a small copy that wait is
// far longer than the copy, and a drain that paid it on every ring of every producer fell behind
// (its producers lost events) whenever a long query ran. Only a copy that takes longer than a
// hand-off lets the GIL go.
constexpr uint64_t kReleaseGilRecords = 16384;

bool worth_releasing_the_gil(const RingStats& stats) {
  return stats.head > stats.tail && stats.head - stats.tail >= kReleaseGilRecords;
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

// A contiguous 1-D buffer of Records (a numpy array of the matching dtype, say): writable for a
// call that fills it, read-only (Record const) for one that only reads it.
template <class Record>
std::pair<Record*, size_t> records_of(const py::buffer& buffer, bool writable = true) {
  py::buffer_info info = buffer.request(writable);
  if (info.ndim != 1 || info.itemsize != ssize_t(sizeof(Record)) ||
      (info.shape[0] > 1 && info.strides[0] != ssize_t(sizeof(Record))))
    throw py::value_error("expected a contiguous 1-D array of " + std::to_string(sizeof(Record)) + "-byte records");
  return {static_cast<Record*>(info.ptr), size_t(info.shape[0])};
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
    writer_ = start_producer(options, "", &error);
    if (!writer_) throw SegmentError(error);
    heads_.assign(caps.event_rings, 0);
    limits_.assign(caps.event_rings, caps.event_ring_records);  // tail 0 + capacity, as the injector starts it
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
  // `cached`: claiming as the block-entry patch does (ring::claim_cached: the cached limit alone
  // decides, the tail is never read); move_limit then plays the injector's tool thread.
  size_t put_events(uint32_t ring_index, py::buffer records, bool cached) {
    if (ring_index >= heads_.size()) throw py::index_error("no such event ring");
    auto [in, count] = records_of<EventRecord>(records);
    EventRecord* ring_base = writer_->view().event_ring(ring_index);
    const ring::ProducerView producer =
        writer_->event_ring_producer(ring_index, &heads_[ring_index], &reserved_[ring_index], &limits_[ring_index]);
    size_t written = 0;
    for (size_t i = 0; i < count; ++i) {
      ++produced_[ring_index];
      if (ring::put(producer, ring_base, in[i], cached)) {
        ++written;
      } else {
        ++dropped_[ring_index];
      }
    }
    return written;
  }
  // The injector's tool thread for a claim_cached producer: the limit moved (ring::moved_limit);
  // returns the limit now in force.
  uint64_t move_limit(uint32_t ring_index) {
    if (ring_index >= heads_.size()) throw py::index_error("no such event ring");
    const SegmentView& view = writer_->view();
    const uint64_t tail = __atomic_load_n(&view.event_ring_controls[ring_index].tail, __ATOMIC_ACQUIRE);
    limits_[ring_index] = ring::moved_limit(tail, view.caps.event_ring_records, limits_[ring_index]);
    return limits_[ring_index];
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
    for (uint64_t index = 0; index < grid_blocks(packed); ++index)
      count_block(&device_[slot], observed, uint32_t(index));
  }
  void publish(bool quiescent, uint64_t replay_begun) {
    DeviceSnapshot snapshot;
    snapshot.replay_begun = replay_begun;
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
    out["ops_steps"] = request.ops_steps;
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
  void note_takes_op_windows() { writer_->note_takes_op_windows(); }

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

py::dict header_dict(const SegmentReader& reader) {
  const SegmentHeader& header = *reader.view().header;
  py::dict out = fields_dict(kSegmentHeaderFields, &header);
  const uint32_t flags = __atomic_load_n(&header.producer_flags, __ATOMIC_ACQUIRE);
  for (const Named<uint32_t>& flag : kProducerFlagNames) out[flag.name] = (flags & flag.value) != 0;
  return out;
}

// The wire facts Python builds on, all from layout.h: constants, every struct's field table and size, the names of
// modes, kinds, states and flags.
void bind_schema(py::module_& m) {
  m.attr("MAGIC") = kMagic;
  m.attr("LAYOUT_VERSION") = kLayoutVersion;
  m.attr("MAX_SHIFT") = kMaxShift;
  m.attr("MAX_OPS_STEPS") = kMaxOpsSteps;
  m.attr("MAX_OP_LABEL_BYTES") = kMaxOpLabelBytes;
  m.attr("SEQ_WRITING") = kSeqWriting;
  m.attr("FILTER_BYTES") = kFilterBytes;
  m.attr("STATUS_MESSAGE_BYTES") = kStatusMessageBytes;
  m.attr("STEP_SAME_REQUESTS") = kStepSameRequests;
  m.attr("STEP_TEXT_DIRECTIVE") = std::string(1, kStepTextDirective);
  m.attr("STEP_TEXT_SAME") = std::string(kStepTextSame);
  m.attr("STEP_TEXT_KV_CACHE") = std::string(kStepTextKvCache);
  m.attr("GRAPH_NODES_RECORDED") = kGraphNodesRecorded;
  m.attr("LAUNCH_CAPTURED") = kLaunchCaptured;
  m.attr("SEGMENT_PREFIX") = kSegmentPrefix;
  m.attr("SEGMENT_SUFFIX") = kSegmentSuffix;
  py::dict fields, sizes;
  for (const FieldTable& table : kWireStructs) {
    fields[table.name] = field_list(table.fields, table.count);
    sizes[table.name] = table.bytes;
  }
  m.attr("FIELDS") = fields;
  // not on the wire: the daemon's block pairer (block_pairer.h) hands Python these
  m.attr("PENDING_BLOCK_FIELDS") = field_list(kPendingBlockFields, field_count(kPendingBlockFields));
  m.attr("PENDING_BLOCK_SIZE") = uint32_t(sizeof(PendingBlock));
  m.attr("DURATION_BUCKETS_PER_OCTAVE") = kDurationBucketsPerOctave;
  m.attr("DURATION_BUCKETS") = kDurationBuckets;
  m.attr("STRUCT_SIZES") = sizes;
  py::dict modes;
  py::list access_modes, sampled_modes, event_modes;
  for (const ModeInfo& info : kModes) {
    modes[info.name] = uint32_t(info.mode);
    if (info.records_accesses) access_modes.append(info.name);
    if (info.sampled) sampled_modes.append(info.name);
    if (info.emits_events) event_modes.append(info.name);
  }
  m.attr("MODES") = modes;
  m.attr("ACCESS_MODES") = access_modes;                      // the modes that record nothing but accesses
  m.attr("SAMPLED_MODES") = sampled_modes;                    // the modes the sample shift applies to
  m.attr("EVENT_MODES") = event_modes;                        // the modes that record events at all
  m.attr("BLOCK_CAPTURES") = names_dict(kBlockCaptureNames);  // what a kernel's block leaders record (block_capture)
  m.attr("BLOCK_SAMPLED") = uint32_t(kBlockSampled);
  m.attr("ACCESS_WRITE") = uint32_t(kAccessWrite);
  m.attr("BLOCK_EARLIER_EPOCH") = uint32_t(kBlockEarlierEpoch);
  m.attr("BLOCK_EPOCH_SHIFT") = kBlockEpochShift;
  m.attr("KERNEL_ACCESS_HOOKS_CHOSEN") = uint32_t(kKernelAccessHooksChosen);
  m.attr("MEMORY_KERNELS_BYTES") = kMemoryKernelsBytes;
  m.attr("PATCH_SETS") = names_dict(kPatchSetNames);
  m.attr("EVENT_KINDS") = names_dict(kEventKindNames);
  m.attr("EVENT_KIND_COUNT") = kEventKindCount;
  m.attr("LAUNCH_KINDS") = names_dict(kLaunchKindNames);
  m.attr("CONTROL_STATUS") = names_dict(kControlStatusNames);
  m.attr("SEGMENT_STATES") = names_dict(kSegmentStateNames);
  m.attr("PRODUCER_KINDS") = names_dict(kProducerKindNames);
  m.attr("PRODUCER_FLAGS") = names_dict(kProducerFlagNames);
  m.attr("PROCESS_ROLES") = names_dict(kProcessRoleNames);
  m.attr("IDENTITY_SET") = kIdentitySet;
  m.attr("TAKES_OP_WINDOWS") = kTakesOpWindows;
}

// The checks and computations Python shares with the producers (one implementation: the segment library's).
void bind_functions(py::module_& m) {
  m.def(
      "geometry",
      [](uint32_t event_rings, uint32_t event_ring_records, uint32_t launch_ring_records, uint32_t kernel_slots,
         uint32_t name_arena_bytes) {
        const Capacities caps =
            make_caps(event_rings, event_ring_records, launch_ring_records, kernel_slots, name_arena_bytes);
        const char* problem = capacities_problem(caps);
        if (*problem) throw py::value_error(problem);
        const Geometry geometry = compute_geometry(caps);
        return fields_dict(kGeometryFields, &geometry);
      },
      py::arg("event_rings"), py::arg("event_ring_records"), py::arg("launch_ring_records"), py::arg("kernel_slots"),
      py::arg("name_arena_bytes"));
  m.def("mapping_faults_absorbed", &MappingGuard::faults_absorbed,
        "Loads past a shrunk segment's end turned into an empty segment instead of SIGBUS");
  m.def("fmix64", &fmix64, "MurmurHash3 fmix64, as the patches compute it");
  m.def(
      "cubin_file_name",
      [](py::bytes image) {
        const std::string bytes = image;
        return cubin_file_name(cubin_hash(bytes.data(), bytes.size()));
      },
      py::arg("image"), "The name a kept cubin of these bytes has in the cubin folder");
  m.def("pack_grid", &pack_grid, py::arg("x"), py::arg("y"), py::arg("z"));
  m.def("pack_block", &pack_block, py::arg("x"), py::arg("y"), py::arg("z"));
  m.def("shape_hash", &shape_hash, py::arg("grid"), py::arg("block"), "The launch census's shape hash");
  m.def("sample_keep", &sample_keep, py::arg("pc"), py::arg("thread"), py::arg("block"), py::arg("shift"));
  m.def("block_sample_keep", &block_sample_keep, py::arg("grid_id"), py::arg("block"), py::arg("epoch"),
        py::arg("shift"), "Whether `sampled` keeps this block in kernels without access hooks (sample_hash.h)");
  m.def("block_exit_choice", &block_exit_choice, py::arg("grid_id"), py::arg("block"), py::arg("now_ns"),
        py::arg("shift"), "0: a sampled block's exit is not recorded; 1: by its epoch; 2: by the epoch before");
  m.def(
      "block_capture",
      [](uint32_t mode, uint32_t shift, bool captured, bool access_hooked, bool chosen_in_userdata, bool launch_times) {
        const uint32_t word = make_flags(make_config(Mode(mode), shift), captured, access_hooked, launch_times);
        return uint32_t(block_capture(slot_word_flags(chosen_in_userdata ? kUserdataAccessHooked : 0, word)));
      },
      py::arg("mode"), py::arg("shift"), py::arg("captured"), py::arg("access_hooked"),
      py::arg("chosen_in_userdata") = false, py::arg("launch_times") = false,
      "What a kernel's block leaders record (device_state.h's BlockCapture: 0 none, 1 launches, 2 sampled, 3 "
      "every), from its slot's word and the chosen bit of its userdata, as the patches read them");
  m.def(
      "patch_set_needed",
      [](uint32_t mode, uint32_t patch_set, bool chooses_access_kernels) {
        ControlRequest request;
        request.mode = Mode(mode);
        request.patch_set = PatchSet(patch_set);
        return uint32_t(patch_set_needed(request, chooses_access_kernels));
      },
      py::arg("mode"), py::arg("patch_set"), py::arg("chooses_access_kernels"),
      "The patch set a producer needs for a request (the control decision's)");
  m.def(
      "cubin_function_names",
      [](py::bytes image) {
        const std::string bytes = image;
        std::string error;
        const std::vector<std::string> names = cubin_function_names(bytes.data(), bytes.size(), &error);
        if (!error.empty()) throw py::value_error(error);
        py::list out;
        for (const std::string& name : names) out.append(lenient_text(name.data(), name.size()));
        return out;
      },
      py::arg("image"), "The functions an ELF cubin defines, as the injector reads them when it patches a module");
  m.def(
      "module_chosen_for_access_hooks",
      [](const std::string& pattern, const std::vector<std::string>& names) {
        KernelFilter filter;
        const std::string problem = KernelFilter::compile(pattern, &filter);
        if (!problem.empty()) throw py::value_error(problem);
        return module_chosen_for_access_hooks(filter, names);
      },
      py::arg("pattern"), py::arg("names"), "GPUOBS_MEMORY_KERNELS's choice of a module, as the injector makes it");
  m.def("control_request_problem", &control_request_problem, py::arg("mode"), py::arg("shift"), py::arg("patch_set"),
        py::arg("filter"), py::arg("ops_steps") = 0,
        "Why a control request is invalid; '' when it is valid (same check as the producers).");
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
}

// The reader the daemon drains with.
void bind_reader(py::module_& m) {
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
      .def("event_ring_stats",
           [](const SegmentReader& r, uint32_t i) {
             const RingStats stats = r.event_ring_stats(i);
             return fields_dict(kRingStatsFields, &stats);
           })
      .def("launch_ring_stats",
           [](const SegmentReader& r) {
             const RingStats stats = r.launch_ring_stats();
             return fields_dict(kRingStatsFields, &stats);
           })
      .def("kernel_count", &SegmentReader::kernel_count)
      .def(
          "kernels",
          [](const SegmentReader& reader, uint32_t first_slot, std::optional<uint32_t> max_count) {
            return kernel_list(reader.kernels(first_slot, or_all(max_count)));
          },
          py::arg("first_slot") = 0, py::arg("max_count") = py::none())
      .def(
          "kernels_at",
          [](const SegmentReader& reader, const std::vector<uint32_t>& slots) {
            return kernel_list(reader.kernels_at(slots));
          },
          py::arg("slots"))
      .def("global_counters",
           [](const SegmentReader& reader) -> py::object {
             // the process-wide counters alone: O(1), where counters() copies every kernel's
             GlobalCounters global{};
             if (!reader.counters(&global, nullptr)) return py::none();
             return fields_dict(kGlobalCountersFields, &global);
           })
      .def(
          "counters",
          [](const SegmentReader& reader, uint32_t first_slot, std::optional<uint32_t> max_count) -> py::object {
            GlobalCounters global{};
            std::vector<KernelCounters> per_kernel;
            if (!reader.counters(&global, &per_kernel, nullptr, first_slot, or_all(max_count))) return py::none();
            py::bytes kernels(reinterpret_cast<const char*>(per_kernel.data()),
                              per_kernel.size() * sizeof(KernelCounters));
            return py::make_tuple(fields_dict(kGlobalCountersFields, &global), kernels);
          },
          py::arg("first_slot") = 0, py::arg("max_count") = py::none())
      .def(
          "request_control",
          [](SegmentReader& reader, uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
             uint32_t ops_steps) {
            std::string error;
            const uint64_t generation = reader.request_control(mode, shift, patch_set, filter, &error, ops_steps);
            if (generation == 0) throw py::value_error(error);
            return generation;
          },
          py::arg("mode"), py::arg("shift"), py::arg("patch_set"), py::arg("filter") = "", py::arg("ops_steps") = 0)
      .def("control_state",
           [](const SegmentReader& reader) {
             const ControlBlock control = reader.control_state();
             return fields_dict(kControlBlockFields, &control);
           })
      .def("producer_alive", &SegmentReader::producer_alive)
      .def(
          "backlog",
          [](const SegmentReader& reader) {
            const SegmentReader::Backlog backlog = reader.backlog();
            return py::make_tuple(backlog.records, backlog.fullest, backlog.ready);
          },
          "(records waiting by the published heads, the fullest ring's share, a complete record ready to read)")
      .def(
          "top_kernels",
          [](const SegmentReader& reader, const std::string& field, uint32_t count) {
            for (const Field& entry : kKernelCountersFields)
              if (field == entry.name) {
                py::gil_scoped_release release;
                return reader.top_kernels(entry.offset, count);
              }
            throw py::value_error("no kernel counter named " + field);
          },
          py::arg("field"), py::arg("count"), "[(slot, value)] of the `count` kernels with the most of `field`")
      .def(
          "last_read_kinds",
          [](const SegmentReader& reader) {
            const auto& kinds = reader.last_read_kinds();
            return py::bytes(reinterpret_cast<const char*>(kinds.data()), sizeof(kinds));
          },
          "events per kind of the last read_events (EVENT_KIND_COUNT little-endian uint64)")
      .def("owner_uid", &SegmentReader::owner_uid)
      .def("state", [](const SegmentReader& reader) { return uint32_t(reader.state()); })
      .def("size_intact", &SegmentReader::size_intact)
      .def("faulted", &SegmentReader::faulted)
      .def("set_torn_timeout",
           [](SegmentReader& reader, double seconds) { reader.set_torn_timeout_ns(uint64_t(seconds * 1e9)); })
      .def(
          "launch_shapes",
          [](const SegmentReader& reader, uint32_t first_slot, std::optional<uint32_t> max_count) -> py::object {
            // {slot: ([(grid, block, launches), ...], other_launches)} for slots launched, from the
            // device's launch census as last published; None when no consistent copy could be had
            GlobalCounters global{};
            std::vector<KernelShapes> shapes;
            if (!reader.counters(&global, nullptr, &shapes, first_slot, or_all(max_count))) return py::none();
            py::dict out;
            for (uint32_t index = 0; index < shapes.size(); ++index) {
              const uint32_t slot = first_slot + index;
              const KernelShapes& entry = shapes[index];
              py::list counted;
              for (const ShapeCount& shape : entry.shapes) {
                if (shape.launches == 0) continue;
                counted.append(py::make_tuple(py::make_tuple(shape.grid_x, shape.grid_y, shape.grid_z),
                                              py::make_tuple(shape.block_x, shape.block_y, shape.block_z),
                                              shape.launches));
              }
              if (py::len(counted) || entry.other_launches)
                out[py::int_(slot)] = py::make_tuple(counted, entry.other_launches);
            }
            return out;
          },
          py::arg("first_slot") = 0, py::arg("max_count") = py::none())
      .def(
          "aggregates",
          [](const SegmentReader& reader, uint32_t first_slot, std::optional<uint32_t> max_count) {
            // [slots][EVENT_KIND_COUNT] little-endian uint64, for slots [first_slot, + max_count) of
            // the table's capacity
            const EventAggregates& counts = reader.aggregates();
            const size_t slots = counts.size() / kEventKindCount;
            const size_t first = first_slot < slots ? first_slot : slots;
            const size_t count = std::min<size_t>(slots - first, or_all(max_count));
            return py::bytes(reinterpret_cast<const char*>(counts.data() + first * kEventKindCount),
                             count * kEventKindCount * sizeof(uint64_t));
          },
          py::arg("first_slot") = 0, py::arg("max_count") = py::none());
}

template <class T>
py::bytes bytes_of(const std::vector<T>& values) {
  return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Replay spans (replay_spans.h) played on the host: a context's span table as the block-entry
// patch folds into it and the tool thread's ledger of it, for tests of the protocol.
struct SpanTable {
  std::vector<DeviceReplaySpan> spans = std::vector<DeviceReplaySpan>(kReplaySpanSlots, reset_replay_span());
  ReplaySpanLedger ledger;
};

void bind_replay_spans(py::module_& m) {
  m.attr("REPLAY_SPAN_SLOTS") = kReplaySpanSlots;
  m.attr("REPLAY_ENDED") = kReplayEnded;
  py::class_<SpanTable>(m, "ReplaySpanTable")
      .def(py::init<>())
      .def(
          "fold",
          [](SpanTable& table, uint64_t word, uint64_t entry_ns) {
            note_replay_span(table.spans.data(), word, entry_ns);
          },
          py::arg("word"), py::arg("entry_ns"), "a launch's block (0,0,0) entry, under replay word `word`")
      .def(
          "read",
          [](SpanTable& table, uint64_t word, std::optional<uint64_t> word_after) {
            std::vector<ReplaySpanFound> found;
            std::vector<uint32_t> resets;
            table.ledger.read(word, table.spans.data(), word_after.value_or(word), &found, &resets);
            py::list spans;
            for (const ReplaySpanFound& span : found)
              spans.append(py::make_tuple(span.replay, span.first_entry_ns, span.last_entry_ns, span.launches));
            return py::make_tuple(spans, resets);
          },
          py::arg("word"), py::arg("word_after") = py::none(),
          "The tool thread's read, with the word read before the table and the word read after it "
          "(word_after defaults to word). Returns the spans found as (replay, first, last, launches) "
          "tuples, and the slots to reset.")
      .def(
          "taint", [](SpanTable& table, uint64_t replay) { table.ledger.taint(replay); }, py::arg("replay"),
          "a replay that may overlap another on the device")
      .def(
          "reset",
          [](SpanTable& table, const std::vector<uint32_t>& slots) {
            for (uint32_t slot : slots) table.spans.at(slot) = reset_replay_span();
          },
          py::arg("slots"))
      .def(
          "reset_done",
          [](SpanTable& table, const std::vector<uint32_t>& slots, uint64_t word_after) {
            table.ledger.reset_done(slots, word_after);
          },
          py::arg("slots"), py::arg("word_after"))
      .def(
          "reset_failed",
          [](SpanTable& table, const std::vector<uint32_t>& slots) { table.ledger.reset_failed(slots); },
          py::arg("slots"))
      .def_property_readonly("published", [](const SpanTable& table) { return table.ledger.published(); })
      .def_property_readonly("unclean", [](const SpanTable& table) { return table.ledger.unclean(); });
}

// The daemon's block pairing (block_pairer.h); results as bytes that Python views with numpy.
void bind_pairer(py::module_& m) {
  py::class_<BlockPairer>(m, "BlockPairer")
      .def(py::init<size_t>(), py::arg("max_pending"))
      .def(
          "pair",
          [](BlockPairer& pairer, py::buffer events, py::buffer node_grid_ids) {
            // The GIL stays held: the API's threads read what the pairer holds, and it is
            // tens of ns an event
            auto [records, count] = records_of<const EventRecord>(events, false);
            auto [nodes, node_count] = records_of<const uint64_t>(node_grid_ids, false);
            pairer.pair(records, count, nodes, node_count);
          },
          py::arg("events"), py::arg("node_grid_ids"), "pairs the block events of a batch (node_grid_ids sorted u8)")
      .def("analysed", &BlockPairer::analysed, "{slot: block events looked at}")
      .def("unpaired", &BlockPairer::unpaired, "{slot: block events without a partner}")
      .def("analysed_total", &BlockPairer::analysed_total)
      .def(
          "durations",
          [](const BlockPairer& pairer, std::optional<std::vector<uint32_t>> slots) {
            py::dict out;
            auto put = [&out](uint32_t slot, const SlotDurations& durations) {
              out[py::int_(slot)] = py::make_tuple(
                  py::bytes(reinterpret_cast<const char*>(durations.histogram.data()), sizeof(durations.histogram)),
                  durations.count, durations.total_ns, durations.min_ns, durations.max_ns);
            };
            if (!slots) {
              for (const auto& [slot, durations] : pairer.durations()) put(slot, durations);
              return out;
            }
            for (uint32_t slot : *slots)
              if (auto at = pairer.durations().find(slot); at != pairer.durations().end()) put(slot, at->second);
            return out;
          },
          py::arg("slots") = py::none(),
          "{slot: (histogram u8 bytes, count, total ns, min ns, max ns)} of these kernels (all by default) with pairs")
      .def(
          "pending", [](const BlockPairer& pairer) { return bytes_of(pairer.pending()); },
          "the enters held, as pending_block records")
      .def("__len__", &BlockPairer::pending_count)
      .def(
          "drop_stale",
          [](BlockPairer& pairer, py::buffer in_flight, uint64_t entered_before_ns) {
            auto [slots, count] = records_of<const uint32_t>(in_flight, false);
            pairer.drop_stale(slots, count, entered_before_ns);
          },
          py::arg("in_flight_slots"), py::arg("entered_before_ns"), "gives up old enters (in_flight_slots sorted u4)")
      .def("clear", &BlockPairer::clear, "gives up every enter held");
}

// The test writer: a producer in-process for the CPU tests, on the segment library's writer code.
void bind_writer(py::module_& m) {
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
           py::arg("launch_ring_records") = 1024, py::arg("kernel_slots") = 64, py::arg("name_arena_bytes") = 65536,
           py::arg("patch_set") = 0, py::arg("mode") = 2, py::arg("shift") = 0, py::arg("label") = "")
      .def_property_readonly("path", &Writer::path)
      .def("register_kernel", &Writer::register_kernel, py::arg("mangled"), py::arg("function") = 0,
           py::arg("module") = 0)
      .def("write_launch", &Writer::write_launch)
      .def("put_events", &Writer::put_events, py::arg("ring"), py::arg("records"), py::arg("cached") = false)
      .def("put_half_event", &Writer::put_half_event, py::arg("ring"), py::arg("record"))
      .def("move_limit", &Writer::move_limit, py::arg("ring"))
      .def("count_launch", &Writer::count_launch, py::arg("slot"), py::arg("grid"), py::arg("block"),
           py::arg("observed") = true)
      .def("publish", &Writer::publish, py::arg("quiescent") = false, py::arg("replay_begun") = 0)
      .def("poll_control", &Writer::poll_control, py::arg("seen_generation"))
      .def("acknowledge", &Writer::acknowledge, py::arg("generation"), py::arg("mode"), py::arg("shift"),
           py::arg("patch_set"), py::arg("filter"), py::arg("status"), py::arg("message"))
      .def("mark_exited", &Writer::mark_exited)
      .def("note_takes_op_windows", &Writer::note_takes_op_windows);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "gpuobs segment layout, reader and writer (native)";
  py::register_exception<SegmentError>(m, "SegmentError", PyExc_RuntimeError);
  bind_schema(m);
  bind_functions(m);
  bind_reader(m);
  bind_writer(m);
  bind_pairer(m);
  bind_replay_spans(m);
}
