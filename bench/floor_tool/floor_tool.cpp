// The floor tool, for the benchmarks only: a Compute Sanitizer subscriber whose callbacks do
// nothing, injected like gpuobs (CUDA_INJECTION64_PATH). What it costs a workload is what the
// Sanitizer API itself costs for the callback ids it enables, apart from anything gpuobs does
// in them, and, with an empty patch on every module, what an instrumented block costs.
//
//   GPUOBS_FLOOR_CALLBACKS  comma-separated DOMAIN or DOMAIN:CBID to enable, DOMAIN one of
//                           resource, launch, graphs, synchronize, CBID the callback id number
//                           of that domain (sanitizer_callbacks.h); a bare domain enables all
//                           of its ids; `steady` the ids gpuobs keeps enabled in steady state
//                           (injector/src/steady_callbacks.h), `steady-DOMAIN` those of them in
//                           DOMAIN only (steady-resource: the module and context ids, none of
//                           which fires per launch; steady-graphs: the exec ids and the one that
//                           fires per graph replay), so a benchmark can add them a part at a
//                           time. Empty: none.
//   GPUOBS_FLOOR_PATCH      1: put gpuobs_empty_block on every module's block entry (needs the
//                           context-creation and module-loaded callbacks, enabled for it)
//   GPUOBS_FLOOR_PATCH_FILE the patch fatbin (default: gpuobs_patches.fatbin beside this library)
#include <dlfcn.h>
#include <sanitizer.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../tool_library.h"
#include "steady_callbacks.h"

namespace {

Sanitizer_SubscriberHandle g_subscriber = nullptr;
bool g_patch = false;
std::string g_patch_file;

void SANITIZERAPI on_callback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* data) {
  if (!g_patch || domain != SANITIZER_CB_DOMAIN_RESOURCE) return;
  if (cbid == SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED) {
    const auto* context = static_cast<const Sanitizer_ResourceContextData*>(data);
    if (sanitizerAddPatchesFromFile(g_patch_file.c_str(), context->context) != SANITIZER_SUCCESS)
      std::fprintf(stderr, "floor tool: cannot load %s\n", g_patch_file.c_str());
  } else if (cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
    const auto* module = static_cast<const Sanitizer_ResourceModuleData*>(data);
    if (sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, module->module, "gpuobs_empty_block") ==
        SANITIZER_SUCCESS)
      sanitizerPatchModule(module->module);
  }
}

bool domain_of(const std::string& name, Sanitizer_CallbackDomain* out) {
  if (name == "resource") *out = SANITIZER_CB_DOMAIN_RESOURCE;
  else if (name == "launch") *out = SANITIZER_CB_DOMAIN_LAUNCH;
  else if (name == "graphs") *out = SANITIZER_CB_DOMAIN_GRAPHS;
  else if (name == "synchronize") *out = SANITIZER_CB_DOMAIN_SYNCHRONIZE;
  else return false;
  return true;
}

void enable(const char* list) {
  std::string items = list ? list : "";
  size_t start = 0;
  while (start < items.size()) {
    size_t comma = items.find(',', start);
    if (comma == std::string::npos) comma = items.size();
    const std::string item = items.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    if (item == "steady" || item.rfind("steady-", 0) == 0) {
      const bool every = item == "steady";
      Sanitizer_CallbackDomain only{};
      if (!every && !domain_of(item.substr(std::strlen("steady-")), &only)) {
        std::fprintf(stderr, "floor tool: unknown domain in %s\n", item.c_str());
        continue;
      }
      for (const gpuobs::CallbackId& id : gpuobs::kSteadyCallbacks)
        if (every || id.domain == only) sanitizerEnableCallback(1, g_subscriber, id.domain, id.cbid);
      continue;
    }
    const size_t colon = item.find(':');
    Sanitizer_CallbackDomain domain{};
    if (!domain_of(item.substr(0, colon), &domain)) {
      std::fprintf(stderr, "floor tool: unknown domain in %s\n", item.c_str());
      continue;
    }
    if (colon == std::string::npos) {
      sanitizerEnableDomain(1, g_subscriber, domain);
    } else {
      const Sanitizer_CallbackId cbid = Sanitizer_CallbackId(std::strtoul(item.c_str() + colon + 1, nullptr, 10));
      if (sanitizerEnableCallback(1, g_subscriber, domain, cbid) != SANITIZER_SUCCESS)
        std::fprintf(stderr, "floor tool: cannot enable %s\n", item.c_str());
    }
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (g_subscriber) return 1;
  if (sanitizerSubscribe(&g_subscriber, &on_callback, nullptr) != SANITIZER_SUCCESS) {
    std::fprintf(stderr, "floor tool: cannot subscribe\n");
    return 1;
  }
  const char* patch = std::getenv("GPUOBS_FLOOR_PATCH");
  g_patch = patch && std::strcmp(patch, "1") == 0;
  g_patch_file = gpuobs_bench::patch_file("GPUOBS_FLOOR_PATCH_FILE", "gpuobs_patches.fatbin");
  enable(std::getenv("GPUOBS_FLOOR_CALLBACKS"));
  if (g_patch) {
    sanitizerEnableCallback(1, g_subscriber, SANITIZER_CB_DOMAIN_RESOURCE,
                            SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED);
    sanitizerEnableCallback(1, g_subscriber, SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_MODULE_LOADED);
  }
  return 1;
}
