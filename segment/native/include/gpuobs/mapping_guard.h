// A producer's segment is a file any process of its uid can shrink while the daemon has it
// mapped; the next load from a page past the new end raises SIGBUS, which would take down the
// daemon and with it the observation of every process on the host. A guarded mapping turns that
// fault into a recoverable condition: the faulting mapping is replaced, in place, by zero-filled
// private memory (the load then completes and reads zeros), and the guard records that it
// happened so the reader stops trusting the segment. Faults outside every guarded mapping go to
// whatever handler was installed before, as if the guard were not there.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuobs {

class MappingGuard {
 public:
  // Guards [base, base + bytes) for the guard's lifetime. When the fixed table is full the
  // mapping is unguarded (guarded() says so) and behaves as a plain mapping.
  MappingGuard(void* base, size_t bytes) noexcept;
  ~MappingGuard();
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  bool guarded() const noexcept { return slot_ >= 0; }
  // A load or store hit a page past the file's end: the mapping now holds zeros, not the file.
  bool faulted() const noexcept;

  // Faults absorbed since the process started, over every guarded mapping.
  static uint64_t faults_absorbed() noexcept;

 private:
  int slot_ = -1;
};

}  // namespace gpuobs
