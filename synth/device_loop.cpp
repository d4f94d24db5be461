#include "device_loop.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "gpuobs/process_info.h"

namespace gpuobs {
namespace synth {
namespace {

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
  if (kind == LaunchKind::Eager) record.thread = uint64_t(::gettid());  // as the injector: the launching thread
  return record;
}

// --ops N: a framework op before every N launches, as a plugin records them; its label is one of
// a few (the test's oracle: op k has label (k - 1) % 3 and launches kernel (k - 1) % catalog size).
constexpr const char* kOpLabels[] = {
    "model.layers.0.mlp.down_proj aten::mm bf16[8,6144] bf16[6144,2048]",
    "model.layers.0.self_attn vllm::unified_attention bf16[8,16,128] bf16[8,8,128]",
    "model.layers.1.input_layernorm vllm::rms_norm bf16[8,2048] bf16[2048]",
};
constexpr uint64_t kFirstNode = 0xa000;  // graph node handles: kFirstNode + node index
void write_op(SegmentWriter& writer, uint64_t op) {
  const char* label = kOpLabels[(op - 1) % (sizeof(kOpLabels) / sizeof(kOpLabels[0]))];
  writer.write_op(op, label, uint32_t(std::strlen(label)));
}

// --graph-nodes N --ops K: the graph was captured with an op for every K nodes (op k added nodes
// (k - 1) * K up to k * K, with write_op's label for k), as the op recorder reports them, before
// the exec is made from it.
void write_capture(SegmentWriter& writer, uint64_t graph, uint32_t nodes, uint32_t per_op) {
  std::vector<uint64_t> added;
  std::vector<uint8_t> kernel;
  for (uint32_t first = 0; first < nodes; first += per_op) {
    const uint64_t op = first / per_op + 1;
    write_op(writer, op);
    added.clear();
    for (uint32_t node = first; node < std::min(nodes, first + per_op); ++node) added.push_back(kFirstNode + node);
    kernel.assign(added.size(), 1);  // every node of the synth's graph is a kernel node
    writer.write_op_nodes(op, graph, /*capture_id=*/1, added.data(), kernel.data(), added.size());
  }
}

// An engine step as the vLLM plugin records it before the step's graph replay (KvCacheModel
// says which requests, tokens and blocks); `flops_per_token`: the engine's FLOP estimate per
// token scheduled (0: it gives none). Returns the slots its tokens are written to.
std::shared_ptr<const std::vector<int64_t>> write_engine_step(SegmentWriter& writer, const KvCacheModel& cache,
                                                              uint64_t step, uint64_t flops_per_token) {
  const EngineStep engine = cache.step(step);
  writer.write_step(step, engine.requests, engine.tokens, engine.text.empty() ? nullptr : engine.text.data(),
                    uint32_t(engine.text.size()), engine.flags, flops_per_token * engine.tokens);
  return engine.slots;
}

// The catalogue's cache-write kernel (vLLM's reshape_and_cache_flash), or none.
size_t cache_kernel_index(const std::vector<KernelProfile>& catalog) {
  for (size_t index = 0; index < catalog.size(); ++index)
    if (catalog[index].mangled.find("reshape_and_cache") != std::string::npos) return index;
  return catalog.size();
}

}  // namespace

uint64_t run_device_loop(const Options& options, SegmentWriter& writer, SimulatedDevice& device, AppliedConfig& config,
                         const std::vector<KernelProfile>& catalog, const std::vector<uint32_t>& slots,
                         std::mt19937_64& rng, const std::atomic<bool>& stop) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t work_done = 0;
  uint64_t launches = 0;
  uint64_t grid_id = 0;
  uint64_t config_version = 0;
  ControlRequest in_force;
  std::vector<uint8_t> captured;
  std::vector<uint8_t> access_hooked;
  std::vector<double> weights;
  for (size_t i = 0; i < catalog.size(); ++i) weights.push_back(1.0 / double(1 + i % 8));  // a few hot kernels
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  // --graph-nodes: one graph exec replayed again and again; its nodes keep their grid ids across
  // replays (as CUDA graph nodes do) and each replay has a launch id of its own.
  const uint64_t graph_exec = 0x6a0000000000ULL + uint64_t(::getpid());
  std::vector<uint64_t> node_grid_ids;
  uint64_t replay = 0;
  // --steps: each node of the cache-write kernel is one layer's cache write
  const size_t cache_index = cache_kernel_index(catalog);
  std::vector<uint32_t> node_layer(options.graph_nodes, UINT32_MAX);
  uint32_t layers = 0;
  for (uint32_t node = 0; node < options.graph_nodes && !catalog.empty(); ++node)
    if (node % catalog.size() == cache_index) node_layer[node] = layers++;
  const KvCacheModel kv_cache(layers);
  std::shared_ptr<const std::vector<int64_t>> step_slots;
  // Launches issued and not run yet (--device-lag): each runs in the mode in force when it runs.
  struct Queued {
    LaunchShape shape;
    size_t index;
    bool delayed;  // --replay-delay-us: the last node of a replay, run that much later
  };
  std::deque<Queued> queued;
  // An op window the daemon opened (gpuobsctl ops --record-steps N), played as the vLLM plugin
  // and the injector do: each of the next N launches is an engine step with one op, its op record
  // before it and its launch record (the launch trace is on for the window) naming the op. Only
  // where no other op source (--ops, --graph-nodes) numbers ops.
  uint32_t window_left = 0;
  uint64_t window_ops = 0;
  const auto run_next = [&] {
    const Queued next = queued.front();
    queued.pop_front();
    if (next.delayed) std::this_thread::sleep_for(std::chrono::microseconds(options.replay_delay_us));
    const DeviceConfig device_config{
        in_force.mode,        in_force.shift,      captured[next.index] != 0, access_hooked[next.index] != 0,
        options.launch_times, options.replay_spans};
    work_done += device.run(next.shape, catalog[next.index], device_config);
  };
  while (!stop.load(std::memory_order_relaxed)) {
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
      config.copy(&in_force, &captured, &access_hooked);
    }
    size_t index = 0;
    uint64_t launch_grid_id = 0;
    uint32_t node_index = 0;
    if (options.graph_nodes) {
      node_index = uint32_t(launches % options.graph_nodes);
      if (node_index == 0) {
        if (replay == 0) {  // captured, and the exec instantiated from the graph before its first replay
          const uint64_t graph = 0x9a0000000000ULL + uint64_t(::getpid());
          if (options.ops) write_capture(writer, graph, options.graph_nodes, options.ops);
          LaunchRecord created = graph_event_record(LaunchKind::GraphExecCreated, graph_exec);
          created.graph_node = graph;
          writer.write_launch(created);
        }
        ++replay;
        if (options.steps) step_slots = write_engine_step(writer, kv_cache, replay, options.step_flops);
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
    } else if (options.ops) {
      if (launches % options.ops == 0) write_op(writer, launches / options.ops + 1);
      index = size_t(launches / options.ops) % catalog.size();
      launch_grid_id = ++grid_id;
    } else {
      index = pick(rng);
      launch_grid_id = ++grid_id;
      if (!window_left) window_left = config.take_ops_window();
    }
    const KernelProfile& profile = catalog[index];
    LaunchShape shape{slots[index],
                      profile.grid_x,
                      profile.grid_y,
                      profile.grid_z,
                      profile.block_threads,
                      launch_grid_id,
                      uint32_t(launches % options.contexts),
                      options.graph_nodes ? replay : 0,
                      options.graph_nodes != 0 && node_index + 1 == options.graph_nodes,
                      {}};
    if (options.steps && node_index < node_layer.size() && node_layer[node_index] != UINT32_MAX)
      shape.cache = {&kv_cache, node_layer[node_index], step_slots};
    LaunchRecord record = kernel_launch_record(shape, options.graph_nodes ? LaunchKind::GraphNode : LaunchKind::Eager,
                                               in_force.mode, in_force.shift, captured[index] != 0);
    if (options.ops && !options.graph_nodes)
      record.op = launches / options.ops + 1;  // as the injector: the op open on the thread
    if (options.graph_nodes) {
      record.graph_exec = graph_exec;
      record.graph_node = kFirstNode + node_index;
      record.graph_launch_id = replay;
      record.replay = replay;
    }
    const bool in_window = window_left > 0 && !options.ops && !options.graph_nodes;
    if (in_window) {
      --window_left;
      write_op(writer, ++window_ops);
      record.op = window_ops;
    }
    if (options.launch_trace || in_window || (options.graph_nodes && replay == 1)) writer.write_launch(record);
    ++launches;
    if (shape.slot == UINT32_MAX) continue;
    queued.push_back({shape, index, options.replay_delay_us && node_index + 1 == options.graph_nodes});
    while (queued.size() > options.device_lag) run_next();
  }
  while (!queued.empty()) run_next();
  if (options.hang_seconds > 0 && slots[0] != UINT32_MAX) {
    // A kernel that hangs: its launch record, its blocks' enters, then nothing until released.
    const KernelProfile& profile = catalog[0];
    LaunchShape shape{slots[0], profile.grid_x, profile.grid_y, profile.grid_z, profile.block_threads, ++grid_id, 0, 0};
    if (options.launch_trace)
      writer.write_launch(kernel_launch_record(shape, LaunchKind::Eager, Mode::Blocks, 0, true));
    std::fprintf(stderr, "gpuobs-synth: hanging kernel 0 (grid id %llu) for %.0f s\n",
                 (unsigned long long)shape.grid_id, options.hang_seconds);
    device.run_held(shape, profile, options.hang_seconds, stop);
    ++launches;
  }
  return launches;
}

}  // namespace synth
}  // namespace gpuobs
