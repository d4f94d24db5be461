#include "gpuobs/segment_reader.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gpuobs/control_request.h"
#include "gpuobs/process_info.h"
#include "gpuobs/ring_protocol.h"

namespace gpuobs {
namespace {

constexpr int kCounterTries = 64;
constexpr int kLookahead = 4;
constexpr uint64_t kPrefetchRecords = 16;

uint64_t relaxed(const uint64_t* word) { return __atomic_load_n(word, __ATOMIC_RELAXED); }
void add(uint64_t* word, uint64_t delta) {
  if (delta) __atomic_fetch_add(word, delta, __ATOMIC_RELAXED);
}

// Copies a struct of uint64 words one atomic load at a time (it is being written concurrently;
// the seqlock decides whether the copy is kept).
template <class T>
void copy_words(T* out, const T* in) {
  static_assert(sizeof(T) % sizeof(uint64_t) == 0, "word-sized struct");
  const uint64_t* from = reinterpret_cast<const uint64_t*>(in);
  uint64_t* to = reinterpret_cast<uint64_t*>(out);
  for (size_t i = 0; i < sizeof(T) / sizeof(uint64_t); ++i) to[i] = relaxed(from + i);
}

std::string octal(unsigned value) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04o", value);
  return text;
}

}  // namespace

std::string validate_segment_file(int fd, const TrustPolicy& policy, SegmentHeader* header_out) {
  struct stat info{};
  if (::fstat(fd, &info) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(info.st_mode)) return "not a regular file";
  std::vector<uid_t> owners = policy.owners;
  if (owners.empty()) owners = {::getuid(), 0};
  bool trusted_owner = false;
  for (uid_t owner : owners) trusted_owner = trusted_owner || info.st_uid == owner;
  if (!trusted_owner) return "owned by uid " + std::to_string(info.st_uid) + ", which is not trusted";
  const unsigned permissions = unsigned(info.st_mode & 07777);
  if (permissions & 0007) return "world-accessible (mode " + octal(permissions) + ")";
  if ((permissions & 0070) && !policy.allow_group_access)
    return "group-accessible (mode " + octal(permissions) + ") and group access is not allowed";
  if (uint64_t(info.st_size) < sizeof(SegmentHeader))
    return "truncated: " + std::to_string(info.st_size) + " bytes, the header alone needs " +
           std::to_string(sizeof(SegmentHeader));
  SegmentHeader header{};
  if (::pread(fd, &header, sizeof(header), 0) != ssize_t(sizeof(header))) return "cannot read the header";
  if (header.magic != kMagic) return "bad magic: not a gpuobs segment";
  if (header.layout_version != kLayoutVersion)
    return "layout version " + std::to_string(header.layout_version) + ", this reader speaks " +
           std::to_string(kLayoutVersion);
  if (header.header_bytes != sizeof(SegmentHeader))
    return "header size " + std::to_string(header.header_bytes) + " is wrong";
  if (header.event_record_bytes != kEventRecordBytes || header.launch_record_bytes != kLaunchRecordBytes)
    return "record sizes do not match this layout";
  const Capacities caps = capacities_of(header);
  const char* problem = capacities_problem(caps);
  if (*problem) return std::string("capacities: ") + problem;
  const Geometry g = compute_geometry(caps);
  if (header.control_offset != g.control_offset || header.counters_offset != g.counters_offset ||
      header.ring_controls_offset != g.ring_controls_offset ||
      header.kernel_counters_offset != g.kernel_counters_offset ||
      header.kernel_table_offset != g.kernel_table_offset || header.name_arena_offset != g.name_arena_offset ||
      header.launch_ring_offset != g.launch_ring_offset || header.event_rings_offset != g.event_rings_offset)
    return "section offsets disagree with the capacities";
  if (header.segment_bytes != g.segment_bytes)
    return "segment size " + std::to_string(header.segment_bytes) + " disagrees with the capacities (" +
           std::to_string(g.segment_bytes) + ")";
  if (uint64_t(info.st_size) != g.segment_bytes)
    return "file is " + std::to_string(info.st_size) + " bytes, the header says " + std::to_string(g.segment_bytes);
  if (header.state != uint32_t(SegmentState::Live) && header.state != uint32_t(SegmentState::Exited))
    return "state " + std::to_string(header.state) + " is not live or exited";
  if (header.patch_set > uint32_t(PatchSet::Memory)) return "unknown patch set";
  if (header.pid == 0) return "pid 0";
  if (header_out) *header_out = header;
  return "";
}

uint32_t SegmentReader::owner_uid() const {
  struct stat info{};
  return ::fstat(fd_, &info) == 0 ? uint32_t(info.st_uid) : UINT32_MAX;
}

std::unique_ptr<SegmentReader> SegmentReader::open(const std::string& path, const TrustPolicy& policy,
                                                   std::string* error) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<SegmentReader> reader(new SegmentReader());
  reader->fd_ = fd;
  reader->path_ = path;
  SegmentHeader header{};
  *error = validate_segment_file(fd, policy, &header);
  if (!error->empty()) return nullptr;
  if (policy.exclusive && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    *error = "another consumer is reading this segment";
    return nullptr;
  }
  void* mapped = ::mmap(nullptr, header.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    *error = std::string("cannot map: ") + std::strerror(errno);
    return nullptr;
  }
  reader->base_ = static_cast<uint8_t*>(mapped);
  reader->bytes_ = header.segment_bytes;
  reader->guard_ = std::make_unique<MappingGuard>(mapped, header.segment_bytes);
  const Capacities caps = capacities_of(header);
  reader->view_ = make_view(reader->base_, caps);
  reader->aggregates_.assign(uint64_t(caps.kernel_slots) * kEventKindCount, 0);
  reader->event_pending_since_.assign(caps.event_rings, 0);
  if (policy.exclusive) {
    // The desired half of the control block is written only by its consumer, and we hold the
    // consumer lock: an odd seqlock is a consumer killed mid-request. Every field of a request is
    // written before its generation, so closing the seqlock publishes either nothing new or a
    // whole request; left odd, every later request would fail and the producer ignore them all.
    uint64_t* seq = &reader->view_.control->desired_seq;
    const uint64_t value = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
    if (value & 1) __atomic_store_n(seq, value + 1, __ATOMIC_RELEASE);
  }
  return reader;
}

SegmentReader::~SegmentReader() {
  guard_.reset();  // before the range can be reused by another mapping
  if (base_) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);  // also releases the consumer lock
}

bool SegmentReader::size_intact() const {
  struct stat info{};
  return !faulted() && ::fstat(fd_, &info) == 0 && uint64_t(info.st_size) == bytes_;
}

SegmentState SegmentReader::state() const {
  return SegmentState(__atomic_load_n(&view_.header->state, __ATOMIC_ACQUIRE));
}

bool SegmentReader::producer_alive() const {
  const uint32_t pid = view_.header->pid;
  if (pid == 0 || pid > uint32_t(INT32_MAX)) return false;
  if (::kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
  const char run_state = process_state(pid);
  if (run_state == '\0' || run_state == 'Z' || run_state == 'X') return false;  // a zombie writes nothing
  const uint64_t expected = view_.header->pid_start_ticks;
  return expected == 0 || process_start_ticks(pid) == expected;
}

bool SegmentReader::claimed_beyond(const RingControl& control, uint64_t tail, uint64_t capacity) const {
  // A head more than one lap ahead is not evidence of anything but a corrupt counter.
  const uint64_t head = relaxed(&control.head);
  return head > tail && head - tail <= capacity;
}

template <class Record, class Validate>
size_t SegmentReader::read_ring(RingControl& control, Record* ring, uint64_t capacity, Record* out, size_t max_records,
                                uint64_t* pending_since, Validate validate) {
  const uint64_t mask = capacity - 1;
  uint64_t tail = relaxed(&control.tail);
  size_t copied = 0;
  uint64_t torn = 0;
  uint64_t corrupt = 0;
  int writer_done = -1;  // unknown until a claimed slot makes it matter; then asked once
  // Skips never exceed one lap per call, so no counter value can keep this loop going.
  for (uint64_t budget = max_records + capacity; copied < max_records && budget > 0; --budget) {
    Record* slot = ring + (tail & mask);
    // The records were just written by another core (or by the device through PCIe): ask for
    // the lines well ahead so that many transfers are in flight, not one at a time.
    __builtin_prefetch(ring + ((tail + kPrefetchRecords) & mask), 0, 0);
    const uint64_t seq = ring::load_acquire(&slot->seq);
    if (seq == tail + 1) {
      out[copied] = *slot;
      if (validate(out[copied])) {
        ++copied;
      } else {
        ++corrupt;
      }
      ++tail;
      *pending_since = 0;
      continue;
    }
    // Not complete. Skip it only with evidence that it was claimed and will never complete.
    bool claimed = seq == ((tail + 1) | kSeqWriting) || claimed_beyond(control, tail, capacity);
    for (int ahead = 1; !claimed && ahead <= kLookahead; ++ahead) {
      const uint64_t later = ring::load_acquire(&ring[(tail + ahead) & mask].seq) & ~kSeqWriting;
      claimed = later == tail + ahead + 1;
    }
    if (!claimed) break;
    const uint64_t now = monotonic_ns();
    if (*pending_since == 0) *pending_since = now;
    if (writer_done < 0) writer_done = (state() == SegmentState::Exited || !producer_alive()) ? 1 : 0;
    if (writer_done == 1 || now - *pending_since >= torn_timeout_ns_) {
      ++torn;
      ++tail;
      *pending_since = 0;
      continue;
    }
    break;
  }
  add(&control.delivered, copied);
  add(&control.torn, torn);
  add(&control.corrupt, corrupt);
  ring::store_release(&control.tail, tail);
  return copied;
}

size_t SegmentReader::read_events(uint32_t ring_index, EventRecord* out, size_t max_records) {
  if (ring_index >= view_.caps.event_rings) return 0;
  const uint32_t slots = view_.caps.kernel_slots;
  uint64_t* aggregates = aggregates_.data();
  last_read_kinds_.fill(0);
  uint64_t* kinds = last_read_kinds_.data();
  auto validate = [slots, aggregates, kinds](const EventRecord& record) {
    if (record.kind == 0 || record.kind >= kEventKindCount || record.kernel_slot >= slots) return false;
    ++aggregates[uint64_t(record.kernel_slot) * kEventKindCount + record.kind];
    ++kinds[record.kind];
    return true;
  };
  return read_ring(view_.event_ring_controls[ring_index], view_.event_ring(ring_index), view_.caps.event_ring_records,
                   out, max_records, &event_pending_since_[ring_index], validate);
}

size_t SegmentReader::read_launches(LaunchRecord* out, size_t max_records) {
  const uint32_t slots = view_.caps.kernel_slots;
  auto validate = [slots](const LaunchRecord& record) {
    if (is_kernel_launch(record.kind)) return record.kernel_slot == UINT32_MAX || record.kernel_slot < slots;
    // annotations share the ring but not the launch fields (StepRecord, OpRecord, StepTextRecord,
    // OpNodesRecord, ReplaySpanRecord)
    if (record.kind == uint32_t(LaunchKind::Step) || record.kind == uint32_t(LaunchKind::StepText) ||
        record.kind == uint32_t(LaunchKind::Op) || record.kind == uint32_t(LaunchKind::OpText))
      return true;
    if (record.kind == uint32_t(LaunchKind::ReplaySpan)) {
      const auto& span = reinterpret_cast<const ReplaySpanRecord&>(record);
      return span.replay != 0 && span.first_entry_ns <= span.last_entry_ns && span.launches > 0;
    }
    if (record.kind == uint32_t(LaunchKind::OpNodes)) {
      const uint32_t count = reinterpret_cast<const OpNodesRecord&>(record).count;
      return count > 0 && count <= kOpNodesPerRecord;
    }
    return record.kind > 0 && record.kind < kLaunchKindCount && record.kernel_slot == UINT32_MAX;
  };
  return read_ring(*view_.launch_ring_control, view_.launch_ring, view_.caps.launch_ring_records, out, max_records,
                   &launch_pending_since_, validate);
}

namespace {
// Read in the order that keeps `produced >= head + dropped` true for a live producer (which
// counts `produced` before it claims or drops): dropped, head, then produced.
RingStats stats_of(const RingControl& control, uint64_t capacity) {
  RingStats stats;
  stats.dropped = __atomic_load_n(&control.dropped, __ATOMIC_ACQUIRE);
  stats.head = __atomic_load_n(&control.head, __ATOMIC_ACQUIRE);
  stats.produced = __atomic_load_n(&control.produced, __ATOMIC_ACQUIRE);
  stats.tail = relaxed(&control.tail);
  stats.delivered = relaxed(&control.delivered);
  stats.torn = relaxed(&control.torn);
  stats.corrupt = relaxed(&control.corrupt);
  stats.capacity = capacity;
  return stats;
}
}  // namespace

RingStats SegmentReader::event_ring_stats(uint32_t ring_index) const {
  if (ring_index >= view_.caps.event_rings) return RingStats{};
  return stats_of(view_.event_ring_controls[ring_index], view_.caps.event_ring_records);
}

RingStats SegmentReader::launch_ring_stats() const {
  return stats_of(*view_.launch_ring_control, view_.caps.launch_ring_records);
}

SegmentReader::Backlog SegmentReader::backlog() const {
  Backlog out;
  auto add = [&](const RingControl& control, uint64_t capacity, const uint64_t* next_seq_of_slot0, size_t stride) {
    const uint64_t head = relaxed(&control.head);
    const uint64_t tail = __atomic_load_n(&control.tail, __ATOMIC_ACQUIRE);
    const uint64_t waiting = head > tail ? head - tail : 0;
    out.records += waiting;
    const double share = capacity ? double(waiting) / double(capacity) : 0.0;
    if (share > out.fullest) out.fullest = share;
    if (!out.ready && capacity) {
      const auto* seq = reinterpret_cast<const uint64_t*>(reinterpret_cast<const uint8_t*>(next_seq_of_slot0) +
                                                          (tail & (capacity - 1)) * stride);
      out.ready = __atomic_load_n(seq, __ATOMIC_ACQUIRE) == tail + 1;
    }
  };
  add(*view_.launch_ring_control, view_.caps.launch_ring_records, &view_.launch_ring[0].seq, sizeof(LaunchRecord));
  for (uint32_t ring = 0; ring < view_.caps.event_rings; ++ring)
    add(view_.event_ring_controls[ring], view_.caps.event_ring_records, &view_.event_ring(ring)[0].seq,
        sizeof(EventRecord));
  return out;
}

std::vector<std::pair<uint32_t, uint64_t>> SegmentReader::top_kernels(size_t field_offset, uint32_t count) const {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  if (field_offset + sizeof(uint64_t) > sizeof(KernelCounters) || field_offset % sizeof(uint64_t)) return out;
  const uint32_t published = kernel_count();
  for (int attempt = 0; attempt < kCounterTries; ++attempt) {
    const uint64_t before = __atomic_load_n(&view_.counters->publish_seq, __ATOMIC_ACQUIRE);
    if (before & 1) {
      sched_yield();
      continue;
    }
    out.clear();
    for (uint32_t slot = 0; slot < published; ++slot) {
      const auto* word = reinterpret_cast<const uint64_t*>(
          reinterpret_cast<const uint8_t*>(&view_.kernel_counters[slot]) + field_offset);
      const uint64_t value = relaxed(word);
      if (value) out.emplace_back(slot, value);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&view_.counters->publish_seq, __ATOMIC_RELAXED) != before) continue;
    const auto most = [](const std::pair<uint32_t, uint64_t>& a, const std::pair<uint32_t, uint64_t>& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    };
    if (out.size() > count) {
      std::partial_sort(out.begin(), out.begin() + count, out.end(), most);
      out.resize(count);
    } else {
      std::sort(out.begin(), out.end(), most);
    }
    return out;
  }
  out.clear();
  return out;
}

uint32_t SegmentReader::kernel_count() const {
  const uint32_t count = __atomic_load_n(&view_.header->kernel_count, __ATOMIC_ACQUIRE);
  return count < view_.caps.kernel_slots ? count : view_.caps.kernel_slots;
}

KernelInfo SegmentReader::kernel_at(uint32_t slot) const {
  const uint64_t arena = view_.caps.name_arena_bytes;
  const KernelEntry& entry = view_.kernel_table[slot];
  KernelInfo info{slot, entry, {}, {}};
  auto name_at = [&](uint32_t offset, uint32_t length) {
    if (uint64_t(offset) + length > arena) return std::string("<corrupt name>");
    return std::string(view_.name_arena + offset, length);
  };
  info.mangled = name_at(entry.mangled_offset, entry.mangled_bytes);
  info.demangled = name_at(entry.demangled_offset, entry.demangled_bytes);
  return info;
}

std::vector<KernelInfo> SegmentReader::kernels(uint32_t first_slot, uint32_t max_count) const {
  std::vector<KernelInfo> result;
  const uint32_t count = kernel_count();
  for (uint32_t slot = first_slot; slot < count && result.size() < max_count; ++slot) result.push_back(kernel_at(slot));
  return result;
}

std::vector<KernelInfo> SegmentReader::kernels_at(const std::vector<uint32_t>& slots) const {
  std::vector<KernelInfo> result;
  const uint32_t count = kernel_count();
  for (uint32_t slot : slots)
    if (slot < count) result.push_back(kernel_at(slot));
  return result;
}

bool SegmentReader::counters(GlobalCounters* global, std::vector<KernelCounters>* per_kernel,
                             std::vector<KernelShapes>* shapes, uint32_t first_slot, uint32_t max_count) const {
  const uint32_t published = kernel_count();
  const uint32_t first = first_slot < published ? first_slot : published;
  const uint32_t count = published - first < max_count ? published - first : max_count;
  for (int attempt = 0; attempt < kCounterTries; ++attempt) {
    const uint64_t before = __atomic_load_n(&view_.counters->publish_seq, __ATOMIC_ACQUIRE);
    if (before & 1) {
      sched_yield();  // the producer is mid-publish (perhaps preempted): let it finish
      continue;
    }
    copy_words(global, view_.counters);
    if (per_kernel) {
      per_kernel->resize(count);
      for (uint32_t i = 0; i < count; ++i) copy_words(&(*per_kernel)[i], &view_.kernel_counters[first + i]);
    }
    if (shapes) {
      shapes->resize(count);
      for (uint32_t i = 0; i < count; ++i) copy_words(&(*shapes)[i], &view_.kernel_shapes[first + i]);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&view_.counters->publish_seq, __ATOMIC_RELAXED) == before) return true;
  }
  return false;
}

uint64_t SegmentReader::request_control(uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
                                        std::string* error, uint32_t ops_steps) {
  *error = control_request_problem(mode, shift, patch_set, filter, ops_steps);
  if (!error->empty()) return 0;
  ControlBlock& control = *view_.control;
  uint64_t seq = __atomic_load_n(&control.desired_seq, __ATOMIC_RELAXED);
  if ((seq & 1) ||
      !__atomic_compare_exchange_n(&control.desired_seq, &seq, seq + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    *error = "another writer is changing this segment's control block";
    return 0;
  }
  const uint64_t generation = relaxed(&control.desired_generation) + 1;
  __atomic_store_n(&control.desired_mode, mode, __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_shift, shift, __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_patch_set, patch_set, __ATOMIC_RELAXED);
  for (size_t i = 0; i < kFilterBytes; ++i)
    __atomic_store_n(&control.desired_filter[i], i < filter.size() ? filter[i] : '\0', __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_filter_bytes, uint32_t(filter.size()), __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_ops_steps, ops_steps, __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_generation, generation, __ATOMIC_RELAXED);
  __atomic_store_n(&control.desired_seq, seq + 2, __ATOMIC_RELEASE);
  return generation;
}

ControlBlock SegmentReader::control_state() const {
  const ControlBlock& control = *view_.control;
  ControlBlock state;
  // The generation first: the producer stores it last, so the rest is at least as new.
  const uint64_t applied_generation = __atomic_load_n(&control.applied_generation, __ATOMIC_ACQUIRE);
  copy_words(&state, &control);
  state.applied_generation = applied_generation;
  return state;
}

}  // namespace gpuobs
