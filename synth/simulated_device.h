// The GPU as gpuobs-synth plays it: the patches' device slots and event-ring heads in process
// memory, the launch census counted with the patches' own code (launch_census.h), records
// written into the segment's event ring with the same ring protocol, warp-aggregated claims,
// drop-newest when full.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "gpuobs/device_state.h"
#include "gpuobs/layout.h"
#include "gpuobs/replay_span_ledger.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/segment_writer.h"
#include "kernel_catalog.h"
#include "kv_cache_model.h"

namespace gpuobs {
namespace synth {

struct LaunchShape {
  uint32_t slot;
  uint32_t grid_x, grid_y, grid_z;
  uint32_t block_threads;
  uint64_t grid_id;
  uint32_t ring;
  uint64_t replay;           // graph replay sequence (0 for eager launches), copied into events
  bool ends_replay = false;  // the replay's last node: its end is copied into the replay word after it
  CacheWrite cache;          // a cache-write kernel's (model set): where its blocks store
};

struct DeviceConfig {
  Mode mode = Mode::Counter;
  uint32_t shift = 0;
  bool captured = true;        // the kernel filter lets this kernel's events through
  bool access_hooked = false;  // the kernel's module has the access hooks (memory set, or chosen)
  bool launch_times = false;   // GPUOBS_LAUNCH_TIMES=1: a launch event in `counter` too
  bool replay_spans = true;    // GPUOBS_REPLAY_SPANS: block (0,0,0) folds into its replay's span
};

class SimulatedDevice {
 public:
  SimulatedDevice(SegmentWriter* writer, uint32_t kernel_slots);

  // Runs one launch's blocks as the patches would (the census in every mode, events as the mode
  // asks); returns the work units it did (block entries+exits, or memory accesses when the mode
  // hooks them), for pacing.
  uint64_t run(const LaunchShape& launch, const KernelProfile& profile, const DeviceConfig& config);

  // A hung kernel in blocks mode: every block enters, none exits until `seconds` passed or
  // `stop` is set; then all exit.
  void run_held(const LaunchShape& launch, const KernelProfile& profile, double seconds, const std::atomic<bool>& stop);

  // Consistent enough to publish at any time; exact when `quiescent`.
  void publish(bool quiescent);
  uint64_t events_produced() const { return events_produced_.load(std::memory_order_relaxed); }

  // Claims one slot, writes part of a record and returns without committing it: a writer
  // killed in the middle of a record, for the torn-record tests.
  void write_half_record(uint32_t ring, uint32_t slot);

 private:
  // The launch event the leader of block (0,0,0) records in the event modes.
  void emit_launch_event(const LaunchShape& launch, const KernelProfile& profile);
  // One block enter or exit event of `launch`, stamped `time_ns`; `flags`: BlockEventFlags.
  void emit_block_event(const LaunchShape& launch, const KernelProfile& profile, uint32_t x, uint32_t y, uint32_t z,
                        uint64_t block_index, bool exit, uint64_t time_ns, uint16_t flags = 0);
  // The accesses of one block (memory, sampled in a kernel with access hooks); returns them.
  uint64_t run_block_accesses(const LaunchShape& launch, const KernelProfile& profile, const DeviceConfig& config,
                              uint32_t x, uint32_t y, uint32_t z, uint64_t block_index, EventRecord* bodies);
  // Records `count` events (the active lanes of one warp) with one claim.
  void emit(uint32_t ring, const EventRecord* bodies, uint32_t count, uint32_t slot);

  SegmentWriter* writer_;
  std::vector<DeviceKernelSlot> kernels_;  // "device memory"
  std::vector<uint64_t> heads_;
  std::vector<uint64_t> limits_;
  std::vector<uint64_t> reserved_;
  std::atomic<uint64_t> events_produced_{0};
  std::atomic<uint64_t> events_dropped_{0};
  std::atomic<uint64_t> memory_accesses_{0};
  std::atomic<uint64_t> blocks_{0};
  // One context's replay word and span table (replay_spans.h), as the device holds them, and the
  // tool thread's ledger of them (publish() reads them as the injector's tool thread does).
  uint64_t replay_word_ = 0;
  // The last replay begun, as the injector reads a device's replay word (its end flag cleared).
  uint64_t replay_begun() const { return ring::load_acquire(&replay_word_) & ~kReplayEnded; }
  std::vector<DeviceReplaySpan> spans_;
  std::mutex spans_mutex_;  // publishers: the ledger and the resets
  ReplaySpanLedger span_ledger_;
  // The spans of replays done, written as the injector's tool thread writes them.
  void publish_replay_spans();
};

}  // namespace synth
}  // namespace gpuobs
