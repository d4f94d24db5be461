// Replay spans: each CUDA-graph replay's device span in `counter` mode and up, where no event is
// recorded. The launch census already runs in block (0,0,0)'s leader of every launch; with
// replay spans on, that leader also folds its entry time into its replay's span, a few
// reductions into device memory that it never waits for (a launch event in host memory, the
// record GPUOBS_LAUNCH_TIMES=1 makes, cost 1.26x `counter` on a graph of tiny kernels).
//
// The replay word (DeviceConfig::replay) says which replay's nodes run now: the host copies the
// replay's number into it on the graph's stream ahead of its nodes (GRAPHS_LAUNCH_BEGIN) and the
// same number with kReplayEnded after them (GRAPHS_LAUNCH_END), so the eager launches between
// two replays fold into none. A span is kept in slot replay % kReplaySpanSlots of the context's
// table, read by the tool thread once the replay is done and reset for its next user.
//
// A span is the first block (0,0,0) entry of the replay's kernels to the last: it leaves out
// the last kernel's own run after its first block entered, and counts the waits between nodes.
// Exact or not published: a slot that two replays folded into (the tool thread read it too late)
// or that a reset may have cut short is counted unclean, never published as a span.
#pragma once

#include <cstdint>

#include "gpuobs/layout.h"
#include "gpuobs/ring_protocol.h"

namespace gpuobs {

constexpr uint32_t kReplaySpanSlots = 512;     // replays the tool thread can fall behind by (publish_ms)
constexpr uint64_t kReplayEnded = 1ULL << 63;  // in the replay word: the replay's nodes are done

// One replay's span as the device folds it. Reset: replay_min and first_entry_ns all ones, the
// rest zero. replay_min == replay_max says one replay alone wrote it.
struct alignas(64) DeviceReplaySpan {
  uint64_t replay_max;
  uint64_t replay_min;
  uint64_t first_entry_ns;  // %globaltimer at the earliest block (0,0,0) entry
  uint64_t last_entry_ns;   // ... at the latest
  uint64_t launches;        // kernel launches folded in
  uint64_t reserved[3];
};
static_assert(sizeof(DeviceReplaySpan) == 64, "DeviceReplaySpan is 64 bytes");
static_assert((kReplaySpanSlots & (kReplaySpanSlots - 1)) == 0, "a power of two of slots");

GPUOBS_HD constexpr DeviceReplaySpan reset_replay_span() { return DeviceReplaySpan{0, ~0ULL, ~0ULL, 0, 0, {0, 0, 0}}; }
GPUOBS_HD constexpr bool replay_open(uint64_t word) { return word != 0 && !(word & kReplayEnded); }
GPUOBS_HD constexpr uint64_t replay_of_word(uint64_t word) { return word & ~kReplayEnded; }
GPUOBS_HD constexpr uint32_t replay_span_slot(uint64_t replay) { return uint32_t(replay & (kReplaySpanSlots - 1)); }

// Block (0,0,0)'s leader (and gpuobs-synth playing it): its launch's entry time into the span of
// the replay the word names, if one is open.
GPUOBS_HD void note_replay_span(DeviceReplaySpan* spans, uint64_t word, uint64_t entry_ns) {
  if (!replay_open(word)) return;
  DeviceReplaySpan* span = &spans[replay_span_slot(word)];
  ring::fetch_max(&span->replay_max, word);
  ring::fetch_min(&span->replay_min, word);
  ring::fetch_min(&span->first_entry_ns, entry_ns);
  ring::fetch_max(&span->last_entry_ns, entry_ns);
  ring::add(&span->launches, 1);
}

}  // namespace gpuobs
