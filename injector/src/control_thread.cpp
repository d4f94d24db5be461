// The injector's tool thread: applies the daemon's control requests (rebinding every function
// with the new config, and writing it into device memory) and publishes the device counters
// into the segment. It is the only thread that reads device memory back or writes config into
// it, and it does so on its own non-blocking stream, so neither a hung kernel nor a graph capture
// in another thread is disturbed (measured on the H200), and no launch of the program waits.
#include <algorithm>
#include <chrono>
#include <thread>

#include "driver_api.h"
#include "gpuobs/launch_census.h"
#include "gpuobs/producer.h"
#include "injector.h"
#include "injector_log.h"

namespace gpuobs {

bool Injector::captured_by(const KernelFilter* filter, uint32_t slot) {
  if (!filter) return true;
  const SlotNames* names = slot_names_[slot].load(std::memory_order_acquire);
  if (!names) return true;
  const FilterVerdict verdict = judge_kernel(filter, names->mangled, names->demangled);
  if (verdict.too_costly && first_time(LogOnce::Filter))
    log_line("the kernel filter is too costly on a kernel's name; that kernel records as if unfiltered");
  return verdict.captured;
}

void Injector::apply_config() {
  // Serialises the writers (this thread, a context being created) and computes under it, so
  // that no older config is ever written after a newer one.
  std::lock_guard<std::mutex> writing(device_config_mutex_);
  // Computed without config_mutex_ (the filter's search) or under it only to copy: an
  // application thread that registers a kernel (inside the driver, on a kernel's first launch)
  // takes config_mutex_, and the copies and rebinding below take the driver's locks.
  uint64_t config = 0;
  std::shared_ptr<const KernelFilter> filter;
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    config = make_config(in_force_.mode, in_force_.shift);
    filter = filter_;
  }
  // every slot, registered or not: a kernel registered later starts under the config in force
  const uint32_t slots = writer_->view().caps.kernel_slots;
  std::vector<uint32_t> flags(slots, kernel_flags(config, true, patcher_.set() == PatchSet::Memory));
  for (uint32_t slot = 0; slot < slots && slot_names_[slot].load(std::memory_order_acquire); ++slot) {
    const bool captured = captured_by(filter.get(), slot);
    slot_captured_[slot].store(captured ? 1 : 0, std::memory_order_relaxed);
    flags[slot] = kernel_flags(config, captured, slot_access_hooked_[slot].load(std::memory_order_relaxed) != 0);
  }
  std::vector<std::pair<Binding, uint64_t>> rebind;
  if (config_.bound_config) {
    std::lock_guard<std::mutex> lock(config_mutex_);
    for (const Binding& binding : bindings_) rebind.emplace_back(binding, userdata_of(binding, flags[binding.slot]));
  }
  write_slot_headers(&flags);
  for (const auto& [binding, userdata] : rebind) {
    if (binding.context->retired()) continue;
    if (sanitizerSetCallbackData(binding.function, reinterpret_cast<void*>(userdata)) != SANITIZER_SUCCESS &&
        first_time(LogOnce::Internal))
      log_line("rebinding a kernel to the new config failed; it keeps the old one");
  }
}

// The control decision itself is the segment library's (producer.h), shared with gpuobs-synth;
// what follows is how the injector answers its questions and puts a config in force.
ControlRequest Injector::in_force() {
  std::lock_guard<std::mutex> lock(config_mutex_);
  return in_force_;
}

PatchSet Injector::patch_set() { return patcher_.set(); }

bool Injector::chooses_access_kernels() { return patcher_.chooses_modules(); }

int64_t Injector::live_graph_execs() { return graph_execs_.live(); }

bool Injector::switch_patch_set(PatchSet set, std::string* error) {
  const bool switched = patcher_.switch_set(set, error);
  // which kernels have the access hooks changed with the set: their words say so at the next apply
  std::lock_guard<std::mutex> lock(config_mutex_);
  for (const Binding& binding : bindings_)
    slot_access_hooked_[binding.slot].store(patcher_.hooks_accesses(binding.module) ? 1 : 0, std::memory_order_relaxed);
  return switched;
}

void Injector::open_ops_window(uint32_t steps) { annotations_.open_ops_window(steps); }

void Injector::put_in_force(const ControlRequest& config, std::shared_ptr<const KernelFilter> filter) {
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    in_force_ = config;
    filter_ = std::move(filter);
  }
  apply_config();
  // What the host's records say is in force, from now on (a launch queued before may still run
  // under the old binding: the device's own events say which, daemon/graph_census.py).
  config_word_.store(make_config(config.mode, config.shift), std::memory_order_release);
}

void Injector::publish() {
  const uint32_t kernel_count = __atomic_load_n(&writer_->view().header->kernel_count, __ATOMIC_ACQUIRE);
  std::vector<KernelCounters> kernels(kernel_count, KernelCounters{});
  std::vector<KernelShapes> shapes(kernel_count, KernelShapes{});
  DeviceSnapshot snapshot;
  snapshot.ring_heads.assign(writer_->view().caps.event_rings, 0);
  std::vector<DeviceKernelSlot> slots;
  // Every replay pushed so far is done once no live context that replayed is behind it.
  snapshot.replay_begun = replays_.load(std::memory_order_acquire) + 1;
  const uint32_t contexts = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < contexts; ++index) {
    DeviceContext* context = contexts_[index].load(std::memory_order_acquire);
    if (!context) continue;
    std::string error;
    DeviceContext::ReadBack words;
    const bool replayed = !context->retired() && context->replayed();  // before the read: its word is then set
    const bool read = context->retired() ? context->read_back(kernel_count, &slots, &words, &error)
                                         : ScopedContext(context->context()).ok() &&
                                               context->read_back(kernel_count, &slots, &words, &error);
    if (!read) {
      if (first_time(LogOnce::Internal)) log_line("publishing counters: %s", error.c_str());
      return;  // publish nothing rather than a partial snapshot
    }
    snapshot.ring_heads[context->ring_index()] = words.ring_head;
    // after the replay word the snapshot says: every replay done by it has its span read
    if (config_.replay_spans && replayed) publish_replay_spans(*context);
    snapshot.replay_spans += context->replay_span_ledger().published();
    snapshot.replay_spans_unclean += context->replay_span_ledger().unclean();
    if (replayed) snapshot.replay_begun = std::min(snapshot.replay_begun, words.replay_begun);
    // A kernel's function belongs to one context: its slot is counted in that context only.
    for (uint32_t slot = 0; slot < slots.size(); ++slot) {
      const KernelCounters in = census_counters(slots[slot]);
      if (counted_nothing(in)) continue;
      kernels[slot] = in;
      shapes[slot] = census_shapes(slots[slot]);
    }
  }
  snapshot.replay_spans -= replay_spans_unwritten_;  // a full launch ring dropped them (counted there)
  // Launches the device could not count, seen by the host's launch callbacks.
  for (uint32_t slot = 0; slot < kernel_count; ++slot) {
    const uint64_t launches = host_counted_[slot].launches.load(std::memory_order_relaxed);
    if (launches == 0) continue;
    const uint64_t blocks = host_counted_[slot].blocks.load(std::memory_order_relaxed);
    kernels[slot].launches += launches;
    kernels[slot].blocks_expected += blocks;
    kernels[slot].blocks_unpatched += blocks;
    shapes[slot].other_launches += launches;
  }
  snapshot.kernels = kernels.data();
  snapshot.shapes = shapes.data();
  snapshot.kernel_count = kernel_count;
  total_snapshot(&snapshot);
  writer_->publish(snapshot);
}

void Injector::publish_replay_spans(DeviceContext& context) {
  std::vector<ReplaySpanFound> found;
  std::string error;
  const ScopedContext current(context.context());  // for the copies below
  if (!current.ok()) return;
  if (!context.read_replay_spans(&found, &error) && first_time(LogOnce::Internal))
    log_line("context %u: %s", context.ring_index(), error.c_str());
  // written before the snapshot that says their replays are done, so a reader that settles a
  // replay has its span already (a full launch ring drops it, counted)
  for (const ReplaySpanFound& span : found)
    if (!writer_->write_replay_span(span, context.ring_index())) ++replay_spans_unwritten_;
}

void Injector::write_slot_headers(const std::vector<uint32_t>* flags) {
  const uint32_t slots = writer_->view().caps.kernel_slots;
  std::vector<uint64_t> entry_pcs(slots, 0);
  for (uint32_t slot = 0; slot < slots && slot_names_[slot].load(std::memory_order_acquire); ++slot)
    entry_pcs[slot] = slot_entry_pc_[slot].load(std::memory_order_relaxed);
  const uint32_t contexts = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < contexts; ++index) {
    DeviceContext* context = contexts_[index].load(std::memory_order_acquire);
    std::string error;
    if (context && !context->retired() && !context->write_slot_headers(flags, entry_pcs, &error) &&
        first_time(LogOnce::Internal))
      log_line("context %u: %s", index, error.c_str());
  }
}

// The block-entry patch claims ring room against a cached limit it never refreshes itself (a
// read of the consumer's tail over PCIe needs more registers than it has): this thread moves it.
void Injector::refresh_ring_limits() {
  const uint32_t contexts = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < contexts; ++index) {
    DeviceContext* context = contexts_[index].load(std::memory_order_acquire);
    if (!context || context->retired() || !context->ring_limit_stale()) continue;
    std::string error;
    const bool moved = ScopedContext(context->context()).ok() && context->refresh_ring_limit(&error);
    if (!moved && first_time(LogOnce::Internal)) log_line("context %u: %s", index, error.c_str());
  }
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
    follow_control(*writer_, *this, &seen_generation);
    // a kernel the filter leaves out registered since: its slot says so now
    const bool pcs_stale = entry_pcs_stale_.exchange(false, std::memory_order_acq_rel);
    if (flags_stale_.exchange(false, std::memory_order_acq_rel)) apply_config();
    else if (pcs_stale) {
      std::lock_guard<std::mutex> writing(device_config_mutex_);
      write_slot_headers(nullptr);  // a kernel registered: its first pc, the config words as they are
    }
    refresh_ring_limits();
    const auto now = std::chrono::steady_clock::now();
    // every poll, not with the (slower) publishing: an exec launched unlearned is learned at its
    // next replay only once the node callbacks are on again
    manage_node_callbacks();
    annotations_.close_stale_trace_window();
    if (publish_requested_.exchange(false, std::memory_order_relaxed) || now - last_publish >= publish_every) {
      publish();
      last_publish = now;
    }
    std::this_thread::sleep_for(poll);
  }
  if (config_.exit_publish) publish();
}

}  // namespace gpuobs
