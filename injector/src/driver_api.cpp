#include "driver_api.h"

#include <dlfcn.h>

namespace gpuobs {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

template <class Fn>
bool resolve(GetProcAddress get, const char* name, Fn* out, const char** missing) {
  void* address = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (get(name, &address, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !address) {
    *missing = name;
    return false;
  }
  *out = reinterpret_cast<Fn>(address);
  return true;
}

}  // namespace

bool DriverApi::load(const char** missing) {
  if (loaded) return true;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!library) library = dlopen("libcuda.so.1", RTLD_NOW);
  if (!library) {
    *missing = "libcuda.so.1";
    return false;
  }
  auto get = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
  if (!get) {
    *missing = "cuGetProcAddress_v2";
    return false;
  }
  // Only what is used: a required entry point the driver lacks turns the injector off.
  loaded = resolve(get, "cuCtxGetCurrent", &ctx_get_current, missing) &&
           resolve(get, "cuCtxPushCurrent", &ctx_push_current, missing) &&
           resolve(get, "cuCtxPopCurrent", &ctx_pop_current, missing) &&
           resolve(get, "cuMemHostRegister", &mem_host_register, missing) &&
           resolve(get, "cuMemHostGetDevicePointer", &mem_host_get_device_pointer, missing) &&
           resolve(get, "cuStreamCreate", &stream_create, missing) &&
           resolve(get, "cuThreadExchangeStreamCaptureMode", &thread_exchange_stream_capture_mode, missing) &&
           resolve(get, "cuGetErrorString", &get_error_string, missing);
  const char* optional = nullptr;
  if (!resolve(get, "cuFuncGetName", &func_get_name, &optional)) func_get_name = nullptr;
  if (!resolve(get, "cuModuleGetLoadingMode", &module_get_loading_mode, &optional)) module_get_loading_mode = nullptr;
  if (!resolve(get, "cuModuleGetFunctionCount", &module_get_function_count, &optional))
    module_get_function_count = nullptr;
  if (!resolve(get, "cuModuleEnumerateFunctions", &module_enumerate_functions, &optional))
    module_enumerate_functions = nullptr;
  if (!resolve(get, "cuDeviceGetPCIBusId", &device_get_pci_bus_id, &optional)) device_get_pci_bus_id = nullptr;
  if (!resolve(get, "cuDeviceGetUuid", &device_get_uuid, &optional)) device_get_uuid = nullptr;
  if (!resolve(get, "cuStreamGetCaptureInfo", &stream_get_capture_info, &optional)) stream_get_capture_info = nullptr;
  if (!resolve(get, "cuGraphGetNodes", &graph_get_nodes, &optional)) graph_get_nodes = nullptr;
  if (!resolve(get, "cuGraphNodeGetType", &graph_node_get_type, &optional)) graph_node_get_type = nullptr;
  return loaded;
}

bool stream_capture(CUstream stream, uint64_t* capture_id, CUgraph* graph) {
  const DriverApi& api = driver();
  if (!api.stream_get_capture_info) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  *graph = nullptr;
  // cuGetProcAddress gave the entry point of this header's CUDA_VERSION: with edge data from 12.3
#if CUDA_VERSION >= 12030
  const CUresult result = api.stream_get_capture_info(stream, &status, &id, graph, nullptr, nullptr, nullptr);
#else
  const CUresult result = api.stream_get_capture_info(stream, &status, &id, graph, nullptr, nullptr);
#endif
  *capture_id = id;
  return result == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE && *graph != nullptr;
}

const char* DriverApi::error_text(CUresult result) const {
  const char* text = nullptr;
  if (get_error_string && get_error_string(result, &text) == CUDA_SUCCESS && text) return text;
  return "unknown CUDA error";
}

DriverApi& driver() {
  static DriverApi api;
  return api;
}

ScopedContext::ScopedContext(CUcontext context) {
  DriverApi& api = driver();
  CUcontext current = nullptr;
  if (api.ctx_get_current(&current) != CUDA_SUCCESS) return;
  if (current == context) {
    ok_ = true;
    return;
  }
  pushed_ = api.ctx_push_current(context) == CUDA_SUCCESS;
  ok_ = pushed_;
}

ScopedContext::~ScopedContext() {
  if (pushed_) {
    CUcontext popped = nullptr;
    driver().ctx_pop_current(&popped);
  }
}

}  // namespace gpuobs
