// What the served program's framework plugin tells the injector (through the C interface,
// plugin_api.cpp): engine steps, who the process is, framework ops and the graph nodes each
// captured, the op windows gpuobsd asks for, a profiler starting. All of it is written into the
// segment by the calling thread and never waits; the only state is the op open on each thread,
// the window the daemon asked for, and whether the launch trace is on for a window.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

#include "gpuobs/segment_writer.h"

namespace gpuobs {

class HostAnnotations {
 public:
  // `launch_trace`: the process traces every launch anyway (GPUOBS_LAUNCH_TRACE=1), so a window
  // turns nothing on. `launch_callbacks(on)`: turns the host launch callback on or off for an
  // op window (the injector keeps it on where it needs it for good).
  HostAnnotations(bool launch_trace, std::function<void(bool on)> launch_callbacks)
      : launch_trace_(launch_trace), launch_callbacks_(std::move(launch_callbacks)) {}

  // The segment exists: the calls below record from now on (before, they answer -1).
  void attach(SegmentWriter* writer) { writer_.store(writer, std::memory_order_release); }

  // The C interface's calls (gpuobs_injector.h says what each returns).
  int record_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                  uint32_t flags, uint64_t flops = 0);
  int set_label(const char* label);
  int set_identity(uint32_t role, uint32_t rank, uint32_t world_size, uint32_t local_rank, const char* model);
  int record_op(const char* label, uint32_t label_bytes);
  int record_capture(uint64_t stream);
  int take_ops_window();
  int launch_trace_window(bool on);
  int note_profiler(const char* who);

  // The tool thread: the window gpuobsd asked for (taken by the plugin at its next step), and a
  // window whose plugin has gone quiet closed.
  void open_ops_window(uint32_t steps) { ops_window_.store(steps, std::memory_order_release); }
  void close_stale_trace_window();

  // The launch callback: whether an eager launch leaves a record, and the op it belongs to (the
  // one open on the launching thread).
  bool traces_eager_launches() const { return launch_trace_ || trace_window_.load(std::memory_order_relaxed); }
  static uint64_t current_op();

 private:
  SegmentWriter* writer() const { return writer_.load(std::memory_order_acquire); }
  // The trace window on (each step of the window says so again) or off; under trace_window_mutex_.
  void set_trace_window(bool on);

  const bool launch_trace_;
  const std::function<void(bool on)> launch_callbacks_;
  std::atomic<SegmentWriter*> writer_{nullptr};
  std::atomic<uint64_t> next_op_{0};           // op records' numbers
  std::atomic<uint32_t> ops_window_{0};        // steps of an op window not taken by the plugin yet
  std::atomic<bool> takes_op_windows_{false};  // the plugin asked once: the segment says so
  std::mutex trace_window_mutex_;              // one opener or closer of the launch trace window at a time
  std::atomic<bool> trace_window_{false};      // eager launches are recorded: an op window is open
  std::atomic<uint64_t> trace_window_since_ns_{0};
};

}  // namespace gpuobs
