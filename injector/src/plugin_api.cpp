// The injector's C interface (injector/include/gpuobs_injector.h) and CUDA's entry point: the
// only symbols the library exports (injector/exports.map). Nothing here throws across the C
// boundary: a failure answers -1 (not observing) and the program runs on.
#include <cstdlib>

#include "gpuobs_injector.h"
#include "injector.h"
#include "injector_log.h"

namespace {
gpuobs::Injector* g_injector = nullptr;
void shutdown_at_exit() {
  if (g_injector) g_injector->shutdown();
}
}  // namespace

// The entry point CUDA calls for a library named by CUDA_INJECTION64_PATH, before any other
// CUDA work in the process. It returns 1 either way: a failure here must not stop the program.
extern "C" GPUOBS_EXPORT int InitializeInjection() {
  try {
    if (g_injector == nullptr) {
      g_injector = new gpuobs::Injector();  // lives as long as the process
      if (g_injector->subscribe()) std::atexit(shutdown_at_exit);
    }
  } catch (...) {
    gpuobs::log_line("initialisation failed; the program runs unobserved");
  }
  return 1;
}

// The served program's side (ctypes from the vLLM plugin): never throws, never blocks; -1 where
// the injector is not running.
namespace {
template <class Call>
int on_injector(Call call) noexcept {
  try {
    return g_injector ? call(*g_injector) : -1;
  } catch (...) {
    return -1;
  }
}
}  // namespace

int gpuobs_record_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                       uint32_t flags) {
  return on_injector(
      [&](gpuobs::Injector& i) { return i.annotations().record_step(step, requests, tokens, ids, ids_bytes, flags); });
}

int gpuobs_record_step_flops(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                             uint32_t flags, uint64_t flops) {
  return on_injector([&](gpuobs::Injector& i) {
    return i.annotations().record_step(step, requests, tokens, ids, ids_bytes, flags, flops);
  });
}

int gpuobs_set_identity(uint32_t role, uint32_t rank, uint32_t world_size, uint32_t local_rank, const char* model) {
  return on_injector(
      [&](gpuobs::Injector& i) { return i.annotations().set_identity(role, rank, world_size, local_rank, model); });
}

int gpuobs_record_op(const char* label, uint32_t label_bytes) {
  return on_injector([&](gpuobs::Injector& i) { return i.annotations().record_op(label, label_bytes); });
}

int gpuobs_record_capture(uint64_t stream) {
  return on_injector([&](gpuobs::Injector& i) { return i.annotations().record_capture(stream); });
}

int gpuobs_take_ops_window(void) {
  return on_injector([](gpuobs::Injector& i) { return i.annotations().take_ops_window(); });
}

int gpuobs_launch_trace_window(int on) {
  return on_injector([&](gpuobs::Injector& i) { return i.annotations().launch_trace_window(on != 0); });
}

int gpuobs_note_profiler(const char* who) {
  return on_injector([&](gpuobs::Injector& i) { return i.annotations().note_profiler(who); });
}

int gpuobs_step_aside(void) {
  return on_injector([](gpuobs::Injector& i) { return i.step_aside(); });
}

int gpuobs_set_label(const char* label) {
  return on_injector([&](gpuobs::Injector& i) { return i.annotations().set_label(label); });
}
