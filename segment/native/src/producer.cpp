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

void handle_control_request(SegmentWriter& writer, ControlTarget& target, const ControlRequest& request) {
  __atomic_fetch_add(&writer.view().counters->control_requests, 1, __ATOMIC_RELAXED);
  const std::string problem = control_request_problem(uint32_t(request.mode), request.shift,
                                                      uint32_t(request.patch_set), request.filter, request.ops_steps);
  if (!problem.empty()) {
    writer.acknowledge(request.generation, target.in_force(), ControlStatus::InvalidArgument, problem);
    return;
  }
  const PatchSet wanted = mode_needs_memory_set(request.mode) ? PatchSet::Memory : request.patch_set;
  if (wanted != target.patch_set()) {
    const int64_t live = target.live_graph_execs();
    const std::string set_name = patch_set_name(wanted);
    if (live > 0) {
      writer.acknowledge(request.generation, target.in_force(), ControlStatus::FailedPrecondition,
                         std::string("mode ") + mode_name(request.mode) + " needs patch set " + set_name + " and " +
                             std::to_string(live) + " CUDA graph execs are alive; restart the process with " +
                             "GPUOBS_PATCH_SET=" + set_name);
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
