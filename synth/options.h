// gpuobs-synth's settings: its command line, with defaults from the GPUOBS_* variables the
// injector reads, so a command line that starts an injected program starts gpuobs-synth the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuobs/layout.h"

namespace gpuobs {
namespace synth {

struct Options {
  std::string segment_dir = "/dev/shm";
  uint32_t kernels = 8;
  double rate = 0;      // work units per second, 0 = as fast as possible
  double duration = 0;  // seconds, 0 = until a signal or a limit below
  Mode mode = Mode::Counter;
  uint32_t shift = 0;
  uint64_t seed = 1;
  PatchSet patch_set = PatchSet::Block;
  uint64_t max_events = 0;    // stop once this many events were produced
  uint64_t max_launches = 0;  // stop after this many launches
  uint32_t contexts = 1;      // event rings
  uint32_t ring_records = 1u << 16;
  uint32_t launch_ring_records = 1u << 14;
  uint32_t live_graphs = 0;      // graph execs "alive": a patch-set switch is refused while > 0
  uint64_t crash_after = 0;      // write half a record after this many events, then SIGKILL itself
  uint32_t graph_nodes = 0;      // > 0: launches are replays of one CUDA graph of this many kernel nodes
  uint32_t replay_delay_us = 0;  // with --graph-nodes N (N >= 2): the device waits this long before each
                                 // replay's last node, so the replay's span grows by it (a straggling rank)
  bool steps = false;            // with --graph-nodes: an engine step record before each replay, as the vLLM
                                 // plugin writes them (requests change every 3 steps: a prefill
                                 // step, then two decode steps; tokens per request, layout 7)
  uint64_t step_flops = 0;       // with --steps: each step's FLOP estimate is this many per token scheduled
                                 // (as vLLM's --enable-mfu-metrics estimates one); 0: none
  double hang_seconds = 0;       // > 0: end with a launch of kernel 0 whose blocks enter and stay this long
  std::string cubin;             // kernel 0 is this cubin's function (--cubin-function): its cubin is kept
  std::string cubin_function;    // as the injector keeps a module's, and its accesses sit at --cubin-offsets
  std::vector<uint32_t> cubin_offsets;
  uint32_t publish_us = 2000;
  uint32_t control_poll_us = 500;
  std::string label;
  uint32_t group = UINT32_MAX;  // GPUOBS_GROUP's gid: the segment is made 0660 with it (as the injector)
  std::string filter;
  std::string memory_kernels;  // --memory-kernels REGEX (GPUOBS_MEMORY_KERNELS): in the block set, the kernels
                               // (each its own module here) whose name matches get the access hooks
  bool unlink_at_exit = false;
  bool launch_times = false;  // GPUOBS_LAUNCH_TIMES=1, as the injector: a launch event in `counter` too
  bool replay_spans = true;   // GPUOBS_REPLAY_SPANS (0: off), as the injector: replays' device spans
  bool launch_trace = false;  // a launch record per kernel launch, as the injector's opt-in trace
  int64_t rank = -1;          // --rank R --world-size W [--local-rank L] [--model NAME]: the identity a
  uint32_t world_size = 1;    // plugin sets (role engine)
  uint32_t local_rank = 0;
  std::string model;
  std::vector<std::string> gpus;  // --gpu ORDINAL,PCI_BUS_ID,UUID (repeatable): a context's GPU
  uint32_t ops = 0;               // a framework op record before every N launches (--launch-trace), or
                                  // for every N graph nodes captured (--graph-nodes)
  uint32_t profiler_starts = 0;   // profilers the program says it started (as the vLLM plugin notes them)
  uint32_t device_lag = 0;        // launches the device runs behind the host, as a GPU's queue: a launch's
                                  // records are written when it is issued, its kernel runs this many
                                  // launches later, in the mode in force then
};

// The bounds of its settings: none makes it spin, run forever unasked or take what a host lacks.
constexpr uint32_t kMaxKernels = 1u << 19;  // kernels it plays (each a slot and its names: ~300 MB at most)
constexpr double kMaxSeconds = 86400;       // --duration, --hang-seconds
constexpr size_t kMaxCubinOffsets = 1024;

// The settings from the environment and the command line; exits with a usage message (status 2)
// on anything it cannot accept.
Options parse_options(int argc, char** argv);

// Prints the usage with `message` and exits with status 2.
[[noreturn]] void usage(const char* message);

// A decimal number for `flag`; exits through usage() when `text` is not one.
uint64_t parse_number(const char* text, const char* flag);
// The same, within low..high.
uint64_t parse_bounded(const char* text, const char* flag, uint64_t low, uint64_t high);

}  // namespace synth
}  // namespace gpuobs
