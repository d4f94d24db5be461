// CUfunction -> kernel slot, looked up on every launch without a lock: open addressing over a
// fixed table with atomic keys. Only the first launch of a function takes the registration path.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace gpuobs {

class FunctionSlots {
 public:
  static constexpr int64_t kPending = -2;  // another thread is registering this function
  static constexpr int64_t kFull = -3;     // table full: the launch goes unattributed

  explicit FunctionSlots(uint32_t capacity_pow2) : mask_(capacity_pow2 - 1), entries_(new Entry[capacity_pow2]) {}

  // A function whose module unloads: the driver may hand the same handle to a new function, which
  // must get a slot (and a binding) of its own. Its entry becomes a tombstone, never reused (the
  // table is sized for every function a process loads; beyond it launches go unattributed).
  void forget(uint64_t function) {
    uint64_t index = mix(function) & mask_;
    for (uint64_t probes = 0; probes <= mask_; ++probes, index = (index + 1) & mask_) {
      Entry& entry = entries_[index];
      const uint64_t key = entry.key.load(std::memory_order_acquire);
      if (key == 0) return;
      if (key == function) {
        entry.key.store(kTombstone, std::memory_order_release);
        return;
      }
    }
  }

  // The slot of `function`, registering it with `make_slot(function)` on first sight.
  template <class MakeSlot>
  int64_t find_or_add(uint64_t function, MakeSlot make_slot) {
    uint64_t index = mix(function) & mask_;
    for (uint64_t probes = 0; probes <= mask_; ++probes, index = (index + 1) & mask_) {
      Entry& entry = entries_[index];
      uint64_t key = entry.key.load(std::memory_order_acquire);
      if (key == 0) {
        uint64_t empty = 0;
        if (entry.key.compare_exchange_strong(empty, function, std::memory_order_acq_rel)) {
          const int64_t slot = make_slot(function);
          entry.slot_plus_one.store(slot < 0 ? -1 : slot + 1, std::memory_order_release);
          return slot;
        }
        key = empty;
      }
      if (key == function) {
        const int64_t stored = entry.slot_plus_one.load(std::memory_order_acquire);
        if (stored == 0) return kPending;
        return stored < 0 ? -1 : stored - 1;
      }
    }
    return kFull;
  }

 private:
  static constexpr uint64_t kTombstone = 1;  // no CUfunction handle is odd
  struct Entry {
    std::atomic<uint64_t> key{0};
    std::atomic<int64_t> slot_plus_one{0};
  };
  static uint64_t mix(uint64_t value) { return (value >> 4) * 0x9e3779b97f4a7c15ULL >> 16; }
  uint64_t mask_;
  std::unique_ptr<Entry[]> entries_;
};

}  // namespace gpuobs
