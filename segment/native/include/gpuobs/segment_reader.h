// The consumer side of a segment: validation of a file someone else wrote, in-order reading of
// its rings with torn/corrupt detection, consistent counter snapshots, and the daemon's half of
// the control handshake. Never trusts a byte of the file: every offset is recomputed, every
// index checked, and no field read from the file can make it crash.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpuobs/layout.h"
#include "gpuobs/mapping_guard.h"
#include "gpuobs/segment_view.h"

namespace gpuobs {

// Who may have written a segment we accept.
struct TrustPolicy {
  std::vector<uid_t> owners;       // empty: our own uid and root
  bool allow_group_access = true;  // 0660 with a group is fine; world bits never are
  bool exclusive = true;           // take the consumer lock (one reader per segment)
};

// One ring's counters as the reader sees them (the RingControl of both sides, read in the order
// that keeps them consistent), and its capacity.
struct RingStats {
  uint64_t head = 0;  // tickets claimed, as far as the reader knows
  uint64_t tail = 0;
  uint64_t produced = 0;
  uint64_t dropped = 0;
  uint64_t delivered = 0;
  uint64_t torn = 0;
  uint64_t corrupt = 0;
  uint64_t capacity = 0;
};
inline constexpr Field kRingStatsFields[] = {
    GPUOBS_FIELD(RingStats, head),    GPUOBS_FIELD(RingStats, tail),      GPUOBS_FIELD(RingStats, produced),
    GPUOBS_FIELD(RingStats, dropped), GPUOBS_FIELD(RingStats, delivered), GPUOBS_FIELD(RingStats, torn),
    GPUOBS_FIELD(RingStats, corrupt), GPUOBS_FIELD(RingStats, capacity),
};
static_assert(covers(kRingStatsFields, sizeof(RingStats)), "kRingStatsFields lists every member");

// A published kernel table entry with its names, looked up in the arena and bounds-checked.
struct KernelInfo {
  uint32_t slot;      // the table index it was read at (trusted, unlike entry.slot)
  KernelEntry entry;  // as the producer wrote it
  std::string mangled;
  std::string demangled;
};

// Per kernel slot and event kind: events delivered by this reader.
using EventAggregates = std::vector<uint64_t>;  // [kernel_slots * kEventKindCount]

class SegmentReader {
 public:
  // nullptr and the reason in *error when the file is not a segment we trust.
  static std::unique_ptr<SegmentReader> open(const std::string& path, const TrustPolicy& policy, std::string* error);
  ~SegmentReader();
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;

  const SegmentView& view() const { return view_; }
  const std::string& path() const { return path_; }
  // The uid that owns the file (the producer's user): what the producer's other files (its kept
  // cubins) must be owned by to be trusted as its own. UINT32_MAX when it cannot be read.
  uint32_t owner_uid() const;

  // Copies up to `max_records` complete records of event ring `ring_index` into `out`, in
  // ticket order, and advances the shared tail. Returns the number copied.
  size_t read_events(uint32_t ring_index, EventRecord* out, size_t max_records);
  size_t read_launches(LaunchRecord* out, size_t max_records);

  RingStats event_ring_stats(uint32_t ring_index) const;
  RingStats launch_ring_stats() const;
  // Records claimed and not yet read, in the launch ring and the fullest event ring, as a share
  // of that ring's capacity: what an idle drain pass asks before it does anything else (a few
  // loads, no copy, no system call), and how far behind a busy one is.
  struct Backlog {
    uint64_t records = 0;  // launch ring and every event ring, by the heads published
    double fullest = 0;    // the largest backlog / capacity of one ring
    bool ready = false;    // a complete record waits at some ring's tail (the heads of event rings
                           // are published with the counters: a record may be there before them)
  };
  Backlog backlog() const;
  // The `count` kernel slots with the most of `field` (a KernelCounters word, by its offset),
  // most first, from one consistent copy of the counters (an empty list when none could be had):
  // one pass in place over the mapped counters, so a top-N costs O(N) beyond the scan.
  std::vector<std::pair<uint32_t, uint64_t>> top_kernels(size_t field_offset, uint32_t count) const;

  // Kernel table entries published so far (bounds-checked against the arena).
  std::vector<KernelInfo> kernels(uint32_t first_slot = 0, uint32_t max_count = UINT32_MAX) const;
  // The entries of the given slots that are published (others are left out), in that order.
  std::vector<KernelInfo> kernels_at(const std::vector<uint32_t>& slots) const;
  uint32_t kernel_count() const;

  // A consistent copy of the counters and, when asked, the kernels' launch shapes (all under
  // the publish seqlock). False when the producer kept writing during every try: the caller
  // tries again on its next drain.
  // The per-kernel parts cover slots [first_slot, first_slot + max_count) of those published.
  bool counters(GlobalCounters* global, std::vector<KernelCounters>* per_kernel,
                std::vector<KernelShapes>* shapes = nullptr, uint32_t first_slot = 0,
                uint32_t max_count = UINT32_MAX) const;

  // Daemon half of the handshake: validated, written under the seqlock; returns the generation
  // to wait for, or 0 with the reason in *error (nothing written). `ops_steps` > 0 opens an op
  // window of that many engine steps as well.
  uint64_t request_control(uint32_t mode, uint32_t shift, uint32_t patch_set, const std::string& filter,
                           std::string* error, uint32_t ops_steps = 0);
  // A copy of the control block, its applied half no older than the applied_generation it holds.
  ControlBlock control_state() const;

  // Whether the producing process is still the one that created the segment.
  bool producer_alive() const;
  SegmentState state() const;
  // The file still has the size it had at open, and no access has faulted on a page past its
  // end (the guard then replaced the mapping by zeros: nothing read from it is the producer's).
  bool size_intact() const;
  bool faulted() const { return guard_ && guard_->faulted(); }

  const EventAggregates& aggregates() const { return aggregates_; }
  // Events per kind of the last read_events call (counted as they were read: a second pass over
  // a batch's records cost a full-speed drain a sixth of its time).
  const std::array<uint64_t, kEventKindCount>& last_read_kinds() const { return last_read_kinds_; }
  void set_torn_timeout_ns(uint64_t timeout_ns) { torn_timeout_ns_ = timeout_ns; }

 private:
  SegmentReader() = default;
  template <class Record, class Validate>
  size_t read_ring(RingControl& control, Record* ring, uint64_t capacity, Record* out, size_t max_records,
                   uint64_t* pending_since, Validate validate);
  bool claimed_beyond(const RingControl& control, uint64_t tail, uint64_t capacity) const;
  KernelInfo kernel_at(uint32_t slot) const;  // slot < kernel_count()

  std::string path_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::unique_ptr<MappingGuard> guard_;
  SegmentView view_{};
  EventAggregates aggregates_;
  std::array<uint64_t, kEventKindCount> last_read_kinds_{};
  std::vector<uint64_t> event_pending_since_;
  uint64_t launch_pending_since_ = 0;
  uint64_t torn_timeout_ns_ = 1000000000ULL;
};

// Reads only the header and says why the file is not acceptable ("" when it is). Used by open
// and by discovery, so a rejected file is reported with the same words everywhere.
std::string validate_segment_file(int fd, const TrustPolicy& policy, SegmentHeader* header_out);

}  // namespace gpuobs
