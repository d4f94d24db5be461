// gpuobs-synth's device loop: the launches of an injected process as the injector records them
// (launch records, graph replays and their events, engine steps) and their work on the simulated
// device, paced and bounded by the options; then, when asked, a kernel that hangs.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include "gpuobs/segment_writer.h"
#include "kernel_catalog.h"
#include "options.h"
#include "simulated_device.h"
#include "synth_control.h"

namespace gpuobs {
namespace synth {

// Runs launches of the catalog's kernels (registered at `slots`) until a limit of the options is
// reached or `stop` is set; returns how many launches it made.
uint64_t run_device_loop(const Options& options, SegmentWriter& writer, SimulatedDevice& device, AppliedConfig& config,
                         const std::vector<KernelProfile>& catalog, const std::vector<uint32_t>& slots,
                         std::mt19937_64& rng, const std::atomic<bool>& stop);

}  // namespace synth
}  // namespace gpuobs
