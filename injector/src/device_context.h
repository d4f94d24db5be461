// One CUDA context as the injector sees it: its device state (config, ring head, per-kernel
// counters), the segment ring it writes to, and a stream of the tool's own on which the tool
// thread reads counters back and writes the config (never a stream of the program's).
#pragma once

#include <sanitizer.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpuobs/device_state.h"
#include "gpuobs/replay_span_ledger.h"
#include "gpuobs/segment_writer.h"

namespace gpuobs {

class DeviceContext {
 public:
  // Called in CONTEXT_CREATION_FINISHED with `context` current. nullptr and *error on failure.
  static std::unique_ptr<DeviceContext> create(CUcontext context, uint32_t ring_index, SegmentWriter& writer,
                                               uint32_t initial_flags, std::string* error);

  CUcontext context() const { return context_; }
  uint32_t ring_index() const { return ring_index_; }
  // Device address of a kernel slot: the userdata its patches receive.
  void* slot_address(uint32_t slot) const;

  // Tool thread: each slot's config word (make_flags; nullptr: the words in place) and its
  // function's first pc into the slot's host-written line, where the patches read them; slots
  // whose words are already in place are skipped. Waits on the tool's stream: launches that
  // start after this returns see it (a launch running meanwhile may see old and new in
  // different blocks; the census stays exact, block by block).
  bool write_slot_headers(const std::vector<uint32_t>* flags, const std::vector<uint64_t>& entry_pcs,
                          std::string* error);
  // Tool thread: the ring's cached limit (consumer tail + capacity), which the block-entry patch
  // claims against without reading the tail itself, moved up once the consumer has read an
  // eighth of the ring since the last move. A stale limit only drops (counted), never overwrites.
  bool ring_limit_stale() const;
  bool refresh_ring_limit(std::string* error);
  // Launch path, at GRAPHS_LAUNCH_BEGIN: copies the replay's number (the process's next, so that
  // numbers never repeat across contexts) into DeviceConfig::replay on the graph's stream, ahead
  // of the replay's nodes, which stamp it into their events (graph nodes keep their grid ids
  // across replays, so the grid id alone cannot say which replay an event belongs to). False
  // when the copy failed. One word per context: graphs replayed at the same time on different
  // streams can overwrite each other's number; the daemon then finds events whose (grid id,
  // replay) match no launch.
  bool push_replay(Sanitizer_StreamHandle stream, uint64_t replay);
  // Launch path, at GRAPHS_LAUNCH_END: the same number with kReplayEnded, after the replay's nodes
  // on its stream, so that eager launches after it fold into no replay's span. False when the
  // copy failed (the replay's span may then take in the eager launches up to the next replay: it
  // is counted unclean).
  bool end_replay(Sanitizer_StreamHandle stream, uint64_t replay);
  // Control thread: the spans of replays done since the last call (replay_span_ledger.h), their
  // slots reset for the replays that use them next. False and *error when a copy failed.
  bool read_replay_spans(std::vector<ReplaySpanFound>* found, std::string* error);
  const ReplaySpanLedger& replay_span_ledger() const { return span_ledger_; }
  // Whether any replay was pushed to this context (only such contexts bound replay_begun).
  bool replayed() const { return replayed_.load(std::memory_order_acquire); }
  // Control thread: copies the ring head and the replay word (the replay the device began last:
  // with one stream, every replay below it has finished), then the device counters of slots
  // [0, kernel_count).
  struct ReadBack {
    uint64_t ring_head = 0;
    uint64_t replay_begun = 0;
  };
  bool read_back(uint32_t kernel_count, std::vector<DeviceKernelSlot>* slots, ReadBack* words, std::string* error);

  // In CONTEXT_DESTROY_STARTING, the context still alive: its counters read one last time; from
  // then on read_back hands out that copy, and nothing touches its device memory again.
  // The spans of its replays done by then go to `last_spans` (the caller writes them).
  bool retire(uint32_t kernel_count, std::vector<ReplaySpanFound>* last_spans, std::string* error);
  bool retired() const { return retired_.load(std::memory_order_acquire); }

 private:
  // The device's replay word (DeviceConfig::replay): the replay in force, its end flagged.
  uint8_t* replay_word() const;
  // Puts `value` in `source` and copies it to the replay word in `stream`'s order.
  bool copy_to_replay_word(uint64_t* source, uint64_t value, Sanitizer_StreamHandle stream);
  DeviceContext() = default;
  // Copy sources stay untouched while a copy may be pending: the host runs ahead of the device
  // by up to the driver's queue of launches (over a thousand replays of a short graph).
  static constexpr uint32_t kReplayBuffers = 4096;

  CUcontext context_ = nullptr;
  uint32_t ring_index_ = 0;
  uint32_t kernel_slots_ = 0;
  uint8_t* device_ = nullptr;  // sanitizerAlloc'd DeviceContextState + replay spans + slots
  Sanitizer_StreamHandle tool_stream_ = nullptr;
  std::atomic<bool> replayed_{false};
  uint64_t replay_sources_[kReplayBuffers] = {};
  uint64_t ended_sources_[kReplayBuffers] = {};
  std::mutex spans_mutex_;        // read_replay_spans: the tool thread, or retire()
  ReplaySpanLedger span_ledger_;  // under spans_mutex_, but for taint() from the launch path
  // launch path: the last replay pushed, its stream, and the thread between a replay's begin and
  // end (0: none), to find replays that may overlap on the device
  std::atomic<uint64_t> last_replay_{0};
  std::atomic<Sanitizer_StreamHandle> last_stream_{nullptr};
  std::atomic<uint64_t> open_thread_{0};
  std::vector<uint32_t> flags_in_place_;     // per slot: the config word last written
  std::vector<uint64_t> entry_pc_in_place_;  // per slot: the first pc last written
  const uint64_t* consumer_tail_ = nullptr;  // the segment's RingControl::tail of this ring
  uint64_t ring_capacity_ = 0;
  uint64_t limit_written_ = 0;  // the last limit copied to the device (tool thread only)
  uint64_t limit_source_ = 0;   // its copy source, untouched until the copy is done
  std::atomic<bool> retired_{false};
  std::mutex final_mutex_;  // guards the last copy of a retired context
  std::vector<DeviceKernelSlot> final_slots_;
  uint64_t final_head_ = 0;
};

}  // namespace gpuobs
