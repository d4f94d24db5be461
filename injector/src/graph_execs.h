// The live graph execs and whether each one's nodes are known: node-launch callbacks cost a
// host callback per node of every replay, so they are on only while some exec may still need
// learning (created lately, or launched before it was learned), and a replay is recorded node by
// node only when they were on before it began (then every node of it is seen). The callbacks
// themselves are turned on and off by the injector, outside this class's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace gpuobs {

class GraphExecs {
 public:
  enum class Want { On, Off, Leave };

  void created(uint64_t graph_exec);
  void destroyed(uint64_t graph_exec);
  int64_t live() const { return live_.load(std::memory_order_relaxed); }

  // A replay begins: whether it is recorded node by node (`always`: every replay is, since host
  // launch callbacks are on for good). A recorded replay stays in flight until end_replay, or
  // until abandon_replay when its end callback never came.
  bool begin_replay(uint64_t graph_exec, bool always);
  void end_replay(uint64_t graph_exec);  // its nodes are learned
  void abandon_replay();

  // The tool thread: whether the node callbacks are wanted now (Leave: no exec to decide for).
  Want wanted();
  // The node callbacks as enabled: `on` is said after they are on; an `off` is refused (false)
  // while a recorded replay is in flight or `keep_on`, and said before they go off.
  bool node_callbacks_on();
  void say_node_callbacks_on();
  bool say_node_callbacks_off(bool keep_on);

 private:
  // Whether a live graph exec's nodes are known; since_ns: created, or last launched unlearned.
  enum class NodesKnown : uint8_t { NotLaunched, Pending, Learned };
  struct State {
    NodesKnown known = NodesKnown::NotLaunched;
    uint64_t since_ns = 0;
  };
  std::mutex mutex_;
  std::unordered_map<uint64_t, State> execs_;
  bool node_callbacks_ = false;     // as enabled in the sanitizer (changed by the tool thread only)
  uint32_t replays_recording_ = 0;  // recorded replays between their launch begin and end
  std::atomic<int64_t> live_{0};
};

}  // namespace gpuobs
