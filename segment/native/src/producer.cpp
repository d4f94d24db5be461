#include "gpuobs/producer.h"

namespace gpuobs {

std::unique_ptr<SegmentWriter> start_producer(const SegmentOptions& options, const std::string& filter,
                                              std::string* error) {
  // the segment is published with its start config in force (generation 0, acknowledged at its
  // start): a reader never sees it change without a request
  SegmentOptions starting = options;
  starting.initial_filter = filter;
  std::unique_ptr<MappedSegment> segment = MappedSegment::create(starting, error);
  if (!segment) return nullptr;
  return std::make_unique<SegmentWriter>(std::move(segment));
}

namespace {

// Why a switch of patch set is refused while graph execs are alive, and what to do instead (a
// graph exec keeps the patched code it was instantiated with: no re-patching under it).
std::string patch_set_refusal(const ControlRequest& request, PatchSet wanted, int64_t live) {
  const std::string alive = std::to_string(live) + " CUDA graph execs are alive";
  if (wanted == PatchSet::Memory && request.patch_set != PatchSet::Memory)
    return std::string("mode ") + mode_name(request.mode) + " needs access hooks and no kernel has them (" + alive +
           "); restart with GPUOBS_MEMORY_KERNELS=REGEX for chosen kernels, or use sampled";
  return std::string("patch set ") + patch_set_name(wanted) + " needs re-patching and " + alive +
         "; restart the process with GPUOBS_PATCH_SET=" + patch_set_name(wanted);
}

}  // namespace

PatchSet patch_set_needed(const ControlRequest& request, bool chooses_access_kernels) {
  if (mode_records_accesses(request.mode) && request.patch_set == PatchSet::Block && !chooses_access_kernels)
    return PatchSet::Memory;
  return request.patch_set;
}

FilterVerdict judge_kernel(const KernelFilter* filter, const std::string& mangled, const std::string& demangled) {
  if (!filter) return FilterVerdict{};
  bool costly = false;
  for (const std::string* name : {&mangled, &demangled}) {
    const KernelFilter::Verdict verdict = filter->search(*name, kFilterBudget);
    if (verdict == KernelFilter::Verdict::Match) return FilterVerdict{};
    costly = costly || verdict == KernelFilter::Verdict::TooCostly;
  }
  return FilterVerdict{costly, costly};
}

std::string memory_kernels_problem(const std::string& pattern) {
  if (pattern.size() >= kMemoryKernelsBytes) return "longer than " + std::to_string(kMemoryKernelsBytes - 1) + " bytes";
  KernelFilter compiled;
  const std::string problem = KernelFilter::compile(pattern, &compiled);
  return problem.empty() ? "" : "not a kernel name pattern: " + problem;
}

bool module_chosen_for_access_hooks(const KernelFilter& chosen, const std::vector<std::string>& mangled_names) {
  for (const std::string& name : mangled_names) {
    if (chosen.search(name, kFilterBudget) == KernelFilter::Verdict::Match) return true;
    if (chosen.search(demangle(name), kFilterBudget) == KernelFilter::Verdict::Match) return true;
  }
  return false;
}

void handle_control_request(SegmentWriter& writer, ControlTarget& target, const ControlRequest& request) {
  __atomic_fetch_add(&writer.view().counters->control_requests, 1, __ATOMIC_RELAXED);
  const std::string problem = control_request_problem(uint32_t(request.mode), request.shift,
                                                      uint32_t(request.patch_set), request.filter, request.ops_steps);
  if (!problem.empty()) {
    writer.acknowledge(request.generation, target.in_force(), ControlStatus::InvalidArgument, problem);
    return;
  }
  const PatchSet wanted = patch_set_needed(request, target.chooses_access_kernels());
  if (wanted != target.patch_set()) {
    const int64_t live = target.live_graph_execs();
    if (live > 0) {
      writer.acknowledge(request.generation, target.in_force(), ControlStatus::FailedPrecondition,
                         patch_set_refusal(request, wanted, live));
      return;
    }
    std::string error;
    if (!target.switch_patch_set(wanted, &error)) {
      writer.acknowledge(request.generation, target.in_force(), ControlStatus::Internal,
                         "re-patching failed: " + error);
      return;
    }
  }
  ControlRequest config = request;
  config.patch_set = wanted;
  std::shared_ptr<KernelFilter> filter;
  if (!config.filter.empty()) {
    filter = std::make_shared<KernelFilter>();
    KernelFilter::compile(config.filter, filter.get());  // checked above
  }
  config.ops_steps = 0;  // a window is opened once, not kept in force
  const ControlRequest current = target.in_force();
  const bool unchanged = config.mode == current.mode && config.shift == current.shift &&
                         config.patch_set == current.patch_set && config.filter == current.filter;
  // a window asked with the config in force (as gpuobsd asks it) re-binds nothing
  if (!(request.ops_steps && unchanged)) target.put_in_force(config, std::move(filter));
  if (request.ops_steps) target.open_ops_window(request.ops_steps);
  writer.acknowledge(request.generation, config, ControlStatus::Ok, "");
}

bool follow_control(SegmentWriter& writer, ControlTarget& target, uint64_t* seen_generation) {
  ControlRequest request;
  if (!writer.poll_control(*seen_generation, &request)) return false;
  *seen_generation = request.generation;
  handle_control_request(writer, target, request);
  return true;
}

}  // namespace gpuobs
