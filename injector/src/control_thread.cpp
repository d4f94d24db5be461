// The injector's tool thread: applies the daemon's control requests and publishes the device
// counters into the segment. It is the only thread that reads device memory back, and it does
// so on its own non-blocking stream, so neither a hung kernel nor a graph capture in another
// thread is disturbed (DEVICE.md, second probe).
#include <chrono>
#include <thread>

#include "driver_api.h"
#include "gpuobs/shm_segment.h"
#include "injector.h"
#include "injector_log.h"

namespace gpuobs {

bool Injector::captured_locked(uint32_t slot) {
  if (!filter_) return true;
  if (size_t(slot) * 2 + 1 >= slot_names_.size()) return true;
  return std::regex_search(slot_names_[size_t(slot) * 2], *filter_) ||
         std::regex_search(slot_names_[size_t(slot) * 2 + 1], *filter_);
}

std::vector<uint8_t> Injector::capture_for_all_locked() {
  std::vector<uint8_t> capture(slot_names_.size() / 2, 1);
  for (uint32_t slot = 0; slot < capture.size(); ++slot) capture[slot] = captured_locked(slot) ? 1 : 0;
  return capture;
}

void Injector::stage_locked() {
  const uint64_t config = make_config(in_force_.mode, in_force_.shift);
  const std::vector<uint8_t> capture = capture_for_all_locked();
  for (uint32_t slot = 0; slot < capture.size(); ++slot) slot_captured_[slot].store(capture[slot], std::memory_order_relaxed);
  ++device_generation_;
  const uint32_t contexts = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < contexts; ++index) {
    if (DeviceContext* context = contexts_[index].load(std::memory_order_acquire))
      context->stage(device_generation_, config, capture);
  }
}

void Injector::apply_request(const ControlRequest& request) {
  __atomic_fetch_add(&writer_->view().counters->control_requests, 1, __ATOMIC_RELAXED);
  std::string problem = control_request_problem(uint32_t(request.mode), request.shift, uint32_t(request.patch_set),
                                                request.filter);
  ControlRequest current;
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    current = in_force_;
  }
  if (!problem.empty()) {
    writer_->acknowledge(request.generation, current, ControlStatus::InvalidArgument, problem);
    return;
  }
  const PatchSet wanted = mode_needs_memory_set(request.mode) ? PatchSet::Memory : request.patch_set;
  if (wanted != patcher_.set()) {
    const int64_t live = live_graph_execs_.load(std::memory_order_relaxed);
    const char* set_name = wanted == PatchSet::Memory ? "memory" : "block";
    if (live > 0) {
      writer_->acknowledge(request.generation, current, ControlStatus::FailedPrecondition,
                           std::string("mode ") + mode_name(request.mode) + " needs patch set " + set_name + " and " +
                               std::to_string(live) + " CUDA graph execs are alive; restart the process with " +
                               "GPUOBS_PATCH_SET=" + set_name);
      return;
    }
    std::string error;
    if (!patcher_.switch_set(wanted, &error)) {
      writer_->acknowledge(request.generation, current, ControlStatus::Internal, "re-patching failed: " + error);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    in_force_.mode = request.mode;
    in_force_.shift = request.shift;
    in_force_.patch_set = patcher_.set();
    in_force_.filter = request.filter;
    filter_.reset(request.filter.empty() ? nullptr : new std::regex(request.filter, std::regex::ECMAScript));
    stage_locked();
    current = in_force_;
  }
  writer_->acknowledge(request.generation, current, ControlStatus::Ok, "");
}

void Injector::publish() {
  const uint32_t kernel_count = __atomic_load_n(&writer_->view().header->kernel_count, __ATOMIC_ACQUIRE);
  std::vector<DeviceKernelCounters> kernels(kernel_count, DeviceKernelCounters{});
  DeviceSnapshot snapshot;
  snapshot.ring_heads.assign(writer_->view().caps.event_rings, 0);
  std::vector<DeviceKernelSlot> slots;
  const uint32_t contexts = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < contexts; ++index) {
    DeviceContext* context = contexts_[index].load(std::memory_order_acquire);
    if (!context) continue;
    ScopedContext current(context->context());
    std::string error;
    uint64_t head = 0;
    if (!current.ok() || !context->read_back(kernel_count, &slots, &head, &error)) {
      if (first_time(LogOnce::Internal)) log_line("publishing counters: %s", error.c_str());
      return;  // publish nothing rather than a partial snapshot
    }
    snapshot.ring_heads[context->ring_index()] = head;
    for (uint32_t slot = 0; slot < slots.size(); ++slot) {
      const DeviceKernelSlot& in = slots[slot];
      DeviceKernelCounters& out = kernels[slot];
      for (uint64_t blocks : in.blocks) out.blocks_observed += blocks;
      for (uint64_t accesses : in.accesses) out.memory_accesses += accesses;
      out.events_produced += in.events_produced;
      out.events_dropped += in.events_dropped;
    }
  }
  for (const DeviceKernelCounters& kernel : kernels) {
    snapshot.events_produced += kernel.events_produced;
    snapshot.events_dropped += kernel.events_dropped;
    snapshot.memory_accesses += kernel.memory_accesses;
    snapshot.blocks += kernel.blocks_observed;
  }
  snapshot.kernels = kernels.data();
  snapshot.kernel_count = kernel_count;
  writer_->publish(snapshot);
}

void Injector::control_loop() {
  mark_tool_thread();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  driver().thread_exchange_stream_capture_mode(&mode);  // our copies never disturb a capture
  const auto poll = std::chrono::microseconds(config_.control_poll_us);
  const auto publish_every = std::chrono::milliseconds(config_.publish_ms);
  auto last_publish = std::chrono::steady_clock::now();
  uint64_t seen_generation = 0;
  while (!stopping_.load(std::memory_order_acquire)) {
    ControlRequest request;
    if (writer_->poll_control(seen_generation, &request)) {
      seen_generation = request.generation;
      apply_request(request);
    }
    const auto now = std::chrono::steady_clock::now();
    if (publish_requested_.exchange(false, std::memory_order_relaxed) || now - last_publish >= publish_every) {
      publish();
      last_publish = now;
    }
    std::this_thread::sleep_for(poll);
  }
  if (config_.exit_publish) publish();
}

}  // namespace gpuobs
