#include "host_annotations.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "driver_api.h"
#include "gpuobs/process_info.h"
#include "injector_log.h"

namespace gpuobs {
namespace {

// The longest an op window's launch trace stays on without a step of its window (each step says
// so): a window is a bounded look, whatever becomes of the engine that opened it.
constexpr uint64_t kMaxTraceWindowNs = 300000000000ULL;

thread_local uint64_t t_current_op = 0;  // the framework op open on this thread: stamped into its launches
// The nodes of the capture this thread last reported ops of (record_capture): the graph's node
// list less these is what the op just added. One capture at a time per thread, so it is bounded
// by one graph's nodes; a new capture id starts afresh (a graph handle may be reused, its id not).
struct CaptureSeen {
  uint64_t capture_id = 0;
  std::unordered_set<uint64_t> nodes;
  std::vector<CUgraphNode> listed;
  std::vector<uint64_t> added;
  std::vector<uint8_t> kernel;  // added[i] is a kernel node
};
thread_local CaptureSeen t_capture;

}  // namespace

uint64_t HostAnnotations::current_op() { return t_current_op; }

int HostAnnotations::record_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                                 uint32_t flags, uint64_t flops) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  return writer->write_step(step, requests, tokens, ids, ids_bytes, flags, flops) ? 0 : 1;
}

int HostAnnotations::set_label(const char* label) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr || label == nullptr) return -1;
  writer->set_label(label);
  return 0;
}

int HostAnnotations::set_identity(uint32_t role, uint32_t rank, uint32_t world_size, uint32_t local_rank,
                                  const char* model) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  const ProcessRole known = role <= uint32_t(ProcessRole::Other) ? ProcessRole(role) : ProcessRole::Other;
  writer->set_identity(known, rank, world_size, local_rank, model ? model : "");
  return 0;
}

int HostAnnotations::record_op(const char* label, uint32_t label_bytes) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  if (label == nullptr || label_bytes == 0) {  // the op is over: nothing to record but that
    t_current_op = 0;
    return 0;
  }
  const uint64_t op = next_op_.fetch_add(1, std::memory_order_relaxed) + 1;
  t_current_op = op;  // before the write: a dropped op record still keeps its launches apart
  return writer->write_op(op, label, std::min(label_bytes, kMaxOpLabelBytes)) ? 0 : 1;
}

int HostAnnotations::record_capture(uint64_t stream) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  uint64_t capture_id = 0;
  CUgraph graph = nullptr;
  if (!driver().graph_get_nodes || !stream_capture(reinterpret_cast<CUstream>(stream), &capture_id, &graph)) return 2;
  CaptureSeen& seen = t_capture;
  if (seen.capture_id != capture_id) {
    seen.capture_id = capture_id;
    seen.nodes.clear();
  }
  size_t count = 0;
  if (driver().graph_get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) return 2;
  seen.listed.resize(count);
  if (count && driver().graph_get_nodes(graph, seen.listed.data(), &count) != CUDA_SUCCESS) return 2;
  seen.listed.resize(std::min(count, seen.listed.size()));
  seen.added.clear();
  seen.kernel.clear();
  for (CUgraphNode node : seen.listed) {
    const uint64_t handle = reinterpret_cast<uint64_t>(node);
    if (!seen.nodes.insert(handle).second) continue;
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    const bool typed = driver().graph_node_get_type && driver().graph_node_get_type(node, &type) == CUDA_SUCCESS;
    seen.added.push_back(handle);
    seen.kernel.push_back(typed && type == CU_GRAPH_NODE_TYPE_KERNEL ? 1 : 0);
  }
  if (seen.added.empty()) return 0;
  return writer->write_op_nodes(t_current_op, reinterpret_cast<uint64_t>(graph), capture_id, seen.added.data(),
                                seen.kernel.data(), seen.added.size())
             ? 0
             : 1;
}

int HostAnnotations::take_ops_window() {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  if (!takes_op_windows_.exchange(true, std::memory_order_relaxed)) writer->note_takes_op_windows();
  return int(ops_window_.exchange(0, std::memory_order_acq_rel));
}

int HostAnnotations::launch_trace_window(bool on) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  std::lock_guard<std::mutex> window(trace_window_mutex_);
  set_trace_window(on);
  return 0;
}

void HostAnnotations::set_trace_window(bool on) {
  if (on) trace_window_since_ns_.store(monotonic_ns(), std::memory_order_relaxed);  // each step of the window
  if (trace_window_.load(std::memory_order_relaxed) == on) return;
  if (on) {
    trace_window_.store(true, std::memory_order_release);  // before the callbacks: no launch of the window unrecorded
    if (!launch_trace_) launch_callbacks_(true);
  } else {
    if (!launch_trace_) launch_callbacks_(false);
    trace_window_.store(false, std::memory_order_release);
  }
}

void HostAnnotations::close_stale_trace_window() {
  if (!trace_window_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> window(trace_window_mutex_);  // a step may refresh it meanwhile
  if (!trace_window_.load(std::memory_order_relaxed) ||
      monotonic_ns() - trace_window_since_ns_.load(std::memory_order_relaxed) < kMaxTraceWindowNs)
    return;
  set_trace_window(false);
  if (!launch_trace_ && first_time(LogOnce::TraceWindow))
    log_line("an op window saw no engine step for %llu s: its launch trace is off until its next step",
             (unsigned long long)(kMaxTraceWindowNs / 1000000000ULL));
}

int HostAnnotations::note_profiler(const char* who) {
  SegmentWriter* const writer = this->writer();
  if (writer == nullptr) return -1;
  writer->note_profiler_start();
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    log_line(
        "%s started in this process: it records no GPU activity while gpuobs observes it (the driver "
        "admits one tool: CUPTI fails with error 39); gpuobs keeps counting (gpuobsctl status, kernels, "
        "trace)",
        who && *who ? who : "a profiler");
  return 0;
}

}  // namespace gpuobs
