// Logging for code that runs inside the served process: one line per distinct problem, to
// stderr, prefixed so operators can grep it. Never throws, never allocates on repeat calls.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace gpuobs {

enum class LogOnce : int {
  PatchLoad,
  PatchModule,
  KernelTable,
  Internal,
  Cubin,
  Filter,
  TraceWindow,
  MemoryKernels,
  kCount
};

inline void log_line(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("gpuobs: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
}

// Logs the first occurrence of `key` only; later ones are counted by the caller.
inline bool first_time(LogOnce key) {
  static std::atomic<bool> seen[int(LogOnce::kCount)];
  return !seen[int(key)].exchange(true);
}

}  // namespace gpuobs
