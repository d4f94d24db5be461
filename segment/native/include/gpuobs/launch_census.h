// The launch census, counted on the device with no host callback per launch: the leader of a
// launch's block (0,0,0) counts the launch, its grid size and its (grid, block) shape; every
// block leader counts its block. One definition for the patches, gpuobs-synth (which plays the
// device with it) and the host side that turns the device's shape buckets into exact counts.
//
// Only reductions and plain stores, never a value read back: a load or an atomic with a result
// would put a round trip to L2 on the path of every launch (a block leader's dependent loads
// were most of the block set's cost on a graph of small kernels).
//
// Shapes without a table lookup: a launch's shape hashes to one of kShapeBuckets buckets, which
// adds 1 and the hash and stores the shape. When several shapes land in one bucket the stored
// shape is the last one, and the sum of hashes no longer equals launches * hash(stored shape):
// those launches are reported as `other`, never under a wrong shape (a false match needs two
// distinct shapes whose 64-bit hash sums collide).
#pragma once

#include <cstdint>
#include <cstring>

#include "gpuobs/device_state.h"
#include "gpuobs/layout.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"

namespace gpuobs {

// Grid: x in bits 0-31, y in 32-47, z in 48-63 (gridDim.y and .z are at most 65535).
GPUOBS_HD uint64_t pack_grid(uint32_t x, uint32_t y, uint32_t z) {
  return uint64_t(x) | (uint64_t(y & 0xffff) << 32) | (uint64_t(z & 0xffff) << 48);
}
// Block: x, y, z in 16 bits each (at most 1024 threads a block).
GPUOBS_HD uint64_t pack_block(uint32_t x, uint32_t y, uint32_t z) {
  return uint64_t(x & 0xffff) | (uint64_t(y & 0xffff) << 16) | (uint64_t(z & 0xffff) << 32);
}
GPUOBS_HD uint64_t grid_blocks(uint64_t grid) {
  return (grid & 0xffffffffULL) * ((grid >> 32) & 0xffff) * (grid >> 48);
}
// Never 0, so an empty bucket (launches 0, hash_sum 0) is never mistaken for a used one. One
// mixing round over (grid * odd constant + block): the leader of block (0,0,0) computes it before
// the kernel's own code runs, so its chain of dependent multiplies is on the kernel's critical
// path (two rounds were measured at about 2 points of a small-kernel graph's step, with the rest
// of the census). Two shapes share a key only if (grid - grid') * K = block' - block mod 2^64.
GPUOBS_HD uint64_t shape_hash(uint64_t grid, uint64_t block) {
  return fmix64(grid * 0x9e3779b97f4a7c15ULL + block) | 1;
}
GPUOBS_HD uint32_t shape_bucket(uint64_t hash) { return uint32_t(hash >> 61) & (kShapeBuckets - 1); }
static_assert(kShapeBuckets == 8, "shape_bucket takes the top 3 bits");

// The leader of block (0,0,0), once per launch. The bucket's shape is stored as two words: a
// reader that sees one launch's grid beside another's block has a bucket of two shapes, whose
// check fails like any such bucket's (one store of both needed four registers at once, more
// than the block-entry patch has to spare).
GPUOBS_HD void count_launch(DeviceKernelSlot* kernel, uint64_t grid, uint64_t block) {
  ring::add(&kernel->launches, 1);
  ring::add(&kernel->blocks_expected, grid_blocks(grid));
  const uint64_t hash = shape_hash(grid, block);
  DeviceShapeBucket* bucket = &kernel->shapes[shape_bucket(hash)];
  ring::add(&bucket->hash_sum, hash);
  ring::add(&bucket->launches, 1);
#if defined(__CUDA_ARCH__)
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(&bucket->grid), "l"(grid) : "memory");
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(&bucket->block), "l"(block) : "memory");
#else
  __atomic_store_n(&bucket->grid, grid, __ATOMIC_RELAXED);
  __atomic_store_n(&bucket->block, block, __ATOMIC_RELAXED);
#endif
}

// Every block leader: a block counted (counter and up) or one that ran unobserved (off, noop),
// so that observed + unobserved = expected exactly even when a switch lands mid-launch.
GPUOBS_HD void count_block(DeviceKernelSlot* kernel, bool observed, uint32_t sm) {
  ring::add(observed ? &kernel->blocks[sm % kBlockShards] : &kernel->blocks_unobserved[sm % kBlockShards], 1);
}

// Every block leader at exit, where exits are hooked, in every mode: with count_block's, blocks
// in flight come from counts alone.
GPUOBS_HD void count_block_exit(DeviceKernelSlot* kernel, uint32_t sm) {
  ring::add(&kernel->blocks_exited[sm % kBlockShards], 1);
}

// Host: one kernel's device counters as the segment publishes them.
inline KernelCounters census_counters(const DeviceKernelSlot& device) {
  KernelCounters out{};
  out.launches = device.launches;
  out.blocks_expected = device.blocks_expected;
  for (uint64_t blocks : device.blocks) out.blocks_observed += blocks;
  for (uint64_t blocks : device.blocks_unobserved) out.blocks_unobserved += blocks;
  for (uint64_t accesses : device.accesses) out.memory_accesses += accesses;
  out.events_produced = device.events_produced;
  out.events_dropped = device.events_dropped;
  for (uint64_t blocks : device.blocks_exited) out.blocks_exited += blocks;
  return out;
}

// Host: whether a kernel's published counters are all zero (every member of the field table,
// by bytes: a counter added to KernelCounters is covered without a change here).
inline bool counted_nothing(const KernelCounters& counters) {
  static const KernelCounters zero{};
  return std::memcmp(&counters, &zero, sizeof counters) == 0;
}

// Host: the device's shape buckets of one kernel as exact shape counts. A bucket read while a
// launch is halfway through its reductions fails the check and counts as other for that
// snapshot only; a quiescent snapshot is exact.
inline KernelShapes census_shapes(const DeviceKernelSlot& device) {
  KernelShapes out{};
  uint32_t used = 0;
  for (const DeviceShapeBucket& bucket : device.shapes) {
    if (bucket.launches == 0) continue;
    if (bucket.hash_sum != bucket.launches * shape_hash(bucket.grid, bucket.block) || used == kShapesPerKernel) {
      out.other_launches += bucket.launches;
      continue;
    }
    ShapeCount& shape = out.shapes[used++];
    shape.grid_x = uint32_t(bucket.grid);
    shape.grid_y = uint16_t(bucket.grid >> 32);
    shape.grid_z = uint16_t(bucket.grid >> 48);
    shape.block_x = uint16_t(bucket.block);
    shape.block_y = uint16_t(bucket.block >> 16);
    shape.block_z = uint16_t(bucket.block >> 32);
    shape.launches = bucket.launches;
  }
  return out;
}

}  // namespace gpuobs
