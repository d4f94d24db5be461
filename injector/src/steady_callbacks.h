// The callback ids the injector keeps enabled in steady state, one list for the injector and
// for the benchmarks' floor tool (which enables the same ids with empty bodies, so a benchmark
// shows what they cost apart from what gpuobs does in them). Every enabled id costs the served
// process even when its callback returns at once: none fires per kernel launch or per
// synchronize; two fire per graph replay (its launch begins: its number goes to the device ahead
// of its nodes; it ends: its end goes after them, for replay spans).
#pragma once

#include <sanitizer.h>

namespace gpuobs {

struct CallbackId {
  Sanitizer_CallbackDomain domain;
  Sanitizer_CallbackId cbid;
};

constexpr CallbackId kSteadyCallbacks[] = {
    {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED},
    {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING},
    {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_MODULE_LOADED},
    {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING},
    {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED},
    {SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_GRAPHEXEC_CREATED},
    {SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_GRAPHEXEC_DESTROYING},
    {SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN},
    {SANITIZER_CB_DOMAIN_GRAPHS, SANITIZER_CBID_GRAPHS_LAUNCH_END},
};

}  // namespace gpuobs
