// Clocks and what /proc says about a process: shared by producers (segment creation, records'
// host times) and the reader (is the producer still the process that created the segment?).
#pragma once

#include <cstdint>

namespace gpuobs {

uint64_t monotonic_ns();
uint64_t realtime_ns();
// /proc/PID/stat field 22 (start time in clock ticks): tells a reused pid apart; 0 when unreadable.
uint64_t process_start_ticks(uint32_t pid);
// /proc/PID/stat field 3 (R, S, D, Z, ...); '\0' when the process is gone.
char process_state(uint32_t pid);

}  // namespace gpuobs
