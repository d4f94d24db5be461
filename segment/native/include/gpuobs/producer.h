// What every producer does around its segment, written once for the injector, gpuobs-synth and
// the test writer of gpuobs._native: the set-up (the segment, its writer, the config it starts in
// acknowledged) and the control decision (a request read from the segment, checked, applied or
// refused, acknowledged). gpuobs-synth runs this code, so the CPU tests test the decisions the
// injector makes on a GPU. No exceptions are thrown here on purpose: the injector sets up its
// segment from inside a CUDA callback.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpuobs/control_request.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/segment_writer.h"
#include "gpuobs/shm_segment.h"

namespace gpuobs {

// Creates the segment and its writer, the segment published with the config the producer starts
// in already in force (generation 0: the options' mode, shift and patch set, and `filter`), so a
// reader sees what is in force before any request and never sees it change without one.
// nullptr and the reason in *error when the segment cannot be made.
std::unique_ptr<SegmentWriter> start_producer(const SegmentOptions& options, const std::string& filter,
                                              std::string* error);

// Steps the filter may spend on one kernel name (a few ms at most): a pattern and name that need
// more are not judged (the kernel records, as with no filter), so no client can hold a producer.
constexpr uint64_t kFilterBudget = 4000000;

struct FilterVerdict {
  bool captured = true;     // the kernel records
  bool too_costly = false;  // no name matched and one could not be judged: captured anyway
};
// The kernel filter's verdict on a kernel with these names; nullptr is no filter (all record).
FilterVerdict judge_kernel(const KernelFilter* filter, const std::string& mangled, const std::string& demangled);

// GPUOBS_MEMORY_KERNELS, decided per module when it is patched (patching is per module, so every
// kernel of a chosen module gets the hooks): whether one of the module's functions, by its
// mangled or demangled name, matches `chosen`. A name too costly to judge does not choose.
// Why GPUOBS_MEMORY_KERNELS cannot be taken ("" when it can): longer than the segment shows
// (kMemoryKernelsBytes - 1), or not a kernel filter pattern (kernel_filter.h).
std::string memory_kernels_problem(const std::string& pattern);
bool module_chosen_for_access_hooks(const KernelFilter& chosen, const std::vector<std::string>& mangled_names);

// What the control decision needs of a producer: what is in force and how to change it. Called
// from the producer's control thread only.
class ControlTarget {
 public:
  virtual ~ControlTarget() = default;
  // The config in force, acknowledged again when a request is refused.
  virtual ControlRequest in_force() = 0;
  // The patch set the producer's modules are patched with now.
  virtual PatchSet patch_set() = 0;
  // Kernels were chosen at start for the access hooks in the block set (GPUOBS_MEMORY_KERNELS):
  // `memory` then records their accesses without the memory patch set.
  virtual bool chooses_access_kernels() = 0;
  // Graph execs alive: a switch of patch set is refused while any is, since an exec keeps the
  // patched code it was instantiated with.
  virtual int64_t live_graph_execs() = 0;
  // Re-patches every module with `set`; false and the reason in *error when that failed.
  virtual bool switch_patch_set(PatchSet set, std::string* error) = 0;
  // Puts a checked config in force; `filter` is its kernel filter compiled (nullptr when empty).
  virtual void put_in_force(const ControlRequest& config, std::shared_ptr<const KernelFilter> filter) = 0;
  // Opens an op window of `steps` engine steps: a framework plugin in the process takes it at its
  // next step (the injector hands it over; gpuobs-synth plays one).
  virtual void open_ops_window(uint32_t steps) = 0;
};

// The patch set a request needs: the one it names, except that `memory` (which records nothing
// but accesses) needs the memory patch set where no kernel was chosen for the access hooks.
PatchSet patch_set_needed(const ControlRequest& request, bool chooses_access_kernels);

// The control decision on one request: counted; refused with the config in force kept when it is
// malformed (InvalidArgument), needs another patch set while graph execs are alive
// (FailedPrecondition, with the remedy) or re-patching failed (Internal); else put in force;
// acknowledged always.
void handle_control_request(SegmentWriter& writer, ControlTarget& target, const ControlRequest& request);

// Handles the daemon's request when there is one newer than *seen_generation (which it then
// becomes); true when there was one. Never waits on the daemon.
bool follow_control(SegmentWriter& writer, ControlTarget& target, uint64_t* seen_generation);

}  // namespace gpuobs
