/* The injector's C interface for the served program: what a framework plugin (the vLLM plugin,
   through ctypes: python/gpuobs/injector_functions.py) calls in a process the injector observes.
   This header is the one definition: injector/exports.map exports exactly these names (and
   InitializeInjection, CUDA's entry point), and tests/injector/test_plugin_interface.py holds the
   ctypes signatures and the export map to it.

   Every function returns at once, never blocks and never throws; -1 means "not observing" (no
   segment: the injector is not loaded, failed to start, or this build lacks the function). A
   record that does not fit its ring is dropped and counted (1). */
#ifndef GPUOBS_INJECTOR_H_
#define GPUOBS_INJECTOR_H_

#include <stdint.h>

#if defined(__GNUC__)
#define GPUOBS_EXPORT __attribute__((visibility("default")))
#else
#define GPUOBS_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* An engine step: its number, scheduled requests and tokens, the request ids that changed
   (`ids`, `ids_bytes` long) and flags. 0 recorded, 1 dropped. */
GPUOBS_EXPORT int gpuobs_record_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids,
                                     uint32_t ids_bytes, uint32_t flags);

/* The same with the engine's estimate of the step's floating-point operations per GPU (vLLM's
   --enable-mfu-metrics figure): the daemon divides it by the step's measured device time. */
GPUOBS_EXPORT int gpuobs_record_step_flops(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids,
                                           uint32_t ids_bytes, uint32_t flags, uint64_t flops);

/* Free text the daemon shows for the process. 0 set. */
GPUOBS_EXPORT int gpuobs_set_label(const char* label);

/* Who the process is (ProcessRole, rank, world size, local rank, model), as its plugin says:
   fields of the segment's header. 0 set. */
GPUOBS_EXPORT int gpuobs_set_identity(uint32_t role, uint32_t rank, uint32_t world_size, uint32_t local_rank,
                                      const char* model);

/* A framework op about to launch its kernels on this thread (its label: module path, op, dtypes
   and shapes); a null or empty label ends it. 0 recorded, 1 dropped. */
GPUOBS_EXPORT int gpuobs_record_op(const char* label, uint32_t label_bytes);

/* After an op ran on a stream that captures a graph: the graph nodes it added, recorded for the op
   open on this thread, so that every exec of the graph carries its label. 0 recorded (or nothing
   new), 1 dropped, 2 the stream is not capturing. */
GPUOBS_EXPORT int gpuobs_record_capture(uint64_t stream);

/* The op window the daemon asked for (gpuobsctl ops --record-steps N) since the last call: N
   steps, once; 0 when none. Asked at each engine step. */
GPUOBS_EXPORT int gpuobs_take_ops_window(void);

/* The launch trace on (nonzero: at each step of an op window) or off (after it). 0 done. */
GPUOBS_EXPORT int gpuobs_launch_trace_window(int on);

/* A profiler is starting in the process (`who`): counted in the segment, said once in its log. */
GPUOBS_EXPORT int gpuobs_note_profiler(const char* who);

/* A probe (allowed by GPUOBS_STEP_ASIDE=1, else -2): unsubscribes from the Sanitizer API; patched
   code keeps running, modules loaded later are neither patched nor counted. */
GPUOBS_EXPORT int gpuobs_step_aside(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUOBS_INJECTOR_H_ */
