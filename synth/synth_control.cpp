#include "synth_control.h"

#include <chrono>
#include <thread>

namespace gpuobs {
namespace synth {

AppliedConfig::AppliedConfig(const Options& options, const std::vector<KernelProfile>& catalog)
    : catalog_(catalog),
      live_graphs_(options.live_graphs),
      chooses_(!options.memory_kernels.empty()),
      chosen_(catalog.size(), 0) {
  KernelFilter chosen;
  if (chooses_ && KernelFilter::compile(options.memory_kernels, &chosen).empty()) {  // checked when parsed
    for (size_t index = 0; index < catalog.size(); ++index)  // every kernel is a module of its own here
      chosen_[index] = module_chosen_for_access_hooks(chosen, {catalog[index].mangled}) ? 1 : 0;
  }
  in_force_.mode = options.mode;
  in_force_.shift = options.shift;
  in_force_.patch_set = options.patch_set;
  in_force_.filter = options.filter;
  KernelFilter filter;
  const bool filtered = !options.filter.empty() && KernelFilter::compile(options.filter, &filter).empty();
  captured_ = match(filtered ? &filter : nullptr);  // checked when the options were parsed
}

ControlRequest AppliedConfig::in_force() {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_force_;
}

PatchSet AppliedConfig::patch_set() {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_force_.patch_set;
}

void AppliedConfig::put_in_force(const ControlRequest& config, std::shared_ptr<const KernelFilter> filter) {
  std::vector<uint8_t> captured = match(filter.get());
  std::lock_guard<std::mutex> lock(mutex_);
  in_force_ = config;
  captured_ = std::move(captured);
  version_.fetch_add(1, std::memory_order_release);
}

void AppliedConfig::copy(ControlRequest* request, std::vector<uint8_t>* captured, std::vector<uint8_t>* access_hooked) {
  std::lock_guard<std::mutex> lock(mutex_);
  *request = in_force_;
  *captured = captured_;
  *access_hooked = chosen_;
  if (in_force_.patch_set == PatchSet::Memory) access_hooked->assign(chosen_.size(), 1);
}

std::vector<uint8_t> AppliedConfig::match(const KernelFilter* filter) const {
  std::vector<uint8_t> captured(catalog_.size(), 1);
  if (!filter) return captured;
  for (size_t slot = 0; slot < catalog_.size(); ++slot) {
    const std::string& mangled = catalog_[slot].mangled;
    captured[slot] = judge_kernel(filter, mangled, demangle(mangled)).captured ? 1 : 0;
  }
  return captured;
}

void follow_control_until(SegmentWriter& writer, AppliedConfig& config, uint32_t poll_us,
                          const std::atomic<bool>& done) {
  uint64_t seen = 0;
  while (!done.load()) {
    follow_control(writer, config, &seen);
    std::this_thread::sleep_for(std::chrono::microseconds(poll_us));
  }
}

}  // namespace synth
}  // namespace gpuobs
