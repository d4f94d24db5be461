// libgpuobs_injector.so: loaded into the served process through CUDA_INJECTION64_PATH.
// This is the skeleton of the spine issue: it subscribes to the Compute Sanitizer callbacks,
// creates the process's segment when the first context is created, registers kernels and
// publishes a launch record per launch. Patching (the mode ladder) builds on it.
//
// Rules for everything here: no exception crosses into the driver, nothing blocks a launch,
// and any failure is logged once, counted, and the served process carries on untouched.
#include <sanitizer.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "function_slots.h"
#include "gpuobs/host_writer.h"
#include "gpuobs/shm_segment.h"
#include "injector_config.h"
#include "injector_log.h"

namespace gpuobs {
namespace {

class Injector {
 public:
  Injector() : config_(load_injector_config()), slots_(1u << 14) {}

  bool subscribe() {
    if (sanitizerSubscribe(&subscriber_, &Injector::callback, this) != SANITIZER_SUCCESS) {
      log_line("cannot subscribe to the sanitizer callbacks (another tool is attached?); not observing");
      return false;
    }
    sanitizerEnableDomain(1, subscriber_, SANITIZER_CB_DOMAIN_RESOURCE);
    sanitizerEnableDomain(1, subscriber_, SANITIZER_CB_DOMAIN_LAUNCH);
    return true;
  }

 private:
  static void SANITIZERAPI callback(void* userdata, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                                    const void* cbdata) {
    try {
      static_cast<Injector*>(userdata)->dispatch(domain, cbid, cbdata);
    } catch (...) {
      if (first_time(LogOnce::Internal)) log_line("internal error in a callback; continuing without it");
    }
  }

  void dispatch(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* cbdata) {
    if (domain == SANITIZER_CB_DOMAIN_RESOURCE) {
      if (cbid == SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED) ensure_segment();
      if (cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED) on_module_loaded();
      return;
    }
    if (domain == SANITIZER_CB_DOMAIN_LAUNCH && cbid == SANITIZER_CBID_LAUNCH_BEGIN)
      on_launch(*static_cast<const Sanitizer_LaunchData*>(cbdata));
  }

  void ensure_segment() {
    std::call_once(segment_once_, [this] {
      SegmentOptions options;
      options.directory = config_.segment_dir;
      options.caps.event_ring_records = config_.ring_records;
      options.producer_kind = ProducerKind::Injector;
      options.patch_set = config_.patch_set;
      options.initial_mode = config_.mode;
      options.initial_shift = config_.shift;
      options.group = config_.group;
      options.producer = "gpuobs-injector";
      options.label = config_.label;
      std::string error;
      auto segment = MappedSegment::create(options, &error);
      if (!segment) {
        log_line("no segment (%s); the program runs unobserved", error.c_str());
        return;
      }
      log_line("observing pid segment %s (patch set %s, mode %s)", segment->path().c_str(),
               config_.patch_set == PatchSet::Memory ? "memory" : "block", mode_name(config_.mode));
      writer_ = std::make_unique<SegmentWriter>(std::move(segment));
      ready_.store(true, std::memory_order_release);
    });
  }

  void on_module_loaded() {
    if (!ready_.load(std::memory_order_acquire)) return;
    __atomic_fetch_add(&writer_->view().counters->modules_loaded, 1, __ATOMIC_RELAXED);
  }

  void on_launch(const Sanitizer_LaunchData& launch) {
    if (!ready_.load(std::memory_order_acquire)) return;
    const uint64_t function = reinterpret_cast<uint64_t>(launch.function);
    const int64_t slot = slots_.find_or_add(function, [&](uint64_t) {
      const int64_t registered = writer_->register_kernel(function, reinterpret_cast<uint64_t>(launch.module),
                                                          launch.functionName ? launch.functionName : "<unnamed>");
      if (registered < 0 && first_time(LogOnce::KernelTable))
        log_line("kernel table full; further kernels are counted as unattributed");
      return registered;
    });
    LaunchRecord record{};
    record.host_time_ns = monotonic_ns();
    record.grid_id = launch.gridId;
    record.stream = reinterpret_cast<uint64_t>(launch.stream);
    record.kernel_slot = slot >= 0 ? uint32_t(slot) : UINT32_MAX;
    record.grid_x = launch.gridDim_x;
    record.grid_y = launch.gridDim_y;
    record.grid_z = launch.gridDim_z;
    record.block_x = launch.blockDim_x;
    record.block_y = launch.blockDim_y;
    record.block_z = launch.blockDim_z;
    record.kind = uint32_t(LaunchKind::Eager);
    record.mode = uint32_t(config_.mode);
    record.shift = config_.shift;
    writer_->write_launch(record);
  }

  InjectorConfig config_;
  Sanitizer_SubscriberHandle subscriber_ = nullptr;
  std::once_flag segment_once_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<SegmentWriter> writer_;
  FunctionSlots slots_;
};

Injector* g_injector = nullptr;

}  // namespace
}  // namespace gpuobs

// The entry point CUDA calls for a library named by CUDA_INJECTION64_PATH, before any other
// CUDA work in the process. Returning 1 either way: a failure here must not stop the program.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  try {
    if (gpuobs::g_injector == nullptr) {
      gpuobs::g_injector = new gpuobs::Injector();  // lives as long as the process
      gpuobs::g_injector->subscribe();
    }
  } catch (...) {
    gpuobs::log_line("initialisation failed; the program runs unobserved");
  }
  return 1;
}
