// Creating a segment file: created under a temporary name, sized, initialised, then renamed
// to its final name, so a reader scanning the directory never sees half a segment.
// No exceptions: the injector calls this from a CUDA callback.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "gpuobs/layout.h"
#include "gpuobs/process_info.h"
#include "gpuobs/segment_view.h"

namespace gpuobs {

struct SegmentOptions {
  std::string directory = "/dev/shm";
  Capacities caps{};
  ProducerKind producer_kind = ProducerKind::Injector;
  PatchSet patch_set = PatchSet::Block;
  Mode initial_mode = Mode::Counter;
  uint32_t initial_shift = 0;
  std::string initial_filter;  // the kernel filter in force from the start (cut to kFilterBytes - 1)
  std::string memory_kernels;  // GPUOBS_MEMORY_KERNELS as the producer took it (at most kMemoryKernelsBytes - 1)
  std::string cubin_dir;       // where it keeps module cubins, "" when it keeps none (cut to kHeaderTextBytes - 1)
  gid_t group = gid_t(-1);     // when set: group-owned and mode 0660, else 0600
  std::string producer = "gpuobs";
  std::string label;
  uint32_t producer_flags = 0;  // ProducerFlags
};

// The file name a process's segment gets: the pid plus its start time, so a reused pid never
// collides with a dead process's leftover segment.
std::string segment_file_name(uint32_t pid, uint64_t pid_start_ticks);
constexpr const char* kSegmentPrefix = "gpuobs-";
constexpr const char* kSegmentSuffix = ".seg";

// A mapped segment file. Unmaps on destruction; never unlinks unless asked.
class MappedSegment {
 public:
  // nullptr and a reason in *error when the directory, space or permissions say no.
  static std::unique_ptr<MappedSegment> create(const SegmentOptions& options, std::string* error);
  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  const SegmentView& view() const { return view_; }
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }
  // Marks the segment Exited (the producer is done; a reader may drain and remove it).
  void mark_exited();
  bool unlink_file();

 private:
  MappedSegment(std::string path, uint8_t* base, uint64_t bytes, const Capacities& caps);
  std::string path_;
  uint8_t* base_;
  uint64_t bytes_;
  SegmentView view_;
};

}  // namespace gpuobs
