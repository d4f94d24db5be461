#include "gpuobs/replay_span_ledger.h"

#include <algorithm>

namespace gpuobs {

void ReplaySpanLedger::read(uint64_t word, const DeviceReplaySpan* table, uint64_t word_after,
                            std::vector<ReplaySpanFound>* found, std::vector<uint32_t>* resets) {
  const uint64_t begun = replay_of_word(word);
  const bool ended = (word & kReplayEnded) != 0;
  const uint64_t begun_after = replay_of_word(word_after);
  for (uint32_t slot = 0; slot < kReplaySpanSlots; ++slot) {
    const DeviceReplaySpan& span = table[slot];
    const uint64_t replay = span.replay_max;
    if (replay == 0) {  // unused since its last reset, unless that reset wiped a whole replay
      if (maybe_wiped_[slot] && begun > read_replay_[slot] + kReplaySpanSlots) {
        ++unclean_;
        maybe_wiped_[slot] = false;
      }
      continue;
    }
    if (replay > begun || (replay == begun && !ended)) continue;  // still running, or ahead of the word
    if (replay <= read_replay_[slot]) {                           // read before, its reset did not land
      resets->push_back(slot);
      continue;
    }
    const bool alone = span.replay_min == replay && !tainted(replay);
    // whole: no reset may have cut its first entries, and its slot's next replay (replay +
    // kReplaySpanSlots at the earliest) had not begun when the copy was done
    const bool whole = replay > distrust_[slot] && begun_after < replay + kReplaySpanSlots;
    if (alone && whole && span.launches > 0 && span.first_entry_ns <= span.last_entry_ns) {
      found->push_back(ReplaySpanFound{replay, span.first_entry_ns, span.last_entry_ns, span.launches});
      ++published_;
    } else {
      ++unclean_;
    }
    maybe_wiped_[slot] = false;
    read_replay_[slot] = replay;
    resets->push_back(slot);
  }
}

void ReplaySpanLedger::reset_done(const std::vector<uint32_t>& resets, uint64_t word_after) {
  const uint64_t begun = replay_of_word(word_after);
  for (uint32_t slot : resets) {
    // the next replay this slot serves is read_replay_ + kReplaySpanSlots at the earliest: had it
    // begun by now, its first entries (or all of them) may have landed before the reset and been wiped
    if (begun >= read_replay_[slot] + kReplaySpanSlots) {
      distrust_[slot] = begun;
      maybe_wiped_[slot] = true;
    }
  }
}

void ReplaySpanLedger::reset_failed(const std::vector<uint32_t>& resets) {
  for (uint32_t slot : resets) distrust_[slot] = std::max(distrust_[slot], read_replay_[slot] + kReplaySpanSlots);
}

std::vector<std::pair<uint32_t, uint32_t>> slot_runs(const std::vector<uint32_t>& slots) {
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (uint32_t slot : slots) {
    if (!runs.empty() && runs.back().second == slot) {
      ++runs.back().second;
    } else {
      runs.emplace_back(slot, slot + 1);
    }
  }
  return runs;
}

}  // namespace gpuobs
