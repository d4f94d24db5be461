// The injector's settings, each defined once with its GPUOBS_* environment variable. The
// injector has no flags: the environment is how a served process is configured.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "diagnostics.h"
#include "gpuobs/layout.h"

namespace gpuobs {

struct InjectorConfig {
  std::string segment_dir = "/dev/shm";  // GPUOBS_SEGMENT_DIR: where segments are created
  PatchSet patch_set = PatchSet::Block;  // GPUOBS_PATCH_SET: block | memory (fixed for the process)
  Mode mode = Mode::Counter;             // GPUOBS_MODE: initial mode
  uint32_t shift = 10;                   // GPUOBS_SHIFT: initial sample shift (0..31)
  gid_t group = gid_t(-1);               // GPUOBS_GROUP: group that may read the segment (0660)
  uint32_t ring_records = 1u << 17;      // GPUOBS_RING_RECORDS: event ring records per context
  uint32_t contexts = 4;                 // GPUOBS_CONTEXTS: event rings, one per CUDA context
  uint32_t publish_ms = 50;              // GPUOBS_PUBLISH_MS: device counters published this often (each
                                         // publish copies every kernel's counters to the host)
  uint32_t control_poll_us = 1000;       // GPUOBS_CONTROL_POLL_US: control block poll period
  std::string memory_kernels;            // GPUOBS_MEMORY_KERNELS: in the block set, the modules holding a
                                         // kernel whose name matches also get the memory access hooks
  bool block_exit = false;               // GPUOBS_BLOCK_EXIT: hook block exits too (exit events)
  bool exit_publish = true;              // GPUOBS_EXIT_PUBLISH: publish once more at exit (0: skip)
  bool step_aside_allowed = false;       // GPUOBS_STEP_ASIDE=1: gpuobs_step_aside() may unsubscribe (a probe:
                                         // on r580 it does not let CUPTI attach, and it ends observation)
  bool launch_times = false;             // GPUOBS_LAUNCH_TIMES=1: in `counter`, a launch event from block (0,0,0)
                                         // (device entry times: engine steps' spans without `blocks`)
  bool replay_spans = true;              // GPUOBS_REPLAY_SPANS (0: off): in `counter` and up, each graph
                                         // replay's device span, folded by block (0,0,0)'s leaders and
                                         // read by the tool thread (replay_spans.h)
  bool launch_trace = false;             // GPUOBS_LAUNCH_TRACE: a host record per kernel launch (opt-in:
                                         // each launch then costs a host callback)
  bool bound_config = false;             // GPUOBS_CONFIG_WORD: slot (patches read their kernel's config word
                                         // from device memory) | bound (it rides in each function's
                                         // userdata: no load, but a switch does not reach graph
                                         // execs launched before it)
  DiagnosticPatches diagnostics;         // measurement-only patches (a bench build only: diagnostics.h)
  std::string patch_file;                // GPUOBS_PATCH_FILE: patch fatbin (default: beside the library)
  std::string label;                     // GPUOBS_LABEL: free text shown by the daemon
  std::string cubin_dir;                 // GPUOBS_CUBIN_DIR: module cubins kept (default: default_cubin_directory(),
                                         // under the user's own cache directory, created with its parents)
  bool cubin_dir_default = true;         // GPUOBS_CUBIN_DIR unset
  uint32_t cubin_mb = 1024;              // GPUOBS_CUBIN_MB: disk this process may add there (0: keep none)
};

// Reads the environment; unknown or invalid values are logged once and the default kept.
InjectorConfig load_injector_config();

}  // namespace gpuobs
