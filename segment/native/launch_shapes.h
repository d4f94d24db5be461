// Per kernel slot, the (grid, block) shapes its launches had, counted as the reader hands the
// launch records on: the daemon gets exact shape counts without touching each record in Python.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "gpuobs/layout.h"

namespace gpuobs {

struct LaunchShape {
  uint32_t grid[3];
  uint32_t block[3];
  uint64_t launches;
};

struct SlotShapes {
  static constexpr uint32_t kMaxShapes = 8;  // distinct shapes kept per kernel
  uint32_t slot = 0;
  std::array<LaunchShape, kMaxShapes> shapes{};
  uint32_t used = 0;
  uint64_t other_launches = 0;  // launches with a shape beyond the first kMaxShapes
  uint64_t graph_launches = 0;  // launches that were graph node executions
};

// Entries exist only for kernels that were launched: 4 bytes per slot otherwise.
class LaunchShapes {
 public:
  explicit LaunchShapes(uint32_t kernel_slots = 0) : index_(kernel_slots, 0) {}
  // A validated kernel launch record (kind Eager or GraphNode, slot in range).
  void add(const LaunchRecord& record);
  const std::vector<SlotShapes>& launched() const { return entries_; }

 private:
  std::vector<uint32_t> index_;  // per slot: 1 + its entry, 0 when never launched
  std::vector<SlotShapes> entries_;
};

}  // namespace gpuobs
