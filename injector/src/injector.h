// The injector: Compute Sanitizer callbacks in, segment and device state out. One instance per
// process, created by InitializeInjection and never destroyed (the driver may call back until
// the very end).
//
// The steady state makes no host callback per kernel launch and none per synchronize: each
// function is bound to its device slot when it loads (FUNCTIONS_LAZY_LOADED, or the module's
// function list when modules load eagerly), and the patches count launches, blocks and shapes
// on the device (launch_census.h). What stays on the host is one callback per graph replay
// (its number, for the replay census and the join of events) and, for a graph exec's first
// replays, one per node, until its nodes' grid ids are known. Host callbacks per launch come
// back only with the opt-in launch trace (GPUOBS_LAUNCH_TRACE=1) or when a module could not be
// patched (its launches are counted on the host as unpatched).
//
// Threads: the program's own threads run the callbacks; the tool thread (control_thread.cpp)
// applies control requests (it rebinds every function with the new config) and publishes the
// device counters.
#pragma once

#include <sanitizer.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device_context.h"
#include "function_slots.h"
#include "gpuobs/cubin_store.h"
#include "gpuobs/kernel_filter.h"
#include "gpuobs/producer.h"
#include "gpuobs/segment_writer.h"
#include "graph_execs.h"
#include "host_annotations.h"
#include "injector_config.h"
#include "patcher.h"

namespace gpuobs {

// Marks the calling thread as the tool's own: callbacks it triggers are ignored.
void mark_tool_thread();

// Where a kernel launch sits in a graph replay (all zero for an eager launch).
struct GraphPosition {
  uint64_t graph_exec = 0;
  uint64_t graph_node = 0;
  uint64_t launch_id = 0;  // the driver's per-exec launch id
  uint64_t replay = 0;     // our replay number, pushed to the device (DeviceContext::push_replay)
};

// Launches the host saw of kernels the device cannot count (module unpatched, or no device
// slot for the function): added to the device census when counters are published.
struct HostCounted {
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> blocks{0};
};

class Injector : private ControlTarget {
 public:
  Injector();
  bool subscribe();
  void shutdown();  // at exit: stop the tool thread, last publish, mark the segment exited
  // What the served program's plugin records (the C interface's calls, plugin_api.cpp).
  HostAnnotations& annotations() { return annotations_; }
  // A probe (GPUOBS_STEP_ASIDE=1, else -2): unsubscribes from the Sanitizer API, to see whether a
  // CUPTI client can then attach (on r580 it cannot). Patched code keeps running; no callback
  // comes after, so modules loaded later are neither patched nor counted.
  int step_aside();

 private:
  static void SANITIZERAPI callback(void* userdata, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                                    const void* cbdata);
  // the counter word that times callbacks of this domain; nullptr before the segment exists
  uint64_t* callback_timer(Sanitizer_CallbackDomain domain);
  void dispatch(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* cbdata);
  // Turns a callback id on or off (the sanitizer wants these calls serialised); never off while
  // `keep_on` holds (a flag its setter sets before it turns the callback on through here).
  void enable_callback(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, bool enable,
                       const std::atomic<bool>* keep_on = nullptr);

  // resource callbacks
  void record_gpu(uint32_t context_index, CUdevice device);
  void on_context_created(const Sanitizer_ResourceContextData& data);
  void on_context_destroying(const Sanitizer_ResourceContextData& data);
  void on_module_loaded(const Sanitizer_ResourceModuleData& data);
  void on_module_unloading(CUmodule module);
  void on_functions_loaded(CUcontext context, CUmodule module, const CUfunction* functions, uint32_t count);
  // launch callbacks (launch trace, or kernels the device cannot count)
  void on_launch(const Sanitizer_LaunchData& launch, LaunchKind kind, const GraphPosition& position);
  void on_graph_launch(const Sanitizer_GraphLaunchData& data);
  void on_graph_launch_end();
  void on_graph_exec(const Sanitizer_GraphExecData& data, LaunchKind kind);
  // Host launch callbacks on for good (trace, or a module that could not be patched).
  void need_launch_callbacks(const char* why);

  bool ensure_segment();
  DeviceContext* context_for(CUcontext context);
  // The slot of `function`, registering and binding it on first sight.
  int64_t slot_of(CUcontext context, CUmodule module, CUfunction function, const char* name);
  int64_t register_function(CUcontext context, CUmodule module, CUfunction function, const char* name);
  // What a function is bound to: its slot's address, and with GPUOBS_CONFIG_WORD=bound the config.
  struct Binding;
  uint64_t userdata_of(const Binding& binding, uint32_t flags) const;
  // A kernel's config word under `config`: the process-wide options (GPUOBS_LAUNCH_TIMES,
  // GPUOBS_REPLAY_SPANS) come from config_.
  uint32_t kernel_flags(uint64_t config, bool captured, bool access_hooked) const {
    return make_flags(config, captured, access_hooked, config_.launch_times, config_.replay_spans);
  }

  // control thread (control_thread.cpp)
  void control_loop();
  // The spans of the replays `context` finished since the last publish, into the launch ring.
  void publish_replay_spans(DeviceContext& context);
  std::atomic<uint64_t> replay_spans_unwritten_{0};  // spans a full launch ring dropped
  // ControlTarget: the control decision (producer.h) asks and changes the config through these.
  ControlRequest in_force() override;
  PatchSet patch_set() override;
  bool chooses_access_kernels() override;
  int64_t live_graph_execs() override;
  bool switch_patch_set(PatchSet set, std::string* error) override;
  void put_in_force(const ControlRequest& config, std::shared_ptr<const KernelFilter> filter) override;
  void open_ops_window(uint32_t steps) override;
  // The config in force into every context's slots (and, bound, into every function's binding).
  // Takes config_mutex_ only to compute, never across a call into the driver.
  void apply_config();
  void publish();
  void refresh_ring_limits();
  // Every context's slot headers: the config words `flags` (nullptr: as they are) and the
  // registered kernels' first pcs. Under device_config_mutex_.
  void write_slot_headers(const std::vector<uint32_t>* flags);
  // Node launch callbacks on while a graph exec may need its nodes learned, off otherwise.
  void manage_node_callbacks();
  // The kernel filter's verdict on a registered kernel (tool thread, no lock: names are
  // published once per slot); kernels whose names make the filter too costly are captured.
  bool captured_by(const KernelFilter* filter, uint32_t slot);
  // The sanitizer is called outside graph_execs_'s lock; its flag says on only while the
  // callbacks surely are.
  void set_node_callbacks(bool on);

  InjectorConfig config_;
  Patcher patcher_;
  HostAnnotations annotations_;
  CubinStore cubins_;
  Sanitizer_SubscriberHandle subscriber_ = nullptr;
  std::mutex callbacks_mutex_;  // sanitizerEnableCallback calls
  bool stepped_aside_ = false;  // under callbacks_mutex_: the subscriber is gone or going

  std::mutex segment_mutex_;
  std::atomic<bool> segment_ready_{false};
  bool segment_failed_ = false;
  std::unique_ptr<SegmentWriter> writer_;

  static constexpr uint32_t kMaxContexts = 64;
  std::mutex contexts_mutex_;  // creation only; lookups are lock-free
  std::unique_ptr<DeviceContext> context_storage_[kMaxContexts];
  std::atomic<DeviceContext*> contexts_[kMaxContexts] = {};
  std::atomic<uint32_t> context_count_{0};

  FunctionSlots function_slots_;
  std::unique_ptr<std::atomic<uint8_t>[]> slot_on_device_;      // per slot: the device counts its launches
  std::unique_ptr<std::atomic<uint8_t>[]> slot_captured_;       // per slot: the kernel filter lets it record
  std::unique_ptr<std::atomic<uint64_t>[]> slot_entry_pc_;      // per slot: its function's first pc (0: unknown)
  std::unique_ptr<std::atomic<uint8_t>[]> slot_access_hooked_;  // per slot: its module has the access hooks
  std::unique_ptr<HostCounted[]> host_counted_;                 // per slot
  std::atomic<bool> launch_callbacks_{false};
  // the config word in force, for what the callbacks record (set after the functions are rebound)
  std::atomic<uint64_t> config_word_{0};

  // config in force and the functions bound with it (guarded by config_mutex_; never taken on
  // a launch path)
  struct Binding {
    CUfunction function;
    CUmodule module;
    uint32_t slot;
    DeviceContext* context;
    bool access_hooks_chosen;  // its module has the access hooks by choice (GPUOBS_MEMORY_KERNELS)
  };
  std::mutex device_config_mutex_;  // apply_config: one writer of slots and bindings at a time
  std::mutex config_mutex_;
  ControlRequest in_force_;
  std::shared_ptr<const KernelFilter> filter_;  // nullptr: every kernel records
  // per slot, published once when the kernel registers (release), read by the tool thread
  struct SlotNames {
    std::string mangled, demangled;
  };
  std::unique_ptr<std::atomic<const SlotNames*>[]> slot_names_;
  std::vector<std::unique_ptr<SlotNames>> slot_names_storage_;  // owns them (config_mutex_)
  std::vector<Binding> bindings_;
  std::unordered_map<CUmodule, std::vector<CUfunction>> module_functions_;  // registered, per module

  GraphExecs graph_execs_;            // live graph execs: whether their nodes are known
  std::atomic<uint64_t> replays_{0};  // graph replays numbered so far, in every context
  std::atomic<bool> publish_requested_{false};
  std::atomic<bool> entry_pcs_stale_{false};  // a kernel registered since: its first pc to the device
  std::atomic<bool> flags_stale_{false};      // a slot's config word in device memory needs rewriting
  std::atomic<bool> stopping_{false};
  std::thread control_thread_;
  std::once_flag control_once_;
};

}  // namespace gpuobs
