#include "options.h"

#include <getopt.h>
#include <grp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpuobs/control_request.h"
#include "gpuobs/producer.h"

namespace gpuobs {
namespace synth {

namespace {
// "a|b|c" of a table's names, so that the usage lists what layout.h defines.
template <class Table>
std::string choices(const Table& table) {
  std::string out;
  for (const auto& entry : table) out += (out.empty() ? "" : "|") + std::string(entry.name);
  return out;
}
}  // namespace

namespace {
#ifndef GPUOBS_VERSION
#define GPUOBS_VERSION "unknown"
#endif

void print_usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: gpuobs-synth [--segment-dir DIR] [--kernels K] [--rate EVENTS_PER_S] [--duration S]\n"
      "  [--mode %s] [--shift N] [--seed N] [--patch-set %s]\n"
      "  [--max-events N] [--launches N] [--contexts N] [--ring-records N] [--launch-ring-records N]\n"
      "  [--live-graphs N] [--crash-after N] [--publish-us N] [--control-poll-us N] [--label TEXT]\n"
      "  [--kernel REGEX] [--unlink-at-exit] [--graph-nodes N [--steps [--step-flops N]] [--replay-delay-us US]]\n"
      "  [--hang-seconds S] [--cubin FILE --cubin-function MANGLED --cubin-offsets OFF,OFF,...] [--launch-trace]\n"
      "  [--device-lag LAUNCHES] [--profiler-starts N] [--ops N] [--memory-kernels REGEX]\n"
      "  [--rank R --world-size W [--local-rank L] [--model NAME]] [--gpu ORDINAL,PCI_BUS_ID,UUID ...]\n"
      "  [--help] [--version]\n",
      choices(kModes).c_str(), choices(kPatchSetNames).c_str());
}
// What each flag does (--help): gpuobs-synth plays an injected CUDA process on the CPU, writing
// its segment with the injector's own writer, so the daemon and CLI can be run without a GPU.
void print_flags(std::FILE* out) {
  std::fputs(
      "\nPlays an injected CUDA process on the CPU: its segment written by the injector's own writer,\n"
      "kernels run on a simulated device, so gpuobsd and gpuobsctl work without a GPU.\n"
      "Defaults come from the injector's GPUOBS_* variables (GPUOBS_SEGMENT_DIR, GPUOBS_MODE,\n"
      "GPUOBS_SHIFT, GPUOBS_PATCH_SET, GPUOBS_LABEL, GPUOBS_GROUP, GPUOBS_LAUNCH_TRACE,\n"
      "GPUOBS_LAUNCH_TIMES, GPUOBS_REPLAY_SPANS, GPUOBS_MEMORY_KERNELS); flags override them.\n\n"
      "  --segment-dir DIR        where the segment is made (default /dev/shm)\n"
      "  --kernels K              kernels it plays (default 8)\n"
      "  --rate N                 work units (events) a second; 0: as fast as it can (default)\n"
      "  --duration S             stop after S seconds (0: at a signal or a limit below)\n"
      "  --mode M, --shift N      the mode in force at start, and sampled's 1 in 2^N\n"
      "  --seed N                 the seed of its choices (kernels, grids)\n"
      "  --patch-set S            block or memory, as GPUOBS_PATCH_SET (fixed for the process)\n"
      "  --max-events N           stop once N events were produced\n"
      "  --launches N             stop after N launches\n"
      "  --contexts N             CUDA contexts, each with its event ring\n"
      "  --ring-records N         records per event ring; --launch-ring-records N: of the launch ring\n"
      "  --live-graphs N          graph execs it says are alive (a patch-set switch is refused then)\n"
      "  --crash-after N          write half a record after N events, then SIGKILL itself\n"
      "  --publish-us N           how often its counters are published (default 2000)\n"
      "  --control-poll-us N      how often it reads the daemon's control requests (default 500)\n"
      "  --label TEXT             the process label gpuobsctl status shows\n"
      "  --kernel REGEX           the kernel filter at start (only matching kernels record events)\n"
      "  --unlink-at-exit         remove the segment when it exits\n"
      "  --graph-nodes N          launches are replays of one CUDA graph of N kernel nodes\n"
      "  --steps                  with --graph-nodes: an engine step record before each replay, as the\n"
      "                           vLLM plugin writes them (1 to 4 requests, prefill then decode; the KV-cache\n"
      "                           blocks each is handed; the cache kernel stores to its tokens' slots)\n"
      "  --step-flops N           with --steps: each step's FLOP estimate, N a token scheduled\n"
      "  --replay-delay-us US     with --graph-nodes: each replay's last node waits US (a slow rank)\n"
      "  --hang-seconds S         end with a launch whose blocks enter and stay S seconds (a hang)\n"
      "  --cubin FILE --cubin-function MANGLED --cubin-offsets OFF,...\n"
      "                           kernel 0 is that cubin's function, its accesses at those offsets\n"
      "  --launch-trace           a launch record per launch, as the injector's opt-in trace\n"
      "  --device-lag N           the device runs N launches behind the host, as a GPU's queue\n"
      "  --profiler-starts N      profiler starts the program reports (as the vLLM plugin notes them)\n"
      "  --ops N                  a framework op record every N launches (--launch-trace) or N graph nodes\n"
      "  --memory-kernels REGEX   in the block set, the kernels that get the access hooks\n"
      "  --rank R --world-size W [--local-rank L] [--model NAME]\n"
      "                           the identity a serving plugin sets (role engine)\n"
      "  --gpu ORDINAL,PCI_BUS_ID,UUID   a context's GPU (repeatable, one per --contexts)\n"
      "  --help, --version\n\n"
      "example:\n"
      "  gpuobs-synth --segment-dir /dev/shm --mode blocks --graph-nodes 5 --steps --launches 150\n",
      out);
}
}  // namespace

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr, "gpuobs-synth: %s\n", message);
  print_usage(stderr);
  std::exit(2);
}

uint64_t parse_number(const char* text, const char* flag) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-')
    usage((std::string("bad number for ") + flag).c_str());
  return value;
}

uint64_t parse_bounded(const char* text, const char* flag, uint64_t low, uint64_t high) {
  const uint64_t value = parse_number(text, flag);
  if (value < low || value > high)
    usage((std::string(flag) + " must be within " + std::to_string(low) + ".." + std::to_string(high)).c_str());
  return value;
}

namespace {

// Seconds: a finite number within 0..high (0: no limit where the flag says so).
double parse_seconds(const char* text, const char* flag, double high) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(value >= 0 && value <= high))
    usage((std::string(flag) + " must be a number of seconds within 0.." + std::to_string(int64_t(high))).c_str());
  return value;
}

}  // namespace

namespace {

// Defaults come from the same GPUOBS_* variables the injector reads, so a command line that
// starts an injected program (gpuobsctl run) starts gpuobs-synth the same way.
void apply_environment(Options* o) {
  if (const char* dir = std::getenv("GPUOBS_SEGMENT_DIR"); dir && *dir) o->segment_dir = dir;
  if (const char* mode = std::getenv("GPUOBS_MODE"); mode && *mode && !parse_mode(mode, &o->mode))
    usage("GPUOBS_MODE is not a mode");
  if (const char* shift = std::getenv("GPUOBS_SHIFT"); shift && *shift)
    o->shift = uint32_t(parse_bounded(shift, "GPUOBS_SHIFT", 0, kMaxShift));
  if (const char* set = std::getenv("GPUOBS_PATCH_SET"); set) parse_name(kPatchSetNames, set, &o->patch_set);
  if (const char* label = std::getenv("GPUOBS_LABEL"); label && *label) o->label = label;
  if (const char* group = std::getenv("GPUOBS_GROUP"); group && *group) {  // as the injector: 0660, that group
    if (const struct group* entry = getgrnam(group)) o->group = entry->gr_gid;
    else std::fprintf(stderr, "gpuobs-synth: GPUOBS_GROUP=%s: no such group; the segment stays 0600\n", group);
  }
  if (const char* trace = std::getenv("GPUOBS_LAUNCH_TRACE"); trace && std::strcmp(trace, "1") == 0)
    o->launch_trace = true;
  if (const char* times = std::getenv("GPUOBS_LAUNCH_TIMES"); times && std::strcmp(times, "1") == 0)
    o->launch_times = true;
  if (const char* spans = std::getenv("GPUOBS_REPLAY_SPANS"); spans && std::strcmp(spans, "0") == 0)
    o->replay_spans = false;
  if (const char* chosen = std::getenv("GPUOBS_MEMORY_KERNELS"); chosen && *chosen) o->memory_kernels = chosen;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  enum {
    kDir = 1000,
    kKernels,
    kRate,
    kDuration,
    kMode,
    kShift,
    kSeed,
    kPatchSet,
    kMaxEvents,
    kLaunches,
    kContexts,
    kRing,
    kLaunchRing,
    kLiveGraphs,
    kCrash,
    kPublish,
    kPoll,
    kLabel,
    kFilter,
    kUnlink,
    kGraphNodes,
    kReplayDelay,
    kHang,
    kSteps,
    kStepFlops,
    kCubin,
    kCubinFunction,
    kCubinOffsets,
    kLaunchTrace,
    kDeviceLag,
    kProfilerStarts,
    kOps,
    kRank,
    kWorldSize,
    kLocalRank,
    kModel,
    kGpu,
    kMemoryKernels,
    kHelp,
    kVersion
  };
  static const option long_options[] = {{"segment-dir", required_argument, nullptr, kDir},
                                        {"kernels", required_argument, nullptr, kKernels},
                                        {"rate", required_argument, nullptr, kRate},
                                        {"duration", required_argument, nullptr, kDuration},
                                        {"mode", required_argument, nullptr, kMode},
                                        {"shift", required_argument, nullptr, kShift},
                                        {"seed", required_argument, nullptr, kSeed},
                                        {"patch-set", required_argument, nullptr, kPatchSet},
                                        {"max-events", required_argument, nullptr, kMaxEvents},
                                        {"launches", required_argument, nullptr, kLaunches},
                                        {"contexts", required_argument, nullptr, kContexts},
                                        {"ring-records", required_argument, nullptr, kRing},
                                        {"launch-ring-records", required_argument, nullptr, kLaunchRing},
                                        {"live-graphs", required_argument, nullptr, kLiveGraphs},
                                        {"crash-after", required_argument, nullptr, kCrash},
                                        {"publish-us", required_argument, nullptr, kPublish},
                                        {"control-poll-us", required_argument, nullptr, kPoll},
                                        {"label", required_argument, nullptr, kLabel},
                                        {"kernel", required_argument, nullptr, kFilter},
                                        {"unlink-at-exit", no_argument, nullptr, kUnlink},
                                        {"graph-nodes", required_argument, nullptr, kGraphNodes},
                                        {"replay-delay-us", required_argument, nullptr, kReplayDelay},
                                        {"hang-seconds", required_argument, nullptr, kHang},
                                        {"steps", no_argument, nullptr, kSteps},
                                        {"step-flops", required_argument, nullptr, kStepFlops},
                                        {"cubin", required_argument, nullptr, kCubin},
                                        {"cubin-function", required_argument, nullptr, kCubinFunction},
                                        {"cubin-offsets", required_argument, nullptr, kCubinOffsets},
                                        {"launch-trace", no_argument, nullptr, kLaunchTrace},
                                        {"device-lag", required_argument, nullptr, kDeviceLag},
                                        {"profiler-starts", required_argument, nullptr, kProfilerStarts},
                                        {"ops", required_argument, nullptr, kOps},
                                        {"rank", required_argument, nullptr, kRank},
                                        {"world-size", required_argument, nullptr, kWorldSize},
                                        {"local-rank", required_argument, nullptr, kLocalRank},
                                        {"model", required_argument, nullptr, kModel},
                                        {"gpu", required_argument, nullptr, kGpu},
                                        {"memory-kernels", required_argument, nullptr, kMemoryKernels},
                                        {"help", no_argument, nullptr, kHelp},
                                        {"version", no_argument, nullptr, kVersion},
                                        {nullptr, 0, nullptr, 0}};
  Options o;
  apply_environment(&o);
  int code = 0;
  while ((code = getopt_long(argc, argv, "", long_options, nullptr)) != -1) {
    switch (code) {
      case kDir:
        o.segment_dir = optarg;
        break;
      case kKernels:
        o.kernels = uint32_t(parse_bounded(optarg, "--kernels", 1, kMaxKernels));
        break;
      case kRate:
        o.rate = double(parse_number(optarg, "--rate"));
        break;
      case kDuration:
        o.duration = parse_seconds(optarg, "--duration", kMaxSeconds);
        break;
      case kMode:
        if (!parse_mode(optarg, &o.mode)) usage("unknown mode");
        break;
      case kShift:
        o.shift = uint32_t(parse_bounded(optarg, "--shift", 0, kMaxShift));
        break;
      case kSeed:
        o.seed = parse_number(optarg, "--seed");
        break;
      case kPatchSet:
        if (!parse_name(kPatchSetNames, optarg, &o.patch_set)) usage("patch set is block or memory");
        break;
      case kMaxEvents:
        o.max_events = parse_number(optarg, "--max-events");
        break;
      case kLaunches:
        o.max_launches = parse_number(optarg, "--launches");
        break;
      case kContexts:
        o.contexts = uint32_t(parse_bounded(optarg, "--contexts", 1, kMaxEventRings));
        break;
      case kRing:
        o.ring_records = uint32_t(parse_bounded(optarg, "--ring-records", 1, kMaxRingRecords));
        break;
      case kLaunchRing:
        o.launch_ring_records = uint32_t(parse_bounded(optarg, "--launch-ring-records", 1, kMaxRingRecords));
        break;
      case kLiveGraphs:
        o.live_graphs = uint32_t(parse_bounded(optarg, "--live-graphs", 0, 1u << 20));
        break;
      case kCrash:
        o.crash_after = parse_number(optarg, "--crash-after");
        break;
      case kPublish:
        o.publish_us = uint32_t(parse_bounded(optarg, "--publish-us", 1, 60000000));
        break;
      case kPoll:
        o.control_poll_us = uint32_t(parse_bounded(optarg, "--control-poll-us", 1, 60000000));
        break;
      case kLabel:
        o.label = optarg;
        break;
      case kFilter:
        o.filter = optarg;
        break;
      case kUnlink:
        o.unlink_at_exit = true;
        break;
      case kGraphNodes:
        o.graph_nodes = uint32_t(parse_bounded(optarg, "--graph-nodes", 0, kMaxKernels));
        break;
      case kReplayDelay:
        o.replay_delay_us = uint32_t(parse_bounded(optarg, "--replay-delay-us", 0, 10000000));
        break;
      case kSteps:
        o.steps = true;
        break;
      case kStepFlops:
        o.step_flops = parse_bounded(optarg, "--step-flops", 1, uint64_t(1) << 40);
        break;
      case kLaunchTrace:
        o.launch_trace = true;
        break;
      case kDeviceLag:
        o.device_lag = uint32_t(parse_bounded(optarg, "--device-lag", 0, 1u << 20));
        break;
      case kProfilerStarts:
        o.profiler_starts = uint32_t(parse_bounded(optarg, "--profiler-starts", 0, 1u << 20));
        break;
      case kOps:
        o.ops = uint32_t(parse_bounded(optarg, "--ops", 0, 1u << 20));
        break;
      case kRank:
        o.rank = int64_t(parse_bounded(optarg, "--rank", 0, UINT32_MAX - 1));
        break;
      case kWorldSize:
        o.world_size = uint32_t(parse_bounded(optarg, "--world-size", 1, UINT32_MAX));
        break;
      case kLocalRank:
        o.local_rank = uint32_t(parse_bounded(optarg, "--local-rank", 0, UINT32_MAX));
        break;
      case kModel:
        o.model = optarg;
        break;
      case kGpu:
        o.gpus.push_back(optarg);
        break;
      case kMemoryKernels:
        o.memory_kernels = optarg;
        break;
      case kHelp:
        print_usage(stdout);
        print_flags(stdout);
        std::exit(0);
      case kVersion:
        std::printf("gpuobs-synth %s (segment layout %u)\n", GPUOBS_VERSION, kLayoutVersion);
        std::exit(0);
      case kHang:
        o.hang_seconds = double(parse_bounded(optarg, "--hang-seconds", 0, uint64_t(kMaxSeconds)));
        break;
      case kCubin:
        o.cubin = optarg;
        break;
      case kCubinFunction:
        o.cubin_function = optarg;
        break;
      case kCubinOffsets: {
        std::string list = optarg;
        size_t start = 0;
        while (start <= list.size()) {
          const size_t comma = list.find(',', start);
          const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          char* end = nullptr;
          const unsigned long value = std::strtoul(item.c_str(), &end, 0);
          if (item.empty() || *end != '\0' || value > UINT32_MAX) usage("bad --cubin-offsets");
          if (o.cubin_offsets.size() >= kMaxCubinOffsets) usage("--cubin-offsets: too many offsets");
          o.cubin_offsets.push_back(uint32_t(value));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        break;
      }
      default:
        usage("unknown flag");
    }
  }
  if (optind != argc) usage("unexpected argument");
  if (o.kernels == 0) usage("--kernels must be at least 1");
  for (const std::string& gpu : o.gpus)
    if (std::count(gpu.begin(), gpu.end(), ',') != 2) usage("--gpu is ORDINAL,PCI_BUS_ID,UUID");
  if (o.replay_delay_us && o.graph_nodes < 2) usage("--replay-delay-us needs --graph-nodes 2 or more");
  if (o.step_flops && !o.steps) usage("--step-flops needs --steps");
  if (o.steps && !o.graph_nodes) usage("--steps needs --graph-nodes");
  if (o.ops && !o.launch_trace && !o.graph_nodes) usage("--ops needs --launch-trace (eager launches) or --graph-nodes");
  const std::string problem = control_request_problem(uint32_t(o.mode), o.shift, uint32_t(o.patch_set), o.filter);
  if (!problem.empty()) usage(problem.c_str());
  if (!o.memory_kernels.empty()) {
    const std::string chosen_problem = memory_kernels_problem(o.memory_kernels);
    if (!chosen_problem.empty()) usage(("--memory-kernels is " + chosen_problem).c_str());
    if (o.patch_set == PatchSet::Memory) {  // as the injector: said, and no effect
      std::fprintf(stderr, "gpuobs-synth: --memory-kernels has no effect in the memory patch set\n");
      o.memory_kernels.clear();
    }
  }
  // as the injector: a mode that records only accesses starts a process with no access hook in
  // the memory set (the injector starts it in counter instead: it cannot re-patch at start)
  ControlRequest start;
  start.mode = o.mode;
  start.patch_set = o.patch_set;
  o.patch_set = patch_set_needed(start, !o.memory_kernels.empty());
  return o;
}

}  // namespace synth
}  // namespace gpuobs
