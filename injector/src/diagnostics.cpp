#include "diagnostics.h"

#include <cstdlib>
#include <cstring>

#include "injector_log.h"

namespace gpuobs {
namespace {

#ifdef GPUOBS_DIAGNOSTICS
// The diagnostic block-entry patches (injector/patches/diagnostic_patches.cuh), by the step
// they stop after.
const struct {
  const char* step;
  const char* function;
} kDebugEntries[] = {{"leader", "gpuobs_debug_leader"},
                     {"load", "gpuobs_debug_load"},
                     {"load_context", "gpuobs_debug_load_context"},
                     {"red", "gpuobs_debug_red"},
                     {"count", "gpuobs_debug_count"},
                     {"count_inline", "gpuobs_debug_count_inline"},
                     {"census", "gpuobs_debug_census"},
                     {"tid_inline", "gpuobs_debug_tid_inline"},
                     {"red_inline", "gpuobs_debug_red_inline"}};

const char* debug_entry_function(const char* step) {
  for (const auto& entry : kDebugEntries)
    if (std::strcmp(step, entry.step) == 0) return entry.function;
  return nullptr;
}
#endif

}  // namespace

DiagnosticPatches load_diagnostic_patches() {
  DiagnosticPatches chosen;
  const char* debug = std::getenv("GPUOBS_DEBUG_PATCHES");
  const char* naive = std::getenv("GPUOBS_NAIVE_COUNTING");
#ifdef GPUOBS_DIAGNOSTICS
  if (naive != nullptr && std::strcmp(naive, "1") == 0) chosen.access_function = "gpuobs_memory_access_naive";
  if (debug == nullptr) return chosen;
  if (std::strcmp(debug, "empty") == 0) {
    chosen.block_function = "gpuobs_empty_block";
    chosen.access_function = "gpuobs_empty_access";
  } else if (std::strcmp(debug, "enter_only") == 0) {
    chosen.enter_only = true;
  } else if ((chosen.block_function = debug_entry_function(debug)) != nullptr) {
    chosen.enter_only = true;
    chosen.slot_index_in_userdata = std::strcmp(debug, "load_context") == 0;
  } else {
    log_line("GPUOBS_DEBUG_PATCHES=%s: no such diagnostic; ignored", debug);
  }
#else
  if (debug != nullptr || naive != nullptr)
    log_line("GPUOBS_DEBUG_PATCHES and GPUOBS_NAIVE_COUNTING are settings of a bench build; ignored");
#endif
  return chosen;
}

}  // namespace gpuobs
