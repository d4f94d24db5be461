// The injector's settings, each defined once with its GPUOBS_* environment variable. The
// injector has no flags: the environment is how a served process is configured.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "gpuobs/layout.h"

namespace gpuobs {

struct InjectorConfig {
  std::string segment_dir = "/dev/shm";  // GPUOBS_SEGMENT_DIR: where segments are created
  PatchSet patch_set = PatchSet::Block;  // GPUOBS_PATCH_SET: block | memory (fixed for the process)
  Mode mode = Mode::Counter;             // GPUOBS_MODE: initial mode
  uint32_t shift = 10;                   // GPUOBS_SHIFT: initial sample shift (0..31)
  gid_t group = gid_t(-1);               // GPUOBS_GROUP: group that may read the segment (0660)
  uint32_t ring_records = 1u << 18;      // GPUOBS_RING_RECORDS: event ring records per context
  std::string patch_file;                // GPUOBS_PATCH_FILE: patch fatbin (default: beside the library)
  std::string label;                     // GPUOBS_LABEL: free text shown by the daemon
};

// Reads the environment; unknown or invalid values are logged once and the default kept.
InjectorConfig load_injector_config();

}  // namespace gpuobs
