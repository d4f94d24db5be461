// Measurement-only patch choices, for the overhead benchmarks: do-nothing patches, block-entry
// patches cut after one step of a leader's work, the naive two-atomic access count. Their counts
// are wrong by design, so only a bench build (cmake -DGPUOBS_BENCH_TOOLS=ON, which also compiles
// their patches into the fatbin) reads the GPUOBS_DEBUG_PATCHES / GPUOBS_NAIVE_COUNTING settings
// that choose them; any other build ignores them and says so once.
#pragma once

namespace gpuobs {

struct DiagnosticPatches {
  const char* block_function = nullptr;   // instead of the block hooks' patches (GPUOBS_DEBUG_PATCHES)
  const char* access_function = nullptr;  // instead of the global access patch (empty, or GPUOBS_NAIVE_COUNTING=1)
  bool enter_only = false;                // block exits unpatched (enter_only, or a step of the block-entry patch)
  bool slot_index_in_userdata = false;    // GPUOBS_DEBUG_PATCHES=load_context: its patch finds the context
};

// The choices the environment makes (all off outside a bench build).
DiagnosticPatches load_diagnostic_patches();

}  // namespace gpuobs
