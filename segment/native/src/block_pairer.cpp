#include "gpuobs/block_pairer.h"

#include <algorithm>

#include "gpuobs/sample_hash.h"

namespace gpuobs {

size_t BlockPairer::KeyHash::operator()(const Key& key) const {
  return size_t(fmix64(key.grid_id ^ fmix64(key.block ^ (key.replay * 0x9E3779B97F4A7C15ull))));
}

void BlockPairer::pair(const EventRecord* events, size_t count, const uint64_t* node_grid_ids, size_t node_count) {
  const uint64_t* nodes_end = node_grid_ids + node_count;
  for (size_t i = 0; i < count; ++i) {
    const EventRecord& event = events[i];
    const auto kind = EventKind(event.kind);
    if (kind != EventKind::BlockEnter && kind != EventKind::BlockExit) continue;
    ++analysed_[event.kernel_slot];
    ++analysed_total_;
    const bool node = node_count && std::binary_search(node_grid_ids, nodes_end, event.grid_id);
    const Key key{event.grid_id, node ? uint64_t(event.replay) : 0,
                  uint64_t(event.block_x) | uint64_t(event.block_y) << 32 | uint64_t(event.block_z) << 48};
    if (kind == EventKind::BlockEnter) {
      auto [at, fresh] =
          held_.try_emplace(key, Held{event.globaltimer_ns, event.kernel_slot, event.sm_id, event.flags});
      if (!fresh) {  // entered again before its exit came: the earlier enter's exit was lost
        ++unpaired_[at->second.kernel_slot];
        at->second = Held{event.globaltimer_ns, event.kernel_slot, event.sm_id, event.flags};
      }
      continue;
    }
    auto at = held_.find(key);
    if (at == held_.end()) {
      // A sampled block's exit may come without its enter and be no anomaly: the exit is kept by
      // its own epoch's choice or the one before, and the block may have entered in an epoch whose
      // choice did not keep it (sample_hash.h). Only unsampled lonely exits count.
      if (!(event.flags & kBlockSampled)) ++unpaired_[event.kernel_slot];
      continue;
    }
    // 0 where the device clock went back
    durations_[at->second.kernel_slot].add(
        event.globaltimer_ns > at->second.time ? event.globaltimer_ns - at->second.time : 0);
    held_.erase(at);
  }
  if (held_.size() > max_pending_) keep_newest();
}

void BlockPairer::keep_newest() {
  std::vector<uint64_t> times;
  times.reserve(held_.size());
  for (const auto& entry : held_) times.push_back(entry.second.time);
  const size_t excess = held_.size() - max_pending_;
  std::nth_element(times.begin(), times.begin() + ptrdiff_t(excess - 1), times.end());
  const uint64_t cut = times[excess - 1];  // give up enters up to this time, `excess` of them
  size_t given_up = 0;
  for (auto at = held_.begin(); at != held_.end() && given_up < excess;) {
    if (at->second.time <= cut) {
      ++unpaired_[at->second.kernel_slot];
      at = held_.erase(at);
      ++given_up;
    } else {
      ++at;
    }
  }
}

std::vector<PendingBlock> BlockPairer::pending() const {
  std::vector<PendingBlock> out;
  out.reserve(held_.size());
  for (const auto& [key, held] : held_)
    out.push_back(PendingBlock{key.grid_id, key.replay, key.block, held.time, held.kernel_slot, held.sm, held.flags});
  return out;
}

void BlockPairer::drop_stale(const uint32_t* in_flight, size_t in_flight_count, uint64_t entered_before_ns) {
  for (auto at = held_.begin(); at != held_.end();) {
    if (at->second.time < entered_before_ns &&
        !std::binary_search(in_flight, in_flight + in_flight_count, at->second.kernel_slot)) {
      ++unpaired_[at->second.kernel_slot];
      at = held_.erase(at);
    } else {
      ++at;
    }
  }
}

void BlockPairer::clear() {
  for (const auto& entry : held_) ++unpaired_[entry.second.kernel_slot];
  held_.clear();
}

}  // namespace gpuobs
