// gpuobs-synth: plays an injected process with the injector's own writer code, so the daemon,
// CLI, metrics and fault tests run where there is no GPU. One thread plays the device (launch
// records, per-block / per-access work as the mode dictates), one follows the control block as
// the injector's control thread does, one publishes device counters as the injector's tool
// thread does. Exits cleanly on SIGTERM/SIGINT with a final, quiescent publish.
#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpuobs/cubin_store.h"
#include "gpuobs/segment_writer.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/shm_segment.h"
#include "kernel_catalog.h"
#include "simulated_device.h"

namespace gpuobs {
namespace synth {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct Options {
  std::string segment_dir = "/dev/shm";
  uint32_t kernels = 8;
  double rate = 0;  // work units per second, 0 = as fast as possible
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
  uint32_t live_graphs = 0;   // graph execs "alive": a patch-set switch is refused while > 0
  uint64_t crash_after = 0;   // write half a record after this many events, then SIGKILL itself
  uint32_t graph_nodes = 0;   // > 0: launches are replays of one CUDA graph of this many kernel nodes
  bool steps = false;         // with --graph-nodes: an engine step record before each replay, as the vLLM
                              // plugin writes them (requests change every 3 steps)
  double hang_seconds = 0;    // > 0: end with a launch of kernel 0 whose blocks enter and stay this long
  std::string cubin;          // kernel 0 is this cubin's function (--cubin-function): its cubin is kept
  std::string cubin_function;  // as the injector keeps a module's, and its accesses sit at --cubin-offsets
  std::vector<uint32_t> cubin_offsets;
  uint32_t publish_us = 2000;
  uint32_t control_poll_us = 500;
  std::string label;
  std::string filter;
  bool unlink_at_exit = false;
  bool launch_trace = false;  // a launch record per kernel launch, as the injector's opt-in trace
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "gpuobs-synth: %s\n"
               "usage: gpuobs-synth [--segment-dir DIR] [--kernels K] [--rate EVENTS_PER_S] [--duration S]\n"
               "  [--mode off|noop|counter|blocks|memory|sampled] [--shift N] [--seed N] [--patch-set block|memory]\n"
               "  [--max-events N] [--launches N] [--contexts N] [--ring-records N] [--launch-ring-records N]\n"
               "  [--live-graphs N] [--crash-after N] [--publish-us N] [--control-poll-us N] [--label TEXT]\n"
               "  [--kernel REGEX] [--unlink-at-exit] [--graph-nodes N [--steps]] [--hang-seconds S]\n"
               "  [--cubin FILE --cubin-function MANGLED --cubin-offsets OFF,OFF,...] [--launch-trace]\n",
               message);
  std::exit(2);
}

// The launch record the injector writes at a kernel launch, for a launch of `shape`.
LaunchRecord kernel_launch_record(const LaunchShape& shape, LaunchKind kind, Mode mode, uint32_t shift, bool captured) {
  LaunchRecord record{};
  record.host_time_ns = monotonic_ns();
  record.grid_id = shape.grid_id;
  record.stream = 0x1000 + shape.ring;
  record.kernel_slot = shape.slot;
  record.grid_x = shape.grid_x;
  record.grid_y = shape.grid_y;
  record.grid_z = shape.grid_z;
  record.block_x = shape.block_threads;
  record.block_y = 1;
  record.block_z = 1;
  record.context_index = shape.ring;
  record.kind = uint32_t(kind);
  record.mode = uint32_t(mode);
  record.shift = shift;
  record.flags = captured ? kLaunchCaptured : 0;
  return record;
}

// An engine step as the vLLM plugin records it before the step's graph replay: its requests
// change every 3 steps (1 to 4 of them, one token each); in between, the same set is flagged.
void write_engine_step(SegmentWriter& writer, uint64_t step) {
  const uint64_t group = (step - 1) / 3;
  const uint32_t requests = uint32_t(1 + group % 4);
  if ((step - 1) % 3 != 0) {
    writer.write_step(step, requests, requests, nullptr, 0, kStepSameRequests);
    return;
  }
  std::string ids;
  for (uint32_t k = 0; k < requests; ++k) {
    if (k) ids += '\n';
    ids += "cmpl-synth-" + std::to_string(group) + "-" + std::to_string(k);
  }
  writer.write_step(step, requests, requests, ids.data(), uint32_t(ids.size()), 0);
}

uint64_t parse_number(const char* text, const char* flag) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') usage((std::string("bad number for ") + flag).c_str());
  return value;
}

// Defaults come from the same GPUOBS_* variables the injector reads, so a command line that
// starts an injected program (gpuobsctl run) starts gpuobs-synth the same way.
void apply_environment(Options* o) {
  if (const char* dir = std::getenv("GPUOBS_SEGMENT_DIR"); dir && *dir) o->segment_dir = dir;
  if (const char* mode = std::getenv("GPUOBS_MODE"); mode && *mode && !parse_mode(mode, &o->mode))
    usage("GPUOBS_MODE is not a mode");
  if (const char* shift = std::getenv("GPUOBS_SHIFT"); shift && *shift) o->shift = uint32_t(parse_number(shift, "GPUOBS_SHIFT"));
  if (const char* set = std::getenv("GPUOBS_PATCH_SET"); set) parse_name(kPatchSetNames, set, &o->patch_set);
  if (const char* label = std::getenv("GPUOBS_LABEL"); label && *label) o->label = label;
  if (const char* trace = std::getenv("GPUOBS_LAUNCH_TRACE"); trace && std::strcmp(trace, "1") == 0) o->launch_trace = true;
}

Options parse(int argc, char** argv) {
  enum { kDir = 1000, kKernels, kRate, kDuration, kMode, kShift, kSeed, kPatchSet, kMaxEvents, kLaunches, kContexts,
         kRing, kLaunchRing, kLiveGraphs, kCrash, kPublish, kPoll, kLabel, kFilter, kUnlink, kGraphNodes, kHang, kSteps, kCubin, kCubinFunction, kCubinOffsets, kLaunchTrace };
  static const option long_options[] = {
      {"segment-dir", required_argument, nullptr, kDir}, {"kernels", required_argument, nullptr, kKernels},
      {"rate", required_argument, nullptr, kRate}, {"duration", required_argument, nullptr, kDuration},
      {"mode", required_argument, nullptr, kMode}, {"shift", required_argument, nullptr, kShift},
      {"seed", required_argument, nullptr, kSeed}, {"patch-set", required_argument, nullptr, kPatchSet},
      {"max-events", required_argument, nullptr, kMaxEvents}, {"launches", required_argument, nullptr, kLaunches},
      {"contexts", required_argument, nullptr, kContexts}, {"ring-records", required_argument, nullptr, kRing},
      {"launch-ring-records", required_argument, nullptr, kLaunchRing},
      {"live-graphs", required_argument, nullptr, kLiveGraphs}, {"crash-after", required_argument, nullptr, kCrash},
      {"publish-us", required_argument, nullptr, kPublish}, {"control-poll-us", required_argument, nullptr, kPoll},
      {"label", required_argument, nullptr, kLabel}, {"kernel", required_argument, nullptr, kFilter},
      {"unlink-at-exit", no_argument, nullptr, kUnlink}, {"graph-nodes", required_argument, nullptr, kGraphNodes},
      {"hang-seconds", required_argument, nullptr, kHang}, {"steps", no_argument, nullptr, kSteps},
      {"cubin", required_argument, nullptr, kCubin},
      {"cubin-function", required_argument, nullptr, kCubinFunction},
      {"cubin-offsets", required_argument, nullptr, kCubinOffsets},
      {"launch-trace", no_argument, nullptr, kLaunchTrace},
      {nullptr, 0, nullptr, 0}};
  Options o;
  apply_environment(&o);
  int code = 0;
  while ((code = getopt_long(argc, argv, "", long_options, nullptr)) != -1) {
    switch (code) {
      case kDir: o.segment_dir = optarg; break;
      case kKernels: o.kernels = uint32_t(parse_number(optarg, "--kernels")); break;
      case kRate: o.rate = double(parse_number(optarg, "--rate")); break;
      case kDuration: o.duration = std::atof(optarg); break;
      case kMode:
        if (!parse_mode(optarg, &o.mode)) usage("unknown mode");
        break;
      case kShift: o.shift = uint32_t(parse_number(optarg, "--shift")); break;
      case kSeed: o.seed = parse_number(optarg, "--seed"); break;
      case kPatchSet:
        if (!parse_name(kPatchSetNames, optarg, &o.patch_set)) usage("patch set is block or memory");
        break;
      case kMaxEvents: o.max_events = parse_number(optarg, "--max-events"); break;
      case kLaunches: o.max_launches = parse_number(optarg, "--launches"); break;
      case kContexts: o.contexts = uint32_t(parse_number(optarg, "--contexts")); break;
      case kRing: o.ring_records = uint32_t(parse_number(optarg, "--ring-records")); break;
      case kLaunchRing: o.launch_ring_records = uint32_t(parse_number(optarg, "--launch-ring-records")); break;
      case kLiveGraphs: o.live_graphs = uint32_t(parse_number(optarg, "--live-graphs")); break;
      case kCrash: o.crash_after = parse_number(optarg, "--crash-after"); break;
      case kPublish: o.publish_us = uint32_t(parse_number(optarg, "--publish-us")); break;
      case kPoll: o.control_poll_us = uint32_t(parse_number(optarg, "--control-poll-us")); break;
      case kLabel: o.label = optarg; break;
      case kFilter: o.filter = optarg; break;
      case kUnlink: o.unlink_at_exit = true; break;
      case kGraphNodes: o.graph_nodes = uint32_t(parse_number(optarg, "--graph-nodes")); break;
      case kSteps: o.steps = true; break;
      case kLaunchTrace: o.launch_trace = true; break;
      case kHang: o.hang_seconds = double(parse_number(optarg, "--hang-seconds")); break;
      case kCubin: o.cubin = optarg; break;
      case kCubinFunction: o.cubin_function = optarg; break;
      case kCubinOffsets: {
        std::string list = optarg;
        size_t start = 0;
        while (start <= list.size()) {
          const size_t comma = list.find(',', start);
          const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          char* end = nullptr;
          const unsigned long value = std::strtoul(item.c_str(), &end, 0);
          if (item.empty() || *end != '\0') usage("bad --cubin-offsets");
          o.cubin_offsets.push_back(uint32_t(value));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        break;
      }
      default: usage("unknown flag");
    }
  }
  if (optind != argc) usage("unexpected argument");
  if (o.kernels == 0) usage("--kernels must be at least 1");
  const std::string problem = control_request_problem(uint32_t(o.mode), o.shift, uint32_t(o.patch_set), o.filter);
  if (!problem.empty()) usage(problem.c_str());
  if (mode_needs_memory_set(o.mode) && o.patch_set != PatchSet::Memory) o.patch_set = PatchSet::Memory;
  return o;
}

// What the control thread has applied, read by the device thread at each launch.
class AppliedConfig {
 public:
  AppliedConfig(const Options& options, const std::vector<KernelProfile>& catalog)
      : catalog_(catalog), live_graphs_(options.live_graphs) {
    in_force_.mode = options.mode;
    in_force_.shift = options.shift;
    in_force_.patch_set = options.patch_set;
    in_force_.filter = options.filter;
    captured_ = match(options.filter);
  }

  // Applies a request the way the injector does; returns the status to acknowledge.
  ControlStatus apply(const ControlRequest& request, std::string* message) {
    *message = control_request_problem(uint32_t(request.mode), request.shift, uint32_t(request.patch_set),
                                       request.filter);
    if (!message->empty()) return ControlStatus::InvalidArgument;
    std::lock_guard<std::mutex> lock(mutex_);
    PatchSet wanted = request.patch_set;
    if (mode_needs_memory_set(request.mode)) wanted = PatchSet::Memory;
    if (wanted != in_force_.patch_set && live_graphs_ > 0) {
      *message = std::string("mode ") + mode_name(request.mode) + " needs patch set " +
                 (wanted == PatchSet::Memory ? "memory" : "block") + " and " + std::to_string(live_graphs_) +
                 " graph execs are alive; restart the process with GPUOBS_PATCH_SET=" +
                 (wanted == PatchSet::Memory ? "memory" : "block");
      return ControlStatus::FailedPrecondition;
    }
    in_force_.mode = request.mode;
    in_force_.shift = request.shift;
    in_force_.patch_set = wanted;
    in_force_.filter = request.filter;
    captured_ = match(request.filter);
    version_.fetch_add(1, std::memory_order_release);
    return ControlStatus::Ok;
  }

  ControlRequest in_force() {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_force_;
  }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void copy(ControlRequest* request, std::vector<uint8_t>* captured) {
    std::lock_guard<std::mutex> lock(mutex_);
    *request = in_force_;
    *captured = captured_;
  }

 private:
  std::vector<uint8_t> match(const std::string& filter) const {
    std::vector<uint8_t> captured(catalog_.size(), 1);
    if (filter.empty()) return captured;
    KernelFilter pattern;
    KernelFilter::compile(filter, &pattern);  // validated before
    for (size_t slot = 0; slot < catalog_.size(); ++slot) {
      const std::string& mangled = catalog_[slot].mangled;
      captured[slot] = pattern.search(mangled) == KernelFilter::Verdict::Match ||
                       pattern.search(demangle(mangled)) == KernelFilter::Verdict::Match;
    }
    return captured;
  }

  const std::vector<KernelProfile>& catalog_;
  const uint32_t live_graphs_;
  std::mutex mutex_;
  ControlRequest in_force_;
  std::vector<uint8_t> captured_;
  std::atomic<uint64_t> version_{1};
};

int run(const Options& options) {
  std::mt19937_64 rng(options.seed);
  std::vector<KernelProfile> catalog = make_catalog(options.kernels, rng);

  SegmentOptions segment_options;
  segment_options.directory = options.segment_dir;
  segment_options.caps.event_rings = options.contexts;
  segment_options.caps.event_ring_records = options.ring_records;
  segment_options.caps.launch_ring_records = options.launch_ring_records;
  segment_options.caps.kernel_slots = std::max<uint32_t>(options.kernels, 64);
  segment_options.caps.name_arena_bytes = std::max<uint32_t>(1u << 20, options.kernels * 512u);  // names of any length
  segment_options.producer_kind = ProducerKind::Synth;
  segment_options.patch_set = options.patch_set;
  segment_options.initial_mode = options.mode;
  segment_options.initial_shift = options.shift;
  segment_options.producer = "gpuobs-synth";
  segment_options.label = options.label;
  segment_options.producer_flags = kBlockExitsHooked | (options.launch_trace ? kLaunchTrace : 0u);  // both edges
  std::string error;
  auto segment = MappedSegment::create(segment_options, &error);
  if (!segment) {
    std::fprintf(stderr, "gpuobs-synth: %s\n", error.c_str());
    return 1;
  }
  SegmentWriter writer(std::move(segment));
  {
    ControlRequest initial;
    initial.mode = options.mode;
    initial.shift = options.shift;
    initial.patch_set = options.patch_set;
    initial.filter = options.filter;
    writer.acknowledge(0, initial, ControlStatus::Ok, "");
  }
  uint64_t kernel0_cubin = 0;
  if (!options.cubin.empty()) {
    // Kernel 0 plays a real cubin's function: the cubin is kept exactly as the injector keeps a
    // module's, and its accesses sit at real instruction offsets.
    if (options.cubin_function.empty() || options.cubin_offsets.empty())
      usage("--cubin needs --cubin-function and --cubin-offsets");
    std::FILE* file = std::fopen(options.cubin.c_str(), "rb");
    if (!file) usage("cannot read --cubin");
    std::string bytes;
    char buffer[65536];
    size_t got = 0;
    while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) bytes.append(buffer, got);
    std::fclose(file);
    // the injector's settings: GPUOBS_CUBIN_DIR, GPUOBS_CUBIN_MB (a budget too small keeps nothing)
    const char* dir = std::getenv("GPUOBS_CUBIN_DIR");
    const char* megabytes = std::getenv("GPUOBS_CUBIN_MB");
    const uint64_t budget = (megabytes && *megabytes ? parse_number(megabytes, "GPUOBS_CUBIN_MB") : 1024) << 20;
    CubinStore store(dir && *dir ? dir : options.segment_dir + "/gpuobs-cubins", budget);
    std::string why;
    kernel0_cubin = store.keep(1, bytes.data(), bytes.size(), &why);
    if (!kernel0_cubin) std::fprintf(stderr, "gpuobs-synth: cubin not kept (%s)\n", why.c_str());
    catalog[0].mangled = options.cubin_function;
    catalog[0].access_offsets = options.cubin_offsets;
    catalog[0].accesses_per_thread = uint32_t(options.cubin_offsets.size());
  }
  std::vector<uint32_t> slots;
  for (size_t index = 0; index < catalog.size(); ++index) {
    const KernelProfile& profile = catalog[index];
    const int64_t slot = index == 0 && kernel0_cubin
                             ? writer.register_kernel(0, 1, profile.mangled, kernel0_cubin, profile.base_pc)
                             : writer.register_kernel(0, 1, profile.mangled);
    if (index == 0 && !options.cubin.empty())
      __atomic_fetch_add(kernel0_cubin ? &writer.view().counters->cubins_kept : &writer.view().counters->cubins_skipped,
                         1, __ATOMIC_RELAXED);
    slots.push_back(slot < 0 ? UINT32_MAX : uint32_t(slot));
  }
  std::fprintf(stderr, "gpuobs-synth: pid %d segment %s\n", int(::getpid()), writer.segment().path().c_str());

  SimulatedDevice device(&writer, uint32_t(catalog.size()));
  AppliedConfig config(options, catalog);
  std::atomic<bool> device_done{false};

  std::thread control_thread([&] {
    uint64_t seen = 0;
    while (!device_done.load()) {
      ControlRequest request;
      if (writer.poll_control(seen, &request)) {
        seen = request.generation;
        std::string message;
        const ControlStatus status = config.apply(request, &message);
        writer.acknowledge(request.generation, config.in_force(), status, message);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(options.control_poll_us));
    }
  });
  std::thread publisher_thread([&] {
    while (!device_done.load()) {
      device.publish(false);
      std::this_thread::sleep_for(std::chrono::microseconds(options.publish_us));
    }
  });

  const auto start = std::chrono::steady_clock::now();
  uint64_t work_done = 0;
  uint64_t launches = 0;
  uint64_t grid_id = 0;
  uint64_t config_version = 0;
  ControlRequest in_force;
  std::vector<uint8_t> captured;
  std::vector<double> weights;
  for (size_t i = 0; i < catalog.size(); ++i) weights.push_back(1.0 / double(1 + i % 8));  // a few hot kernels
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  // --graph-nodes: one graph exec replayed again and again; its nodes keep their grid ids across
  // replays (as CUDA graph nodes do) and each replay has a launch id of its own.
  const uint64_t graph_exec = 0x6a0000000000ULL + uint64_t(::getpid());
  std::vector<uint64_t> node_grid_ids;
  uint64_t replay = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.duration > 0 && elapsed >= options.duration) break;
    if (options.max_launches && launches >= options.max_launches) break;
    if (options.max_events && device.events_produced() >= options.max_events) break;
    if (options.crash_after && device.events_produced() >= options.crash_after) {
      device.write_half_record(0, slots[0]);
      ::kill(::getpid(), SIGKILL);
    }
    if (options.rate > 0) {
      const double ahead = double(work_done) / options.rate - elapsed;
      if (ahead > 0.0005) {
        std::this_thread::sleep_for(std::chrono::duration<double>(ahead));
        continue;
      }
    }
    if (config.version() != config_version) {
      config_version = config.version();
      config.copy(&in_force, &captured);
    }
    size_t index = 0;
    uint64_t launch_grid_id = 0;
    uint32_t node_index = 0;
    if (options.graph_nodes) {
      node_index = uint32_t(launches % options.graph_nodes);
      if (node_index == 0) {
        if (replay == 0)  // the exec is instantiated before its first replay
          writer.write_launch(graph_event_record(LaunchKind::GraphExecCreated, graph_exec));
        ++replay;
        if (options.steps) write_engine_step(writer, replay);
        LaunchRecord graph_record = graph_event_record(LaunchKind::GraphLaunch, graph_exec);
        graph_record.stream = 0x1000;
        graph_record.replay = replay;
        graph_record.mode = uint32_t(in_force.mode);
        graph_record.shift = in_force.shift;
        // as the injector: the first replay is recorded node by node (its nodes are learned), the
        // others not, unless every launch is traced
        if (replay == 1 || options.launch_trace) graph_record.flags |= kGraphNodesRecorded;
        writer.write_launch(graph_record);
      }
      index = node_index % catalog.size();
      if (node_grid_ids.size() <= node_index) node_grid_ids.push_back(++grid_id);
      launch_grid_id = node_grid_ids[node_index];
    } else {
      index = pick(rng);
      launch_grid_id = ++grid_id;
    }
    const KernelProfile& profile = catalog[index];
    LaunchShape shape{slots[index], profile.grid_x, profile.grid_y, profile.grid_z, profile.block_threads,
                      launch_grid_id, uint32_t(launches % options.contexts), options.graph_nodes ? replay : 0};
    LaunchRecord record = kernel_launch_record(shape, options.graph_nodes ? LaunchKind::GraphNode : LaunchKind::Eager,
                                               in_force.mode, in_force.shift, captured[index] != 0);
    if (options.graph_nodes) {
      record.graph_exec = graph_exec;
      record.graph_node = 0xa000 + node_index;
      record.graph_launch_id = replay;
      record.replay = replay;
    }
    if (options.launch_trace || (options.graph_nodes && replay == 1)) writer.write_launch(record);
    ++launches;
    if (shape.slot == UINT32_MAX) continue;
    DeviceConfig device_config{in_force.mode, in_force.shift, captured[index] != 0};
    work_done += device.run(shape, profile, device_config);
  }
  if (options.hang_seconds > 0 && slots[0] != UINT32_MAX) {
    // A kernel that hangs: its launch record, its blocks' enters, then nothing until released.
    const KernelProfile& profile = catalog[0];
    LaunchShape shape{slots[0], profile.grid_x, profile.grid_y, profile.grid_z, profile.block_threads, ++grid_id, 0, 0};
    if (options.launch_trace) writer.write_launch(kernel_launch_record(shape, LaunchKind::Eager, Mode::Blocks, 0, true));
    std::fprintf(stderr, "gpuobs-synth: hanging kernel 0 (grid id %llu) for %.0f s\n", (unsigned long long)shape.grid_id,
                 options.hang_seconds);
    device.run_held(shape, profile, options.hang_seconds, g_stop);
    ++launches;
  }
  device_done.store(true);
  control_thread.join();
  publisher_thread.join();
  device.publish(true);
  writer.segment().mark_exited();
  std::printf("{\"pid\": %d, \"segment\": \"%s\", \"launches\": %llu, \"events_produced\": %llu}\n", int(::getpid()),
              writer.segment().path().c_str(), (unsigned long long)launches,
              (unsigned long long)device.events_produced());
  std::fflush(stdout);
  if (options.unlink_at_exit) writer.segment().unlink_file();
  return 0;
}

}  // namespace
}  // namespace synth
}  // namespace gpuobs

int main(int argc, char** argv) {
  struct sigaction action {};
  action.sa_handler = gpuobs::synth::on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return gpuobs::synth::run(gpuobs::synth::parse(argc, argv));
}
