// gpuobs-synth's side of the control decision: the config its simulated device runs under. The
// decision itself (check, refuse or apply, acknowledge) is the segment library's, the injector's
// own (producer.h); this class answers its questions as the injector does, with no modules to
// re-patch and a fixed count of "live" graph execs (--live-graphs).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "gpuobs/producer.h"
#include "kernel_catalog.h"
#include "options.h"

namespace gpuobs {
namespace synth {

// What the control thread has applied, read by the device thread at each launch.
class AppliedConfig : public ControlTarget {
 public:
  AppliedConfig(const Options& options, const std::vector<KernelProfile>& catalog);

  ControlRequest in_force() override;
  PatchSet patch_set() override;
  bool chooses_access_kernels() override { return chooses_; }
  // --memory-kernels chose catalog kernel `index` (its own module) for the access hooks.
  bool chosen(size_t index) const { return chosen_[index] != 0; }
  int64_t live_graph_execs() override { return live_graphs_; }
  // Nothing to re-patch: the set is recorded when the config is put in force.
  bool switch_patch_set(PatchSet, std::string*) override { return true; }
  void put_in_force(const ControlRequest& config, std::shared_ptr<const KernelFilter> filter) override;
  // As the injector hands a window to the framework plugin: the device thread takes it.
  void open_ops_window(uint32_t steps) override { ops_window_.store(steps, std::memory_order_release); }
  // The op window's steps asked for since the last call (0: none), as the plugin takes them.
  uint32_t take_ops_window() { return ops_window_.exchange(0, std::memory_order_acq_rel); }

  // Bumped by every config put in force: the device thread copies the config when it changed.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // The config in force and, per catalog kernel, whether the filter lets it record and whether
  // it has the access hooks (the memory set, or chosen by --memory-kernels).
  void copy(ControlRequest* request, std::vector<uint8_t>* captured, std::vector<uint8_t>* access_hooked);

 private:
  std::vector<uint8_t> match(const KernelFilter* filter) const;

  const std::vector<KernelProfile>& catalog_;
  const uint32_t live_graphs_;
  const bool chooses_;
  std::vector<uint8_t> chosen_;  // per catalog kernel: --memory-kernels chose its module (its own)
  std::mutex mutex_;
  ControlRequest in_force_;
  std::vector<uint8_t> captured_;
  std::atomic<uint64_t> version_{1};
  std::atomic<uint32_t> ops_window_{0};
};

// Follows the daemon's control requests every `poll_us` until `done`, as the injector's tool
// thread does.
void follow_control_until(SegmentWriter& writer, AppliedConfig& config, uint32_t poll_us,
                          const std::atomic<bool>& done);

}  // namespace synth
}  // namespace gpuobs
