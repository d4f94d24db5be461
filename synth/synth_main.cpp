// gpuobs-synth: plays an injected process with the injector's own segment library code (writer,
// set-up, control decision), so the daemon, CLI, metrics and fault tests run where there is no
// GPU. One thread plays the device (device_loop.cpp: launch records, per-block / per-access work
// as the mode dictates), one follows the control block as the injector's tool thread does
// (synth_control.cpp), one publishes device counters as the injector's tool thread does. Exits
// cleanly on SIGTERM/SIGINT with a final, quiescent publish.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device_loop.h"
#include "gpuobs/cubin_store.h"
#include "gpuobs/producer.h"
#include "kernel_catalog.h"
#include "options.h"
#include "simulated_device.h"
#include "synth_control.h"

namespace gpuobs {
namespace synth {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// Where cubins are kept, as the injector decides it: GPUOBS_CUBIN_DIR, else the user's own cache.
std::string cubin_directory() {
  const char* dir = std::getenv("GPUOBS_CUBIN_DIR");
  return dir && *dir ? dir : default_cubin_directory();
}

// Kernel 0 plays a real cubin's function (--cubin): the cubin is kept exactly as the injector
// keeps a module's, and its accesses sit at real instruction offsets. Returns the cubin's hash,
// 0 when it was not kept.
uint64_t play_cubin(const Options& options, KernelProfile* kernel0) {
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
  const char* megabytes = std::getenv("GPUOBS_CUBIN_MB");
  const uint64_t budget = (megabytes && *megabytes ? parse_bounded(megabytes, "GPUOBS_CUBIN_MB", 0, 1u << 20) : 1024)
                          << 20;
  const char* named = std::getenv("GPUOBS_CUBIN_DIR");
  CubinStore store(cubin_directory(), budget, gid_t(options.group), !(named && *named));
  std::string why;
  const uint64_t hash = store.keep(1, bytes.data(), bytes.size(), &why);
  if (!hash) std::fprintf(stderr, "gpuobs-synth: cubin not kept (%s)\n", why.c_str());
  kernel0->mangled = options.cubin_function;
  kernel0->access_offsets = options.cubin_offsets;
  kernel0->accesses_per_thread = uint32_t(options.cubin_offsets.size());
  return hash;
}

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
  segment_options.group = gid_t(options.group);
  segment_options.memory_kernels = options.memory_kernels;
  if (!options.cubin.empty()) segment_options.cubin_dir = cubin_directory();  // it keeps one with --cubin
  segment_options.producer_flags = kBlockExitsHooked | (options.launch_trace ? kLaunchTrace : 0u);  // both edges
  std::string error;
  const std::unique_ptr<SegmentWriter> producer = start_producer(segment_options, options.filter, &error);
  if (!producer) {
    std::fprintf(stderr, "gpuobs-synth: %s\n", error.c_str());
    return 1;
  }
  SegmentWriter& writer = *producer;
  writer.note_takes_op_windows();  // it plays the framework plugin as well (device_loop.cpp)
  const uint64_t kernel0_cubin = options.cubin.empty() ? 0 : play_cubin(options, &catalog[0]);
  AppliedConfig config(options, catalog);
  std::vector<uint32_t> slots;
  for (size_t index = 0; index < catalog.size(); ++index) {
    const KernelProfile& profile = catalog[index];
    // as the injector, a module's count as it is patched (each kernel is a module of its own here)
    if (config.chosen(index) || options.patch_set == PatchSet::Memory)
      __atomic_fetch_add(&writer.view().counters->modules_access_hooked, 1, __ATOMIC_RELAXED);
    const uint32_t entry_flags = config.chosen(index) ? uint32_t(kKernelAccessHooksChosen) : 0u;
    const int64_t slot = index == 0 && kernel0_cubin ? writer.register_kernel(0, 1, profile.mangled, kernel0_cubin,
                                                                              profile.base_pc, entry_flags)
                                                     : writer.register_kernel(0, 1, profile.mangled, 0, 0, entry_flags);
    if (index == 0 && !options.cubin.empty())
      __atomic_fetch_add(kernel0_cubin ? &writer.view().counters->cubins_kept : &writer.view().counters->cubins_skipped,
                         1, __ATOMIC_RELAXED);
    slots.push_back(slot < 0 ? UINT32_MAX : uint32_t(slot));
  }
  for (uint32_t i = 0; i < options.profiler_starts; ++i) writer.note_profiler_start();
  if (options.rank >= 0)
    writer.set_identity(ProcessRole::Engine, uint32_t(options.rank), options.world_size, options.local_rank,
                        options.model);
  for (size_t context = 0; context < options.gpus.size(); ++context) {  // as the injector at context creation
    const std::string& gpu = options.gpus[context];
    const size_t first = gpu.find(','), second = gpu.find(',', first + 1);
    writer.add_gpu(uint32_t(context), uint32_t(std::strtoul(gpu.c_str(), nullptr, 10)),
                   gpu.substr(first + 1, second - first - 1), gpu.substr(second + 1));
  }
  std::fprintf(stderr, "gpuobs-synth: pid %d segment %s\n", int(::getpid()), writer.segment().path().c_str());

  SimulatedDevice device(&writer, uint32_t(catalog.size()));
  std::atomic<bool> device_done{false};

  std::thread control_thread([&] { follow_control_until(writer, config, options.control_poll_us, device_done); });
  std::thread publisher_thread([&] {
    while (!device_done.load()) {
      device.publish(false);
      std::this_thread::sleep_for(std::chrono::microseconds(options.publish_us));
    }
  });

  const uint64_t launches = run_device_loop(options, writer, device, config, catalog, slots, rng, g_stop);
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
  struct sigaction action{};
  action.sa_handler = gpuobs::synth::on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return gpuobs::synth::run(gpuobs::synth::parse_options(argc, argv));
}
