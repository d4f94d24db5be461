#include "graph_execs.h"

#include "gpuobs/process_info.h"

namespace gpuobs {
namespace {

// How long node callbacks stay on for a graph exec created or launched unlearned: usually it
// replays at once (warm-up) and is learned; one that does not replay within this long must not
// keep every other replay paying for node callbacks (it is learned at a later launch).
constexpr uint64_t kLearningWindowNs = 2000000000ULL;
// An exec launched before its nodes were learned keeps them on longer: an exec replayed now and
// then (every few seconds) is learned at its next replay, not missed each time.
constexpr uint64_t kPendingWindowNs = 60000000000ULL;

}  // namespace

void GraphExecs::created(uint64_t graph_exec) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.fetch_add(1, std::memory_order_relaxed);
  execs_[graph_exec] = State{NodesKnown::NotLaunched, monotonic_ns()};
}

void GraphExecs::destroyed(uint64_t graph_exec) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.fetch_sub(1, std::memory_order_relaxed);
  execs_.erase(graph_exec);
}

bool GraphExecs::begin_replay(uint64_t graph_exec, bool always) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& state = execs_[graph_exec];
  const bool recorded = node_callbacks_ && (state.known != NodesKnown::Learned || always);
  if (recorded) ++replays_recording_;
  if (state.known == NodesKnown::NotLaunched) state.known = NodesKnown::Pending;
  if (state.known == NodesKnown::Pending) state.since_ns = monotonic_ns();
  return recorded;
}

void GraphExecs::end_replay(uint64_t graph_exec) {
  std::lock_guard<std::mutex> lock(mutex_);
  --replays_recording_;
  // Learned, even with no kernel node seen (an exec of copies and memsets has none): the node
  // callbacks were on for the whole replay.
  auto state = execs_.find(graph_exec);
  if (state != execs_.end()) state->second.known = NodesKnown::Learned;
}

void GraphExecs::abandon_replay() {
  std::lock_guard<std::mutex> lock(mutex_);
  --replays_recording_;
}

GraphExecs::Want GraphExecs::wanted() {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t now = monotonic_ns();
  bool wanted = false;
  for (auto& entry : execs_) {
    State& state = entry.second;
    const uint64_t window = state.known == NodesKnown::Pending ? kPendingWindowNs : kLearningWindowNs;
    if (state.known == NodesKnown::Learned || now - state.since_ns >= window) {
      if (state.known == NodesKnown::Pending) state.known = NodesKnown::NotLaunched;  // learned at a later launch
      continue;
    }
    wanted = true;  // created or launched unlearned lately: its next replay learns it
  }
  return wanted ? Want::On : execs_.empty() ? Want::Leave : Want::Off;
}

bool GraphExecs::node_callbacks_on() {
  std::lock_guard<std::mutex> lock(mutex_);
  return node_callbacks_;
}

void GraphExecs::say_node_callbacks_on() {
  std::lock_guard<std::mutex> lock(mutex_);
  node_callbacks_ = true;  // from now on a replay that begins is recorded whole
}

bool GraphExecs::say_node_callbacks_off(bool keep_on) {
  std::lock_guard<std::mutex> lock(mutex_);
  // never while a recorded replay is in flight: its remaining nodes would go unseen
  if (!node_callbacks_ || replays_recording_ != 0 || keep_on) return false;
  node_callbacks_ = false;
  return true;
}

}  // namespace gpuobs
