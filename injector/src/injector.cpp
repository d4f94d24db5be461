#include "injector.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_set>
#include <vector>

#include "driver_api.h"
#include "gpuobs/shm_segment.h"
#include "injector_log.h"
#include "steady_callbacks.h"

namespace gpuobs {
namespace {

// Set on the tool thread: the CUDA calls it makes must not feed back into our own callbacks.
thread_local bool t_tool_thread = false;
// The graph launch this thread is inside (between GRAPHS_LAUNCH_BEGIN and _END): its node
// launch callbacks come on the same thread and take the replay number from here.
struct GraphLaunchInProgress {
  uint64_t graph_exec = 0;
  uint64_t replay = 0;
  bool recorded = false;                    // its node launches are written (the graph launch record says so)
  uint32_t nodes = 0;                       // node launch callbacks seen
  DeviceContext* context = nullptr;         // where its number was pushed (replay != 0) ...
  Sanitizer_StreamHandle stream = nullptr;  // ... on this stream: its end follows it there
};
thread_local GraphLaunchInProgress t_graph_launch;

// How often a launch looks again for a slot another thread is registering (a yield each).
constexpr int kPendingSlotTries = 1000;

uint64_t grid_blocks(const Sanitizer_LaunchData& launch) {
  return uint64_t(launch.gridDim_x) * launch.gridDim_y * launch.gridDim_z;
}

void count(uint64_t* word, uint64_t delta = 1) { __atomic_fetch_add(word, delta, __ATOMIC_RELAXED); }

// Adds the wall time of a scope to a counter word (nullptr: not timed, e.g. before the segment exists).
class ScopedTimer {
 public:
  explicit ScopedTimer(uint64_t* word) : word_(word), start_(word ? monotonic_ns() : 0) {}
  ~ScopedTimer() {
    if (word_) count(word_, monotonic_ns() - start_);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  uint64_t* word_;
  uint64_t start_;
};

// GPUOBS_MEMORY_KERNELS compiled (checked when the settings were read); nullptr when unset, or
// in the memory patch set, where every module gets the access hooks anyway.
std::shared_ptr<const KernelFilter> compile_memory_kernels(const InjectorConfig& config) {
  if (config.memory_kernels.empty() || config.patch_set == PatchSet::Memory) return nullptr;
  auto filter = std::make_shared<KernelFilter>();
  if (!KernelFilter::compile(config.memory_kernels, filter.get()).empty()) return nullptr;
  return filter;
}

}  // namespace

void mark_tool_thread() { t_tool_thread = true; }

Injector::Injector()
    : config_(load_injector_config()),
      patcher_(config_.patch_set, config_.block_exit, config_.diagnostics, compile_memory_kernels(config_)),
      annotations_(config_.launch_trace,
                   [this](bool on) {
                     // never off while need_launch_callbacks wants them for good
                     enable_callback(SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CBID_LAUNCH_BEGIN, on,
                                     on ? nullptr : &launch_callbacks_);
                   }),
      cubins_(config_.cubin_dir, uint64_t(config_.cubin_mb) << 20, config_.group, config_.cubin_dir_default),
      function_slots_(1u << 16) {
  in_force_.mode = config_.mode;
  in_force_.shift = config_.shift;
  in_force_.patch_set = config_.patch_set;
  config_word_.store(make_config(config_.mode, config_.shift));
}

void Injector::enable_callback(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, bool enable,
                               const std::atomic<bool>* keep_on) {
  std::lock_guard<std::mutex> lock(callbacks_mutex_);
  if (stepped_aside_) return;
  // the flag is set before its setter's own enable takes this lock: either it is seen here, or
  // that enable comes after this call
  if (!enable && keep_on && keep_on->load(std::memory_order_acquire)) return;
  sanitizerEnableCallback(enable ? 1 : 0, subscriber_, domain, cbid);
}

int Injector::step_aside() {
  if (!config_.step_aside_allowed) return -2;  // a probe only: it ends observation
  {
    std::lock_guard<std::mutex> lock(callbacks_mutex_);
    if (stepped_aside_ || subscriber_ == nullptr) return 0;
    stepped_aside_ = true;  // no enable_callback from now on: the subscriber is going
  }
  // outside the lock: a callback on another thread may be waiting for it inside the Sanitizer
  const SanitizerResult result = sanitizerUnsubscribe(subscriber_);
  log_line(
      "stepping aside for a profiler: sanitizerUnsubscribe returned %d; patched kernels keep their patches, "
      "modules loaded from now on are not patched",
      int(result));
  return int(result);
}

bool Injector::subscribe() {
  const char* missing = "";
  if (!driver().load(&missing)) {
    log_line("CUDA driver entry point %s not found; not observing", missing);
    return false;
  }
  if (sanitizerSubscribe(&subscriber_, &Injector::callback, this) != SANITIZER_SUCCESS) {
    log_line("cannot subscribe to the sanitizer callbacks (another tool attached?); not observing");
    return false;
  }
  // Only what the steady state needs: every enabled callback id costs the served process, even
  // with an empty body (measured in vLLM serving). No launch callbacks, no synchronize ones.
  for (const CallbackId& id : kSteadyCallbacks) enable_callback(id.domain, id.cbid, true);
  // on until the first graph execs are learned: graphs are usually captured at start-up and
  // replayed at once, before the tool thread could turn the node callbacks on
  set_node_callbacks(true);
  if (config_.launch_trace) need_launch_callbacks(nullptr);
  return true;
}

void Injector::set_node_callbacks(bool on) {
  if (on) {
    if (graph_execs_.node_callbacks_on()) return;
    enable_callback(SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN, true);
    graph_execs_.say_node_callbacks_on();
    return;
  }
  if (!graph_execs_.say_node_callbacks_off(launch_callbacks_.load(std::memory_order_relaxed))) return;
  enable_callback(SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN, false);
}

void Injector::need_launch_callbacks(const char* why) {
  if (launch_callbacks_.exchange(true)) return;
  if (why) log_line("%s; kernel launches are counted by host callbacks from now on (slower)", why);
  enable_callback(SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CBID_LAUNCH_BEGIN, true);
  set_node_callbacks(true);
}

void SANITIZERAPI Injector::callback(void* userdata, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                                     const void* cbdata) {
  if (t_tool_thread) return;
  try {
    static_cast<Injector*>(userdata)->dispatch(domain, cbid, cbdata);
  } catch (...) {
    if (first_time(LogOnce::Internal)) log_line("internal error in a callback; that callback is skipped");
  }
}

uint64_t* Injector::callback_timer(Sanitizer_CallbackDomain domain) {
  if (!segment_ready_.load(std::memory_order_acquire)) return nullptr;
  GlobalCounters& counters = *writer_->view().counters;
  switch (domain) {
    case SANITIZER_CB_DOMAIN_RESOURCE:
      return &counters.resource_callback_ns;
    case SANITIZER_CB_DOMAIN_LAUNCH:
      return &counters.launch_callback_ns;
    case SANITIZER_CB_DOMAIN_GRAPHS:
      return &counters.graph_callback_ns;
    default:
      return nullptr;
  }
}

void Injector::dispatch(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* cbdata) {
  ScopedTimer timer(callback_timer(domain));
  switch (domain) {
    case SANITIZER_CB_DOMAIN_RESOURCE:
      if (cbid == SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED) {
        on_context_created(*static_cast<const Sanitizer_ResourceContextData*>(cbdata));
      } else if (cbid == SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        on_context_destroying(*static_cast<const Sanitizer_ResourceContextData*>(cbdata));
      } else if (cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
        on_module_loaded(*static_cast<const Sanitizer_ResourceModuleData*>(cbdata));
      } else if (cbid == SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
        on_module_unloading(static_cast<const Sanitizer_ResourceModuleData*>(cbdata)->module);
      } else if (cbid == SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED) {
        const auto& data = *static_cast<const Sanitizer_ResourceFunctionsLazyLoadedData*>(cbdata);
        on_functions_loaded(data.context, data.module, data.functions, data.numFunctions);
      }
      break;
    case SANITIZER_CB_DOMAIN_LAUNCH:
      if (cbid == SANITIZER_CBID_LAUNCH_BEGIN)
        on_launch(*static_cast<const Sanitizer_LaunchData*>(cbdata), LaunchKind::Eager, GraphPosition{});
      break;
    case SANITIZER_CB_DOMAIN_GRAPHS:
      if (cbid == SANITIZER_CBID_GRAPHS_GRAPHEXEC_CREATED) {
        on_graph_exec(*static_cast<const Sanitizer_GraphExecData*>(cbdata), LaunchKind::GraphExecCreated);
      } else if (cbid == SANITIZER_CBID_GRAPHS_GRAPHEXEC_DESTROYING) {
        on_graph_exec(*static_cast<const Sanitizer_GraphExecData*>(cbdata), LaunchKind::GraphExecDestroyed);
      } else if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN) {
        on_graph_launch(*static_cast<const Sanitizer_GraphLaunchData*>(cbdata));
      } else if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_END) {
        on_graph_launch_end();
      } else if (cbid == SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN) {
        const auto& node = *static_cast<const Sanitizer_GraphNodeLaunchData*>(cbdata);
        const uint64_t graph_exec = reinterpret_cast<uint64_t>(node.graphExec);
        if (node.nodeType == CU_GRAPH_NODE_TYPE_KERNEL && !node.isGraphUpload && t_graph_launch.recorded &&
            t_graph_launch.graph_exec == graph_exec) {
          ++t_graph_launch.nodes;
          GraphPosition position;
          position.graph_exec = graph_exec;
          position.graph_node = reinterpret_cast<uint64_t>(node.node);
          position.launch_id = node.launchId;
          position.replay = t_graph_launch.replay;
          on_launch(node.launchData, LaunchKind::GraphNode, position);
        }
      }
      break;
    default:
      break;
  }
}

bool Injector::ensure_segment() {
  if (segment_ready_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(segment_mutex_);
  if (segment_ready_.load(std::memory_order_acquire)) return true;
  if (segment_failed_) return false;
  SegmentOptions options;
  options.directory = config_.segment_dir;
  options.caps.event_rings = config_.contexts;
  options.caps.event_ring_records = config_.ring_records;
  options.producer_kind = ProducerKind::Injector;
  options.patch_set = config_.patch_set;
  options.initial_mode = config_.mode;
  options.initial_shift = config_.shift;
  options.group = config_.group;
  options.producer = "gpuobs-injector";
  options.label = config_.label;
  if (patcher_.chooses_modules()) options.memory_kernels = config_.memory_kernels;
  if (config_.cubin_mb > 0) options.cubin_dir = config_.cubin_dir;
  options.producer_flags =
      (config_.block_exit ? uint32_t(kBlockExitsHooked) : 0u) | (config_.launch_trace ? uint32_t(kLaunchTrace) : 0u);
  std::string error;
  std::unique_ptr<SegmentWriter> writer = start_producer(options, in_force_.filter, &error);
  if (!writer) {
    segment_failed_ = true;
    log_line("no segment (%s); the program runs unobserved", error.c_str());
    return false;
  }
  // The whole segment, pinned and mapped for every context: the device writes events into it.
  MappedSegment& segment = writer->segment();
  const CUresult registered = driver().mem_host_register(segment.view().base, segment.bytes(),
                                                         CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  if (registered != CUDA_SUCCESS && registered != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    segment_failed_ = true;
    log_line(
        "cannot register the segment with CUDA (%s; is %s on a tmpfs such as /dev/shm?); the program runs "
        "unobserved",
        driver().error_text(registered), config_.segment_dir.c_str());
    segment.unlink_file();
    return false;
  }
  writer_ = std::move(writer);
  const uint32_t slots = writer_->view().caps.kernel_slots;
  slot_on_device_.reset(new std::atomic<uint8_t>[slots]());
  slot_names_.reset(new std::atomic<const SlotNames*>[slots]());
  slot_captured_.reset(new std::atomic<uint8_t>[slots]());
  slot_entry_pc_.reset(new std::atomic<uint64_t>[slots]());
  slot_access_hooked_.reset(new std::atomic<uint8_t>[slots]());
  host_counted_.reset(new HostCounted[slots]);
  for (uint32_t slot = 0; slot < slots; ++slot) slot_captured_[slot].store(1);
  log_line("observing into %s (patch set %s, mode %s%s%s%s)", writer_->segment().path().c_str(),
           patch_set_name(config_.patch_set), mode_name(config_.mode), config_.launch_trace ? ", launch trace" : "",
           patcher_.chooses_modules() ? ", access hooks for " : "",
           patcher_.chooses_modules() ? config_.memory_kernels.c_str() : "");
  segment_ready_.store(true, std::memory_order_release);
  annotations_.attach(writer_.get());
  return true;
}

// The GPU a new context runs on, named as nvidia-smi names it, into the segment's header.
void Injector::record_gpu(uint32_t context_index, CUdevice device) {
  char pci[16] = "";
  if (!driver().device_get_pci_bus_id || driver().device_get_pci_bus_id(pci, sizeof(pci), device) != CUDA_SUCCESS)
    pci[0] = '\0';
  char uuid[48] = "";
  CUuuid id{};
  if (driver().device_get_uuid && driver().device_get_uuid(&id, device) == CUDA_SUCCESS) {
    const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  }
  writer_->add_gpu(context_index, uint32_t(device), pci, uuid);
}

void Injector::on_context_created(const Sanitizer_ResourceContextData& data) {
  if (!ensure_segment()) return;
  ScopedContext current(data.context);
  std::string error;
  if (!patcher_.load_patches(data.context, config_.patch_file, &error)) {
    count(&writer_->view().counters->patch_failures);
    if (first_time(LogOnce::PatchLoad)) log_line("%s; kernels run unpatched", error.c_str());
    need_launch_callbacks(nullptr);  // before any module of this context loads: no launch missed
  }
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  const uint32_t index = context_count_.load(std::memory_order_relaxed);
  if (index >= writer_->view().caps.event_rings || index >= kMaxContexts) {
    if (first_time(LogOnce::Internal))
      log_line("more CUDA contexts than event rings (%u); raise GPUOBS_CONTEXTS", writer_->view().caps.event_rings);
    return;
  }
  uint32_t initial_flags = 0;
  {
    std::lock_guard<std::mutex> config_lock(config_mutex_);
    initial_flags =
        kernel_flags(make_config(in_force_.mode, in_force_.shift), true, patcher_.set() == PatchSet::Memory);
  }
  auto state = DeviceContext::create(data.context, index, *writer_, initial_flags, &error);
  if (!state) {
    log_line("context %u: %s; its kernels run unobserved", index, error.c_str());
    return;
  }
  record_gpu(index, data.device);
  context_storage_[index] = std::move(state);
  contexts_[index].store(context_storage_[index].get(), std::memory_order_release);
  context_count_.store(index + 1, std::memory_order_release);
  // A switch (or a filter) since initial_flags was read reaches this context through the tool
  // thread: not from here, where a wait on the driver could deadlock with it.
  flags_stale_.store(true, std::memory_order_release);
  std::call_once(control_once_, [this] { control_thread_ = std::thread([this] { control_loop(); }); });
}

void Injector::on_context_destroying(const Sanitizer_ResourceContextData& data) {
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  DeviceContext* context = context_for(data.context);
  if (!context) return;
  // Its counters, read once more while the context lives, stay published from that copy.
  ScopedContext current(data.context);
  std::string error;
  const uint32_t kernel_count = __atomic_load_n(&writer_->view().header->kernel_count, __ATOMIC_ACQUIRE);
  std::vector<ReplaySpanFound> last_spans;
  if (!context->retire(kernel_count, &last_spans, &error) && first_time(LogOnce::Internal))
    log_line("a context's last counters: %s", error.c_str());
  for (const ReplaySpanFound& span : last_spans)
    if (!writer_->write_replay_span(span, context->ring_index())) ++replay_spans_unwritten_;
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    bindings_.erase(std::remove_if(bindings_.begin(), bindings_.end(),
                                   [context](const Binding& binding) { return binding.context == context; }),
                    bindings_.end());
  }
  publish_requested_.store(true, std::memory_order_relaxed);
}

void Injector::on_module_loaded(const Sanitizer_ResourceModuleData& data) {
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  GlobalCounters& counters = *writer_->view().counters;
  count(&counters.modules_loaded);
  // The cubin first, so that PCs of this module can be symbolised later by another process.
  if (config_.cubin_mb > 0) {
    std::string why;
    ScopedTimer timer(&counters.cubin_ns);
    if (cubins_.keep(reinterpret_cast<uint64_t>(data.module), data.pCubin, data.cubinSize, &why)) {
      count(&counters.cubins_kept);
    } else {
      count(&counters.cubins_skipped);
      if (first_time(LogOnce::Cubin)) log_line("a module's cubin was not kept (%s)", why.c_str());
    }
  }
  std::string error, note;
  bool patched = false;
  {
    ScopedTimer timer(&counters.patch_ns);
    patched = patcher_.patch_module(data.context, data.module, data.pCubin, data.cubinSize, &error, &note);
  }
  if (!note.empty() && first_time(LogOnce::MemoryKernels))
    log_line("%s; GPUOBS_MEMORY_KERNELS cannot choose it", note.c_str());
  if (patched) {
    count(&counters.modules_patched);
    if (patcher_.hooks_accesses(data.module)) count(&counters.modules_access_hooked);
  } else {
    count(&counters.patch_failures);
    if (first_time(LogOnce::PatchModule))
      log_line("a module could not be patched (%s); it runs unpatched", error.c_str());
    need_launch_callbacks("a module could not be patched");
  }
  // Loaded lazily, a module's functions arrive in FUNCTIONS_LAZY_LOADED; loaded eagerly, they
  // are all here now and are bound before anything can launch them.
  DriverApi& api = driver();
  CUmoduleLoadingMode loading = CU_MODULE_LAZY_LOADING;
  if (api.module_get_loading_mode && api.module_get_loading_mode(&loading) == CUDA_SUCCESS &&
      loading == CU_MODULE_EAGER_LOADING) {
    unsigned int functions = 0;
    if (!api.module_get_function_count || !api.module_enumerate_functions ||
        api.module_get_function_count(&functions, data.module) != CUDA_SUCCESS) {
      need_launch_callbacks("this driver cannot list a module's functions");
      return;
    }
    std::vector<CUfunction> listed(functions);
    if (functions && api.module_enumerate_functions(listed.data(), functions, data.module) != CUDA_SUCCESS) {
      need_launch_callbacks("a module's functions could not be listed");
      return;
    }
    on_functions_loaded(data.context, data.module, listed.data(), uint32_t(listed.size()));
  }
}

void Injector::on_module_unloading(CUmodule module) {
  patcher_.forget(module);
  cubins_.forget(reinterpret_cast<uint64_t>(module));
  std::lock_guard<std::mutex> lock(config_mutex_);
  bindings_.erase(std::remove_if(bindings_.begin(), bindings_.end(),
                                 [module](const Binding& binding) { return binding.module == module; }),
                  bindings_.end());
  // The driver may hand these handles to new functions: they must be registered afresh.
  auto functions = module_functions_.find(module);
  if (functions == module_functions_.end()) return;
  for (CUfunction function : functions->second) function_slots_.forget(reinterpret_cast<uint64_t>(function));
  module_functions_.erase(functions);
}

void Injector::on_functions_loaded(CUcontext context, CUmodule module, const CUfunction* functions, uint32_t count) {
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  for (uint32_t index = 0; index < count; ++index) slot_of(context, module, functions[index], nullptr);
}

DeviceContext* Injector::context_for(CUcontext context) {
  const uint32_t count_now = context_count_.load(std::memory_order_acquire);
  for (uint32_t index = 0; index < count_now; ++index) {
    DeviceContext* candidate = contexts_[index].load(std::memory_order_acquire);
    if (candidate && !candidate->retired() && candidate->context() == context) return candidate;
  }
  return nullptr;
}

int64_t Injector::slot_of(CUcontext context, CUmodule module, CUfunction function, const char* name) {
  const auto make = [&](uint64_t) { return register_function(context, module, function, name); };
  int64_t slot = function_slots_.find_or_add(reinterpret_cast<uint64_t>(function), make);
  // Another thread registers this function right now (its first launch races ours, or its lazy
  // load): its slot is published when that registration returns. Waited for a short, bounded
  // while; a launch still without a slot after it goes unattributed (counted), and no more.
  for (int tries = 0; slot == FunctionSlots::kPending && tries < kPendingSlotTries; ++tries) {
    std::this_thread::yield();
    slot = function_slots_.find_or_add(reinterpret_cast<uint64_t>(function), make);
  }
  if (slot == FunctionSlots::kFull && first_time(LogOnce::KernelTable))
    log_line("function table full; further kernels go unattributed");
  // No slot (a table full, a failed registration): no device counters for it; the host's launch
  // callbacks count its launches as unattributed from now on. A registration still under way is
  // not that: it must not turn host counting on for good.
  if (slot < 0 && slot != FunctionSlots::kPending) need_launch_callbacks("a kernel has no slot");
  return slot;
}

uint64_t Injector::userdata_of(const Binding& binding, uint32_t flags) const {
  const uint64_t address = reinterpret_cast<uint64_t>(binding.context->slot_address(binding.slot));
  if (config_.bound_config) return bound_userdata(address, flags);
  // a diagnostic patch (GPUOBS_DEBUG_PATCHES=load_context) finds its context from the slot index
  if (config_.diagnostics.slot_index_in_userdata) return slot_userdata(address, binding.slot);
  // the slot (the patch reads the word), and whether its module has the access hooks by choice
  return address | (binding.access_hooks_chosen ? kUserdataAccessHooked : 0);
}

int64_t Injector::register_function(CUcontext context, CUmodule module, CUfunction function, const char* name) {
  const char* driver_name = nullptr;
  if (name == nullptr && driver().func_get_name && driver().func_get_name(&driver_name, function) == CUDA_SUCCESS)
    name = driver_name;
  const std::string mangled = name ? name : "<unnamed>";
  const uint64_t cubin = cubins_.hash_of(reinterpret_cast<uint64_t>(module));
  // The function's first instruction: where its block-entry patch runs (its block events carry
  // it) and, with the cubin kept, what a PC is symbolised against.
  uint64_t entry_pc = 0;
  uint64_t function_size = 0;
  if (name != nullptr && sanitizerGetFunctionPcAndSize(module, name, &entry_pc, &function_size) != SANITIZER_SUCCESS)
    entry_pc = 0;
  const uint64_t function_pc = cubin != 0 ? entry_pc : 0;
  DeviceContext* device = context_for(context);
  const bool patched = patcher_.is_patched(module);
  const bool access_hooked = patcher_.hooks_accesses(module);
  const uint32_t entry_flags = patcher_.chosen(module) ? uint32_t(kKernelAccessHooksChosen) : 0u;
  bool on_device = false;
  int64_t slot = -1;
  {
    std::lock_guard<std::mutex> lock(config_mutex_);
    slot = writer_->register_kernel(reinterpret_cast<uint64_t>(function), reinterpret_cast<uint64_t>(module), mangled,
                                    cubin, function_pc, entry_flags);
    if (slot < 0) {
      if (first_time(LogOnce::KernelTable)) log_line("kernel table full; further kernels go unattributed");
      return slot;
    }
    slot_names_storage_.push_back(std::make_unique<SlotNames>(SlotNames{mangled, demangle(mangled)}));
    slot_names_[slot].store(slot_names_storage_.back().get(), std::memory_order_release);
    module_functions_[module].push_back(function);
    // No filter search here, inside the driver on a kernel's first launch: the tool thread
    // judges the kernel (its slot says captured meanwhile).
    const bool captured = slot_captured_[slot].load(std::memory_order_relaxed) != 0;
    // the tool thread writes the slot's first pc (and, with a filter, its verdict) to the device
    slot_entry_pc_[slot].store(entry_pc, std::memory_order_relaxed);
    slot_access_hooked_[slot].store(access_hooked ? 1 : 0, std::memory_order_relaxed);
    entry_pcs_stale_.store(true, std::memory_order_release);
    // a slot's word says so (written for every slot before it registered: hooked only in the memory set)
    if (filter_ || access_hooked != (patcher_.set() == PatchSet::Memory))
      flags_stale_.store(true, std::memory_order_release);
    // the slot's address must fit below the config bits of a bound userdata
    if (patched && device && (reinterpret_cast<uint64_t>(device->slot_address(uint32_t(slot))) >> 48) == 0) {
      // Bound to the function for its whole life: exact under graph replay (measured on the H200: a graph exec keeps
      // the userdata of its first launch).
      const Binding binding{function, module, uint32_t(slot), device, entry_flags != 0};
      const uint32_t flags = kernel_flags(make_config(in_force_.mode, in_force_.shift), captured, access_hooked);
      on_device =
          sanitizerSetCallbackData(function, reinterpret_cast<void*>(userdata_of(binding, flags))) == SANITIZER_SUCCESS;
      if (on_device) bindings_.push_back(binding);
    }
    slot_on_device_[slot].store(on_device ? 1 : 0, std::memory_order_release);
  }
  if (patched && device && !on_device) {
    if (first_time(LogOnce::PatchModule)) log_line("cannot bind device data to a kernel; it runs uncounted");
    need_launch_callbacks("a kernel could not be bound to its counters");
  } else if (!on_device) {
    need_launch_callbacks(patched ? "a kernel's context has no event ring" : nullptr);
  }
  return slot;
}

void Injector::on_launch(const Sanitizer_LaunchData& launch, LaunchKind kind, const GraphPosition& position) {
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  const int64_t slot = slot_of(launch.context, launch.module, launch.function, launch.functionName);
  if (slot < 0) {
    __atomic_fetch_add(&writer_->view().counters->launches_unattributed, 1, __ATOMIC_RELAXED);
  } else if (!slot_on_device_[slot].load(std::memory_order_acquire)) {
    host_counted_[slot].launches.fetch_add(1, std::memory_order_relaxed);
    host_counted_[slot].blocks.fetch_add(grid_blocks(launch), std::memory_order_relaxed);
  }
  // Eager launches leave a record only in the launch trace; node launches whenever their replay
  // is recorded (the graph launch record says so).
  if (kind == LaunchKind::Eager && !annotations_.traces_eager_launches()) return;
  const uint64_t config = config_word_.load(std::memory_order_relaxed);
  DeviceContext* context = context_for(launch.context);
  LaunchRecord record{};
  record.host_time_ns = monotonic_ns();
  record.grid_id = launch.gridId;
  record.stream = reinterpret_cast<uint64_t>(launch.stream);
  record.graph_exec = position.graph_exec;
  record.graph_node = position.graph_node;
  record.graph_launch_id = position.launch_id;
  record.replay = position.replay;
  record.kernel_slot = slot >= 0 ? uint32_t(slot) : UINT32_MAX;
  record.grid_x = launch.gridDim_x;
  record.grid_y = launch.gridDim_y;
  record.grid_z = launch.gridDim_z;
  record.block_x = launch.blockDim_x;
  record.block_y = launch.blockDim_y;
  record.block_z = launch.blockDim_z;
  record.context_index = context ? context->ring_index() : UINT32_MAX;
  record.kind = uint32_t(kind);
  record.mode = config_mode(config);
  record.shift = config_shift(config);
  record.flags = slot >= 0 && slot_captured_[slot].load(std::memory_order_relaxed) ? kLaunchCaptured : 0;
  if (kind == LaunchKind::Eager) {  // the callback runs on the launching thread
    record.thread = current_thread_id();
    record.op = HostAnnotations::current_op();
  }
  writer_->write_launch(record);
}

void Injector::on_graph_launch(const Sanitizer_GraphLaunchData& data) {
  // the replay before on this thread never reached its end callback: not in flight any more
  if (t_graph_launch.recorded) graph_execs_.abandon_replay();
  t_graph_launch = GraphLaunchInProgress{};
  if (!segment_ready_.load(std::memory_order_acquire) || data.isGraphUpload) return;
  const uint64_t graph_exec = reinterpret_cast<uint64_t>(data.graphExec);
  DeviceContext* context = context_for(data.context);
  const uint64_t config = config_word_.load(std::memory_order_acquire);
  LaunchRecord record = graph_event_record(LaunchKind::GraphLaunch, graph_exec);
  record.stream = reinterpret_cast<uint64_t>(data.stream);
  record.mode = config_mode(config);
  record.shift = config_shift(config);
  // Recorded node by node only when the node callbacks were on before this launch began (the
  // tool thread turns them on and off, never a callback): then every node of it is seen.
  const bool recorded = graph_execs_.begin_replay(graph_exec, launch_callbacks_.load(std::memory_order_relaxed));
  if (recorded) record.flags |= kGraphNodesRecorded;
  if (context) {
    record.context_index = context->ring_index();
    // The replay's number, pushed to the device ahead of its nodes in every mode: a switch lands
    // while replays are queued, so the mode the host saw at launch need not be the one the
    // nodes run in, and events must carry their own replay's number whenever they are made.
    const uint64_t replay = replays_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (context->push_replay(data.hStream, replay)) record.replay = replay;
  }
  t_graph_launch = GraphLaunchInProgress{graph_exec, record.replay, recorded, 0, context, data.hStream};
  writer_->write_launch(record);
}

void Injector::on_graph_launch_end() {
  const GraphLaunchInProgress finished = t_graph_launch;
  t_graph_launch = GraphLaunchInProgress{};
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  if (config_.replay_spans && finished.replay && finished.context &&
      !finished.context->end_replay(finished.stream, finished.replay) && first_time(LogOnce::Internal))
    log_line("copying a replay's end to the device failed: its span may take in the launches after it");
  if (finished.recorded) graph_execs_.end_replay(finished.graph_exec);
}

void Injector::manage_node_callbacks() {
  if (launch_callbacks_.load(std::memory_order_relaxed)) return;  // on for good
  const GraphExecs::Want want = graph_execs_.wanted();
  if (want != GraphExecs::Want::Leave) set_node_callbacks(want == GraphExecs::Want::On);
}

void Injector::on_graph_exec(const Sanitizer_GraphExecData& data, LaunchKind kind) {
  if (!segment_ready_.load(std::memory_order_acquire)) return;
  const uint64_t graph_exec = reinterpret_cast<uint64_t>(data.graphExec);
  if (kind == LaunchKind::GraphExecCreated) graph_execs_.created(graph_exec);
  else graph_execs_.destroyed(graph_exec);
  LaunchRecord record = graph_event_record(kind, graph_exec);
  // the graph it was made from: the nodes an op captured into that graph are this exec's nodes
  if (kind == LaunchKind::GraphExecCreated) record.graph_node = reinterpret_cast<uint64_t>(data.graph);
  writer_->write_launch(record);
}

void Injector::shutdown() {
  if (stopping_.exchange(true)) return;
  if (control_thread_.joinable()) control_thread_.join();
  if (segment_ready_.load(std::memory_order_acquire)) writer_->segment().mark_exited();
}

}  // namespace gpuobs
