#include "gpuobs/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "gpuobs/trusted_dir.h"

namespace gpuobs {
namespace {

void copy_text(char* out, size_t capacity, const std::string& text) {
  const size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

std::string errno_text(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// Closes a descriptor and removes the temporary file (by its name in its directory) unless released.
struct TempFile {
  int fd = -1;
  int directory = -1;
  std::string name;
  ~TempFile() {
    if (fd >= 0) {
      ::close(fd);
      ::unlinkat(directory, name.c_str(), 0);
    }
  }
};

}  // namespace

std::string segment_file_name(uint32_t pid, uint64_t pid_start_ticks) {
  return std::string(kSegmentPrefix) + std::to_string(pid) + "-" + std::to_string(pid_start_ticks) + kSegmentSuffix;
}

MappedSegment::MappedSegment(std::string path, uint8_t* base, uint64_t bytes, const Capacities& caps)
    : path_(std::move(path)), base_(base), bytes_(bytes), view_(make_view(base, caps)) {}

MappedSegment::~MappedSegment() {
  if (base_) ::munmap(base_, bytes_);
}

std::unique_ptr<MappedSegment> MappedSegment::create(const SegmentOptions& options, std::string* error) {
  const char* problem = capacities_problem(options.caps);
  if (*problem) {
    *error = problem;
    return nullptr;
  }
  const Geometry geometry = compute_geometry(options.caps);
  const uint32_t pid = uint32_t(::getpid());
  const uint64_t start_ticks = process_start_ticks(pid);

  // The directory is shared (/dev/shm): opened without following a link and checked, so that no
  // other user can make this process write elsewhere or replace its segment.
  std::string refused;
  const std::unique_ptr<TrustedDir> directory = TrustedDir::open(options.directory, false, 0, &refused);
  if (!directory) {
    *error = "segment directory refused: " + refused;
    return nullptr;
  }
  TempFile temp;
  temp.directory = directory->fd();
  std::random_device entropy;
  temp.name = ".gpuobs-" + std::to_string(pid) + "-" + std::to_string(entropy()) + ".tmp";
  const std::string temp_path = options.directory + "/" + temp.name;
  temp.fd = ::openat(temp.directory, temp.name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (temp.fd < 0) {
    *error = errno_text("cannot create", temp_path);
    return nullptr;
  }
  mode_t mode = 0600;
  if (options.group != gid_t(-1)) {
    if (::fchown(temp.fd, uid_t(-1), options.group) != 0) {
      *error = errno_text("cannot give group to", temp_path);
      return nullptr;
    }
    mode = 0660;
  }
  if (::fchmod(temp.fd, mode) != 0) {
    *error = errno_text("cannot chmod", temp_path);
    return nullptr;
  }
  // Reserve every page now: on a full tmpfs a later first touch would be a SIGBUS in the
  // served process; here it is an error message.
  const int reserve = ::posix_fallocate(temp.fd, 0, off_t(geometry.segment_bytes));
  if (reserve != 0) {
    errno = reserve;
    *error = errno_text("no space for segment", temp_path);
    return nullptr;
  }
  void* mapped = ::mmap(nullptr, geometry.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, temp.fd, 0);
  if (mapped == MAP_FAILED) {
    *error = errno_text("cannot map", temp_path);
    return nullptr;
  }
  const std::string final_name = segment_file_name(pid, start_ticks);
  const std::string final_path = options.directory + "/" + final_name;
  std::unique_ptr<MappedSegment> segment(
      new MappedSegment(final_path, static_cast<uint8_t*>(mapped), geometry.segment_bytes, options.caps));
  const SegmentView& view = segment->view();

  SegmentHeader& header = *view.header;
  header.magic = kMagic;
  header.layout_version = kLayoutVersion;
  header.header_bytes = sizeof(SegmentHeader);
  header.segment_bytes = geometry.segment_bytes;
  header.pid = pid;
  header.producer_kind = uint32_t(options.producer_kind);
  header.pid_start_ticks = start_ticks;
  header.start_monotonic_ns = monotonic_ns();
  header.start_realtime_ns = realtime_ns();
  header.event_rings = options.caps.event_rings;
  header.event_ring_records = options.caps.event_ring_records;
  header.launch_ring_records = options.caps.launch_ring_records;
  header.kernel_slots = options.caps.kernel_slots;
  header.name_arena_bytes = options.caps.name_arena_bytes;
  header.event_record_bytes = kEventRecordBytes;
  header.launch_record_bytes = kLaunchRecordBytes;
  header.patch_set = uint32_t(options.patch_set);
  header.control_offset = geometry.control_offset;
  header.counters_offset = geometry.counters_offset;
  header.ring_controls_offset = geometry.ring_controls_offset;
  header.kernel_counters_offset = geometry.kernel_counters_offset;
  header.kernel_table_offset = geometry.kernel_table_offset;
  header.name_arena_offset = geometry.name_arena_offset;
  header.launch_ring_offset = geometry.launch_ring_offset;
  header.event_rings_offset = geometry.event_rings_offset;
  header.heartbeat_ns = header.start_monotonic_ns;
  copy_text(header.producer, sizeof(header.producer), options.producer);
  copy_text(header.label, sizeof(header.label), options.label);
  header.producer_flags = options.producer_flags;
  copy_text(header.memory_kernels, sizeof(header.memory_kernels), options.memory_kernels);
  copy_text(header.cubin_dir, sizeof(header.cubin_dir), options.cubin_dir);

  ControlBlock& control = *view.control;
  control.desired_mode = uint32_t(options.initial_mode);
  control.desired_shift = options.initial_shift;
  control.desired_patch_set = uint32_t(options.patch_set);
  control.applied_mode = uint32_t(options.initial_mode);
  control.applied_shift = options.initial_shift;
  control.applied_patch_set = uint32_t(options.patch_set);
  const size_t filter_bytes = std::min(options.initial_filter.size(), size_t(kFilterBytes - 1));
  copy_text(control.desired_filter, kFilterBytes, options.initial_filter);
  copy_text(control.applied_filter, kFilterBytes, options.initial_filter);
  control.desired_filter_bytes = control.applied_filter_bytes = uint32_t(filter_bytes);
  control.status = uint32_t(ControlStatus::Ok);
  control.applied_time_ns = header.start_monotonic_ns;  // generation 0: in force from the start

  const uint64_t launch_capacity = options.caps.launch_ring_records;
  view.launch_ring_control->limit_cache = launch_capacity;

  __atomic_store_n(&header.state, uint32_t(SegmentState::Live), __ATOMIC_RELEASE);
  // Published under its name only if nothing has it (a link planted there is not replaced, and
  // never followed); then the temporary name goes.
  if (::linkat(temp.directory, temp.name.c_str(), temp.directory, final_name.c_str(), 0) != 0) {
    *error = errno_text("cannot publish", final_path);
    return nullptr;
  }
  ::close(temp.fd);
  temp.fd = -1;  // published: no longer ours to remove
  ::unlinkat(temp.directory, temp.name.c_str(), 0);
  return segment;
}

void MappedSegment::mark_exited() {
  __atomic_store_n(&view_.header->heartbeat_ns, monotonic_ns(), __ATOMIC_RELEASE);
  __atomic_store_n(&view_.header->state, uint32_t(SegmentState::Exited), __ATOMIC_RELEASE);
}

bool MappedSegment::unlink_file() { return ::unlink(path_.c_str()) == 0; }

}  // namespace gpuobs
