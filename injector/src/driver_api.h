// The few CUDA driver entry points the injector calls itself, resolved at run time from the
// libcuda the served process already loaded (cuGetProcAddress picks the right ABI version), so
// the library links against nothing but libsanitizer-public and builds without a driver.
#pragma once

#include <cuda.h>

namespace gpuobs {

struct DriverApi {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_push_current)(CUcontext) = nullptr;
  CUresult (*ctx_pop_current)(CUcontext*) = nullptr;
  CUresult (*mem_host_register)(void*, size_t, unsigned int) = nullptr;
  CUresult (*mem_host_get_device_pointer)(CUdeviceptr*, void*, unsigned int) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned int) = nullptr;
  CUresult (*thread_exchange_stream_capture_mode)(CUstreamCaptureMode*) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  // Optional (nullptr when this driver lacks them): naming and listing functions at load.
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;
  CUresult (*module_get_loading_mode)(CUmoduleLoadingMode*) = nullptr;
  CUresult (*module_get_function_count)(unsigned int*, CUmodule) = nullptr;
  CUresult (*module_enumerate_functions)(CUfunction*, unsigned int, CUmodule) = nullptr;
  // ... and naming the GPU of each context
  CUresult (*device_get_pci_bus_id)(char*, int, CUdevice) = nullptr;
  CUresult (*device_get_uuid)(CUuuid*, CUdevice) = nullptr;
  // ... and the graph a stream is capturing, with its nodes (op labels for graph nodes)
  decltype(&::cuStreamGetCaptureInfo) stream_get_capture_info = nullptr;  // the ABI of this cuda.h
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*graph_node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;

  bool loaded = false;
  // Resolves every required entry point; false (and the name that failed in *missing) otherwise.
  bool load(const char** missing);
  const char* error_text(CUresult result) const;
};

DriverApi& driver();

// The capture `stream` is in: its id (unique per capture) and the graph it builds; false when
// the stream is not capturing or the driver cannot say.
bool stream_capture(CUstream stream, uint64_t* capture_id, CUgraph* graph);

// Makes `context` current on this thread for the scope (no-op when it already is).
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  bool ok() const { return ok_; }

 private:
  bool pushed_ = false;
  bool ok_ = false;
};

}  // namespace gpuobs
