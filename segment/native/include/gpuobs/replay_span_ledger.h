// The host half of replay spans (replay_spans.h), shared by the injector's tool thread and
// gpuobs-synth: which slots of a context's span table hold one finished replay's span, which are
// reset for their next replay, and when a reset may have cut a replay short.
//
// A slot is read only once the replay word says its replay is done (a later replay began, or its
// own end was copied in after its nodes). It is published only where one replay alone wrote it
// (replay_min == replay_max) and no reset can have wiped its first entries; either way it is
// reset, and every slot read counts as published or unclean. A reset races the replay that next
// uses the slot only when that replay began before the reset landed: the word read after the
// reset says whether it could have, and then that slot's next span is not trusted.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "gpuobs/replay_spans.h"

namespace gpuobs {

struct ReplaySpanFound {
  uint64_t replay = 0;
  uint64_t first_entry_ns = 0;
  uint64_t last_entry_ns = 0;
  uint64_t launches = 0;
};

class ReplaySpanLedger {
 public:
  // One reading of a context: `word`, its replay word, read before `table` [kReplaySpanSlots],
  // and `word_after`, read again after it (a slot's next replay begun by then may have folded
  // into the copy). The spans of done replays go to `found`; the slots read (published or
  // unclean) to `resets`, which the caller resets (reset_replay_span) before reset_done.
  void read(uint64_t word, const DeviceReplaySpan* table, uint64_t word_after, std::vector<ReplaySpanFound>* found,
            std::vector<uint32_t>* resets);
  // After the resets landed: `word_after`, the replay word read again.
  void reset_done(const std::vector<uint32_t>& resets, uint64_t word_after);
  // When the resets may not have landed (a copy failed): the slots' next replays are not trusted,
  // and a slot still holding the replay read is not counted again.
  void reset_failed(const std::vector<uint32_t>& resets);
  // From any thread: a replay whose span another one may have folded into (two replays in flight
  // in one context: other streams, other threads) or that may have taken in launches after it
  // (its end was not copied): counted unclean when read. Kept for the last kTaintSlots numbers.
  void taint(uint64_t replay) { tainted_[replay % kTaintSlots].store(replay, std::memory_order_release); }

  // Read from any thread (the publisher's snapshot) while another reads the table.
  uint64_t published() const { return published_.load(std::memory_order_relaxed); }
  uint64_t unclean() const { return unclean_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kTaintSlots = 1u << 14;
  bool tainted(uint64_t replay) const {
    return tainted_[replay % kTaintSlots].load(std::memory_order_acquire) == replay;
  }

  uint64_t read_replay_[kReplaySpanSlots] = {};  // per slot: the replay it held when last read
  uint64_t distrust_[kReplaySpanSlots] = {};     // per slot: its spans of replays up to this may be short
  bool maybe_wiped_[kReplaySpanSlots] = {};      // a reset may have wiped a whole replay: unclean if empty
  std::atomic<uint64_t> tainted_[kTaintSlots] = {};
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> unclean_{0};
};

// Consecutive runs of `slots` (sorted), as [first, end) pairs: one copy per run resets them.
std::vector<std::pair<uint32_t, uint32_t>> slot_runs(const std::vector<uint32_t>& slots);

}  // namespace gpuobs
