#include "gpuobs/process_info.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace gpuobs {
namespace {

uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// The fields after the command name of /proc/PID/stat ("S ppid ..."); empty when unreadable.
std::string stat_fields(uint32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  FILE* file = std::fopen(path, "re");
  if (!file) return "";
  char text[1024];
  const size_t n = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
  const char* at = std::strrchr(text, ')');
  return (at && at[1] == ' ') ? std::string(at + 2) : std::string();
}

}  // namespace

uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }
uint64_t realtime_ns() { return clock_ns(CLOCK_REALTIME); }

uint64_t process_start_ticks(uint32_t pid) {
  const std::string fields = stat_fields(pid);
  const char* at = fields.c_str();
  for (int field = 3; *at && field < 22; ++at) {
    if (*at == ' ') ++field;
  }
  return std::strtoull(at, nullptr, 10);
}

char process_state(uint32_t pid) {
  const std::string fields = stat_fields(pid);
  return fields.empty() ? '\0' : fields[0];
}

}  // namespace gpuobs
