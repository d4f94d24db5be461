// The producer side of a segment as the injector's host code runs it, and gpuobs-synth with
// it: kernel table, launch ring, counters, device snapshots and the control handshake.
// Thread-safe where the injector needs it (launches come from any thread); no exceptions.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpuobs/control_request.h"
#include "gpuobs/layout.h"
#include "gpuobs/replay_span_ledger.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/shm_segment.h"

namespace gpuobs {

// One consistent copy of the device counters (device memory in the injector, process memory
// in gpuobs-synth), per kernel as the segment holds them (launch_census.h builds them).
struct DeviceSnapshot {
  uint64_t events_produced = 0;
  uint64_t events_dropped = 0;
  uint64_t memory_accesses = 0;
  uint64_t blocks = 0;
  uint64_t launches = 0;
  bool quiescent = false;
  uint64_t replay_begun = 0;                // GlobalCounters::device_replay_begun
  uint64_t replay_spans = 0;                // GlobalCounters::replay_spans (every context's ledger)
  uint64_t replay_spans_unclean = 0;        // GlobalCounters::replay_spans_unclean
  std::vector<uint64_t> ring_heads;         // per event ring: tickets claimed
  const KernelCounters* kernels = nullptr;  // [kernel_count]
  const KernelShapes* shapes = nullptr;     // [kernel_count]
  uint32_t kernel_count = 0;
};

// Sums the per-kernel figures of a snapshot into its totals.
void total_snapshot(DeviceSnapshot* snapshot);

// The calling thread's OS id (what records name a thread by).
uint64_t current_thread_id();

class SegmentWriter {
 public:
  explicit SegmentWriter(std::unique_ptr<MappedSegment> segment);

  const SegmentView& view() const { return segment_->view(); }
  MappedSegment& segment() { return *segment_; }

  // Slot of a new kernel, or -1 when the table or name arena is full (counted, "table" stage).
  // entry_flags: KernelEntryFlags.
  int64_t register_kernel(uint64_t function, uint64_t module, const std::string& mangled, uint64_t cubin_hash = 0,
                          uint64_t function_pc = 0, uint32_t entry_flags = 0);

  // Appends a launch record (launches are counted by the device census, not here). False when
  // the launch ring was full (counted, "host" stage). Callable from any thread, never blocks.
  bool write_launch(const LaunchRecord& record);

  // Appends an engine step record and its request ids (text split over StepText records; empty
  // when flags has kStepSameRequests), with the engine's FLOP estimate (0: none). False when any
  // record was dropped (each one counted).
  bool write_step(uint64_t step, uint32_t requests, uint32_t tokens, const char* ids, uint32_t ids_bytes,
                  uint32_t flags, uint64_t flops = 0);
  // Appends an op record for the calling thread and its label (OpText records). False when any
  // record was dropped (each one counted).
  bool write_op(uint64_t op, const char* label, uint32_t label_bytes);
  // Appends the graph nodes op `op` (0: none) added to `graph` in capture `capture_id` (OpNodes
  // records of kOpNodesPerRecord nodes; kernel[i] != 0 marks a kernel node). False when any
  // record was dropped (each one counted).
  bool write_op_nodes(uint64_t op, uint64_t graph, uint64_t capture_id, const uint64_t* nodes, const uint8_t* kernel,
                      size_t count);
  // Appends a graph replay's device span (replay_span_ledger.h) read from context
  // `context_index`'s table. False when the launch ring was full (counted, "host" stage).
  bool write_replay_span(const ReplaySpanFound& span, uint32_t context_index);
  // Names the process for operators (role, rank, model); cut to the header's 63 bytes.
  void set_label(const std::string& label);
  // Who the process is (a plugin says: role, rank, world size, local rank, model); a reader may
  // see a mix for a moment, as with the label.
  void set_identity(ProcessRole role, uint32_t rank, uint32_t world_size, uint32_t local_rank,
                    const std::string& model);
  // A framework plugin in the process takes op windows: the daemon opens them only where one does.
  void note_takes_op_windows();
  // The GPU of context `context` (the first kSegmentGpus are named, every one counted).
  void add_gpu(uint32_t context, uint32_t ordinal, const std::string& pci_bus_id, const std::string& uuid);
  // Counts a profiler started in the process (GlobalCounters::profiler_starts); never blocks.
  void note_profiler_start();

  // The producer's view of event ring `index` for a device whose head/reserved/limit words
  // live at the given addresses (device memory for the GPU, process memory for gpuobs-synth).
  ring::ProducerView event_ring_producer(uint32_t index, uint64_t* head, uint64_t* reserved, uint64_t* limit) const;

  void publish(const DeviceSnapshot& snapshot);
  void heartbeat();

  // True when the daemon asked for a generation newer than `seen_generation`; the request is
  // read under the seqlock and is consistent. Never waits on the writer.
  bool poll_control(uint64_t seen_generation, ControlRequest* request) const;
  // Publishes what is now in force and the status of the last request.
  void acknowledge(uint64_t generation, const ControlRequest& in_force, ControlStatus status,
                   const std::string& message);

 private:
  bool put_launch_ring(const LaunchRecord& record);
  // The text records (StepText or OpText) of the record numbered `owner`.
  bool put_text(LaunchKind kind, uint64_t owner, uint64_t host_time_ns, const char* text, uint32_t bytes);

  std::unique_ptr<MappedSegment> segment_;
  std::mutex registration_mutex_;  // kernel registration only: never on the launch path
  std::mutex publish_mutex_;       // one publisher at a time keeps the seqlock sound
};

// Demangled C++ name, or the input when it is not a C++ mangled name.
std::string demangle(const std::string& mangled);

// A launch table record for a graph event (graph launch, exec created or destroyed): no kernel
// and no geometry, stamped with the host time now. The caller adds what it knows (stream, mode,
// replay number, context).
LaunchRecord graph_event_record(LaunchKind kind, uint64_t graph_exec);

}  // namespace gpuobs
