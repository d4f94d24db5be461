// Block pairing for the daemon: each block's enter event held until its exit event comes, in the
// order the ring delivered them (one ring per context, so a block's exit always follows its
// enter), giving each pair's duration and, in what is held, the blocks in flight. Native because
// the daemon's cost per event is the product's cost on a serving host: a hash map is a few tens
// of ns per event where numpy's sort-based pairing was ~160 (bench/daemon_footprint.py).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gpuobs/field_table.h"
#include "gpuobs/layout.h"

namespace gpuobs {

// A block enter held for its exit, as Python sees the held blocks (gpuobs.daemon's PENDING_DTYPE
// is built from this table).
struct PendingBlock {
  uint64_t grid_id;
  uint64_t replay;  // the replay part of the launch key: the replay for graph nodes, 0 for eager launches
  uint64_t block;   // x | y << 32 | z << 48
  uint64_t time;    // the enter's %globaltimer (ns)
  uint32_t kernel_slot;
  uint16_t sm;
  uint16_t flags;  // the enter's event flags (kBlockSampled)
};
static_assert(sizeof(PendingBlock) == 40, "PendingBlock is packed: numpy reads it as is");
inline constexpr Field kPendingBlockFields[] = {
    GPUOBS_FIELD(PendingBlock, grid_id), GPUOBS_FIELD(PendingBlock, replay),      GPUOBS_FIELD(PendingBlock, block),
    GPUOBS_FIELD(PendingBlock, time),    GPUOBS_FIELD(PendingBlock, kernel_slot), GPUOBS_FIELD(PendingBlock, sm),
    GPUOBS_FIELD(PendingBlock, flags),
};
static_assert(covers(kPendingBlockFields, sizeof(PendingBlock)), "kPendingBlockFields lists every member");

// Block durations per kernel: a log2 histogram, kDurationBucketsPerOctave buckets an octave, so
// that percentiles and Prometheus buckets come from exact counts.
inline constexpr uint32_t kDurationBucketsPerOctave = 8;
inline constexpr uint32_t kDurationBuckets = 64 * kDurationBucketsPerOctave;

inline uint32_t duration_bucket(uint64_t ns) {
  const double bucket = std::floor(std::log2(double(ns ? ns : 1)) * kDurationBucketsPerOctave);
  return bucket < 0 ? 0 : bucket >= kDurationBuckets ? kDurationBuckets - 1 : uint32_t(bucket);
}

struct SlotDurations {
  std::array<uint64_t, kDurationBuckets> histogram{};
  uint64_t count = 0, total_ns = 0, min_ns = 0, max_ns = 0;
  void add(uint64_t ns) {
    ++histogram[duration_bucket(ns)];
    min_ns = count ? std::min(min_ns, ns) : ns;
    max_ns = std::max(max_ns, ns);
    ++count;
    total_ns += ns;
  }
};

class BlockPairer {
 public:
  explicit BlockPairer(size_t max_pending) : max_pending_(max_pending) {}

  // Pairs the block events of `events` (other kinds are skipped). `node_grid_ids`, sorted: the
  // grid ids of graph nodes, whose events are keyed by (grid id, replay); others by grid id alone.
  void pair(const EventRecord* events, size_t count, const uint64_t* node_grid_ids, size_t node_count);

  // Per kernel slot: block events looked at, and those without a partner (exits without an enter,
  // unsampled ones only; enters given up); and all kernels' block events looked at.
  const std::unordered_map<uint32_t, uint64_t>& analysed() const { return analysed_; }
  const std::unordered_map<uint32_t, uint64_t>& unpaired() const { return unpaired_; }
  uint64_t analysed_total() const { return analysed_total_; }

  // The durations of the blocks paired so far, per kernel slot that has any.
  const std::unordered_map<uint32_t, SlotDurations>& durations() const { return durations_; }

  // Enters held, in no particular order.
  std::vector<PendingBlock> pending() const;
  size_t pending_count() const { return held_.size(); }

  // Gives up (as unpaired) the held enters of kernels not in `in_flight` (sorted) that entered
  // before `entered_before_ns`.
  void drop_stale(const uint32_t* in_flight, size_t in_flight_count, uint64_t entered_before_ns);
  // Gives up every held enter.
  void clear();

 private:
  struct Key {
    uint64_t grid_id, replay, block;
    bool operator==(const Key& other) const {
      return grid_id == other.grid_id && replay == other.replay && block == other.block;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Held {
    uint64_t time;
    uint32_t kernel_slot;
    uint16_t sm, flags;
  };
  void keep_newest();

  size_t max_pending_;
  std::unordered_map<Key, Held, KeyHash> held_;
  std::unordered_map<uint32_t, SlotDurations> durations_;
  std::unordered_map<uint32_t, uint64_t> analysed_, unpaired_;
  uint64_t analysed_total_ = 0;
};

}  // namespace gpuobs
