// The repatch tool, for the benchmarks' questions only: a Compute Sanitizer subscriber that
// patches every module with a counting block-entry patch when it loads, and unpatches or
// re-patches every module when the program it is injected into asks, graph execs alive or not
// (gpuobs refuses a switch of patch set while any exec lives). With it a program can record what
// an exec instantiated before such a change runs afterwards (tests/gpu/test_graph_repatch.py).
// Injected like gpuobs (CUDA_INJECTION64_PATH); the program finds these two functions with
// dlopen(RTLD_NOLOAD) and dlsym once CUDA is initialised:
//
//   int gpuobs_repatch_bind(void* counters)  device memory of three uint64 counters
//        (repatch_patches.cu says which patch counts in which), bound as the userdata of every
//        function loaded so far and of every one loaded later. Returns the failures.
//   int gpuobs_repatch(const char* action)   `unpatch` every module (sanitizerUnpatchModule),
//        or `patch:a` / `patch:b` every module with that set (sanitizerPatchInstructions for each
//        of its hooks, then sanitizerPatchModule); modules loaded later get the same. Run on a
//        thread of its own, as gpuobs's tool thread switches sets. Returns the failed calls, -1
//        for an unknown action.
//
//   GPUOBS_REPATCH_FILE  the patch fatbin (default: gpuobs_repatch_patches.fatbin beside this library)
//
// Lazily loaded functions are bound as they load (FUNCTIONS_LAZY_LOADED); run the program with
// CUDA_MODULE_LOADING=LAZY.
#include <dlfcn.h>
#include <sanitizer.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../tool_library.h"

namespace {

struct Hook {
  Sanitizer_InstructionId instruction;
  const char* function;
};

const Hook kSetA[] = {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_repatch_enter_a"}};
const Hook kSetB[] = {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_repatch_enter_b"},
                      {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "gpuobs_repatch_access_b"}};

// The Sanitizer's patching calls must be serialised; a callback may come in while an action runs.
std::recursive_mutex g_mutex;
Sanitizer_SubscriberHandle g_subscriber = nullptr;
std::string g_patch_file;
std::vector<CUmodule> g_modules;
std::vector<CUfunction> g_functions;
void* g_counters = nullptr;
char g_set = 'a';  // the set in force: 'a', 'b', or 0 (unpatched)

// Patches `module` with `set`; returns the calls that failed.
int patch(CUmodule module, char set) {
  int failed = 0;
  const Hook* begin = set == 'a' ? std::begin(kSetA) : std::begin(kSetB);
  const Hook* end = set == 'a' ? std::end(kSetA) : std::end(kSetB);
  for (const Hook* hook = begin; hook != end; ++hook)
    if (sanitizerPatchInstructions(hook->instruction, module, hook->function) != SANITIZER_SUCCESS) ++failed;
  if (sanitizerPatchModule(module) != SANITIZER_SUCCESS) ++failed;
  return failed;
}

int bind(CUfunction function) {
  if (!g_counters) return 0;
  return sanitizerSetCallbackData(function, g_counters) == SANITIZER_SUCCESS ? 0 : 1;
}

void SANITIZERAPI on_callback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* data) {
  if (domain != SANITIZER_CB_DOMAIN_RESOURCE) return;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (cbid == SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED) {
    const auto* context = static_cast<const Sanitizer_ResourceContextData*>(data);
    if (sanitizerAddPatchesFromFile(g_patch_file.c_str(), context->context) != SANITIZER_SUCCESS)
      std::fprintf(stderr, "repatch tool: cannot load %s\n", g_patch_file.c_str());
  } else if (cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
    const auto* module = static_cast<const Sanitizer_ResourceModuleData*>(data);
    g_modules.push_back(module->module);
    if (g_set && patch(module->module, g_set) != 0) std::fprintf(stderr, "repatch tool: a module did not patch\n");
  } else if (cbid == SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
    const auto* module = static_cast<const Sanitizer_ResourceModuleData*>(data);
    g_modules.erase(std::remove(g_modules.begin(), g_modules.end(), module->module), g_modules.end());
  } else if (cbid == SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED) {
    const auto* loaded = static_cast<const Sanitizer_ResourceFunctionsLazyLoadedData*>(data);
    for (uint32_t index = 0; index < loaded->numFunctions; ++index) {
      g_functions.push_back(loaded->functions[index]);
      if (bind(loaded->functions[index]) != 0) std::fprintf(stderr, "repatch tool: a function did not bind\n");
    }
  }
}

int act(const std::string& action) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  int failed = 0;
  if (action == "unpatch") {
    for (CUmodule module : g_modules)
      if (sanitizerUnpatchModule(module) != SANITIZER_SUCCESS) ++failed;
    g_set = 0;
  } else if (action == "patch:a" || action == "patch:b") {
    g_set = action.back();
    for (CUmodule module : g_modules) failed += patch(module, g_set);
  } else {
    return -1;
  }
  return failed;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int gpuobs_repatch_bind(void* counters) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_counters = counters;
  int failed = 0;
  for (CUfunction function : g_functions) failed += bind(function);
  return failed;
}

extern "C" __attribute__((visibility("default"))) int gpuobs_repatch(const char* action) {
  int result = -1;
  const std::string wanted = action ? action : "";
  std::thread worker([&result, &wanted] { result = act(wanted); });
  worker.join();
  return result;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (g_subscriber) return 1;
  if (sanitizerSubscribe(&g_subscriber, &on_callback, nullptr) != SANITIZER_SUCCESS) {
    std::fprintf(stderr, "repatch tool: cannot subscribe\n");
    return 1;
  }
  g_patch_file = gpuobs_bench::patch_file("GPUOBS_REPATCH_FILE", "gpuobs_repatch_patches.fatbin");
  for (Sanitizer_CallbackId cbid :
       {SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED, SANITIZER_CBID_RESOURCE_MODULE_LOADED,
        SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING, SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED})
    sanitizerEnableCallback(1, g_subscriber, SANITIZER_CB_DOMAIN_RESOURCE, cbid);
  return 1;
}
