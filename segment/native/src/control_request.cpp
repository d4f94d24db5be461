#include "gpuobs/control_request.h"

#include "gpuobs/kernel_filter.h"

namespace gpuobs {

std::string control_request_problem(uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
                                    uint32_t ops_steps) {
  if (mode >= kModeCount) return "unknown mode " + std::to_string(mode);
  if (shift > kMaxShift) return "shift " + std::to_string(shift) + " out of range 0.." + std::to_string(kMaxShift);
  if (patch_set >= kPatchSetCount) return "unknown patch set " + std::to_string(patch_set);
  if (ops_steps > kMaxOpsSteps)
    return "an op window of " + std::to_string(ops_steps) + " steps; at most " + std::to_string(kMaxOpsSteps);
  if (filter.size() >= kFilterBytes) return "kernel filter longer than " + std::to_string(kFilterBytes - 1) + " bytes";
  if (!filter.empty()) {
    KernelFilter compiled;
    const std::string problem = KernelFilter::compile(filter, &compiled);
    if (!problem.empty()) return "invalid kernel filter: " + problem;
  }
  return "";
}

}  // namespace gpuobs
