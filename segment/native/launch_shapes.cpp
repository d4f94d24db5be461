#include "launch_shapes.h"

namespace gpuobs {

void LaunchShapes::add(const LaunchRecord& record) {
  if (record.kernel_slot >= index_.size()) return;
  uint32_t& index_of = index_[record.kernel_slot];
  if (index_of == 0) {
    entries_.emplace_back();
    entries_.back().slot = record.kernel_slot;
    index_of = uint32_t(entries_.size());
  }
  SlotShapes& slot = entries_[index_of - 1];
  if (record.kind == uint32_t(LaunchKind::GraphNode)) ++slot.graph_launches;
  const uint32_t grid[3] = {record.grid_x, record.grid_y, record.grid_z};
  const uint32_t block[3] = {record.block_x, record.block_y, record.block_z};
  for (uint32_t index = 0; index < slot.used; ++index) {
    LaunchShape& shape = slot.shapes[index];
    if (shape.grid[0] == grid[0] && shape.grid[1] == grid[1] && shape.grid[2] == grid[2] &&
        shape.block[0] == block[0] && shape.block[1] == block[1] && shape.block[2] == block[2]) {
      ++shape.launches;
      return;
    }
  }
  if (slot.used == SlotShapes::kMaxShapes) {
    ++slot.other_launches;
    return;
  }
  LaunchShape& fresh = slot.shapes[slot.used++];
  for (int axis = 0; axis < 3; ++axis) {
    fresh.grid[axis] = grid[axis];
    fresh.block[axis] = block[axis];
  }
  fresh.launches = 1;
}

}  // namespace gpuobs
