// The injector: Compute Sanitizer callbacks in, segment and device state out. One instance per
// process, created by InitializeInjection and never destroyed (the driver may call back until
// the very end).
//
// Threads: the program's own threads run the callbacks (module loads, launches, graph
// launches); the tool thread (control_thread.cpp) applies control requests and publishes
// counters. Nothing on the launch path takes a lock or makes a CUDA call, except the first
// launch of a function (registration) and the first launch after a config change (one copy).
#pragma once

#include <sanitizer.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "device_context.h"
#include "function_slots.h"
#include "gpuobs/cubin_store.h"
#include "gpuobs/host_writer.h"
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

class Injector {
 public:
  Injector();
  bool subscribe();
  void shutdown();  // at exit: stop the tool thread, last publish, mark the segment exited
  // Host annotations from the served program (the vLLM plugin, through the C functions below):
  // 0 recorded, 1 a record was dropped (counted), -1 not observing (no segment).
  int record_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                  uint32_t flags);
  int set_label(const char* label);

 private:
  static void SANITIZERAPI callback(void* userdata, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                                    const void* cbdata);
  // the counter word that times callbacks of this domain; nullptr before the segment exists
  uint64_t* callback_timer(Sanitizer_CallbackDomain domain);
  void dispatch(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* cbdata);

  // resource callbacks
  void on_context_created(const Sanitizer_ResourceContextData& data);
  void on_context_destroying(const Sanitizer_ResourceContextData& data);
  void on_module_loaded(const Sanitizer_ResourceModuleData& data);
  // launch callbacks
  void on_launch(const Sanitizer_LaunchData& launch, LaunchKind kind, const GraphPosition& position);
  void on_graph_launch(const Sanitizer_GraphLaunchData& data);
  void on_graph_exec(const Sanitizer_GraphExecData& data, LaunchKind kind);

  bool ensure_segment();
  DeviceContext* context_for(CUcontext context);
  int64_t slot_for(const Sanitizer_LaunchData& launch, DeviceContext* context);

  // control thread (control_thread.cpp)
  void control_loop();
  void apply_request(const ControlRequest& request);
  void stage_locked();
  void publish();
  std::vector<uint8_t> capture_for_all_locked();
  bool captured_locked(uint32_t slot);

  InjectorConfig config_;
  Patcher patcher_;
  CubinStore cubins_;
  Sanitizer_SubscriberHandle subscriber_ = nullptr;

  std::mutex segment_mutex_;
  std::atomic<bool> segment_ready_{false};
  bool segment_failed_ = false;
  std::unique_ptr<SegmentWriter> writer_;

  static constexpr uint32_t kMaxContexts = 64;
  std::mutex contexts_mutex_;                      // creation only; lookups are lock-free
  std::unique_ptr<DeviceContext> context_storage_[kMaxContexts];
  std::atomic<DeviceContext*> contexts_[kMaxContexts] = {};
  std::atomic<uint32_t> context_count_{0};

  FunctionSlots function_slots_;
  std::unique_ptr<std::atomic<uint8_t>[]> slot_patched_;  // per slot: its module is patched
  std::unique_ptr<std::atomic<uint8_t>[]> slot_captured_;  // per slot: the kernel filter lets it record

  // config in force (guarded by config_mutex_; never taken on the launch path)
  std::mutex config_mutex_;
  ControlRequest in_force_;
  std::unique_ptr<std::regex> filter_;
  std::vector<std::string> slot_names_;  // mangled, then demangled, per slot (2 entries each)
  uint64_t device_generation_ = 0;

  std::atomic<int64_t> live_graph_execs_{0};
  std::atomic<bool> publish_requested_{false};
  std::atomic<bool> stopping_{false};
  std::thread control_thread_;
  std::once_flag control_once_;
};

}  // namespace gpuobs
