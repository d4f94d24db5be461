// A control request (what the daemon asks a producer to put in force) and the one check every
// side applies to it: the daemon's reader before it writes a request, a producer before it
// applies one, so both refuse the same requests with the same words.
#pragma once

#include <cstdint>
#include <string>

#include "gpuobs/layout.h"

namespace gpuobs {

struct ControlRequest {
  uint64_t generation = 0;
  Mode mode = Mode::Off;
  uint32_t shift = 0;
  PatchSet patch_set = PatchSet::Block;
  std::string filter;
  uint32_t ops_steps = 0;  // > 0: open an op window of this many engine steps as well
};

// Rejects what no producer may apply; "" when the request is well formed.
std::string control_request_problem(uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
                                    uint32_t ops_steps = 0);

}  // namespace gpuobs
