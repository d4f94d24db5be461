// The sampling decisions of `sampled` mode, one definition for the patches and gpuobs-synth: of
// accesses, a pure function of (pc, thread, block); of blocks, of (grid id, block, epoch). No
// random state, no memory traffic: one hash (MurmurHash3's finalizer) and one rule (keep when
// its low `shift` bits are zero) for both.
#pragma once

#include <cstdint>

#include "gpuobs/layout.h"  // GPUOBS_HD

namespace gpuobs {

// MurmurHash3's 64-bit finalizer: a bijection that mixes every input bit into every output bit.
GPUOBS_HD uint64_t fmix64(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ULL;
  key ^= key >> 33;
  return key;
}

// Folds the three coordinates into one word before the finalizer: pc in full, the linear
// thread index (< 2^10) and the linear block index rotated away from the pc's low bits.
GPUOBS_HD uint64_t sample_key(uint64_t pc, uint32_t thread, uint64_t block) {
  const uint64_t rotated_block = (block << 23) | (block >> 41);
  return pc ^ (uint64_t(thread) << 48) ^ rotated_block;
}

// Keep what `key` stands for when the low `shift` bits of its hash are zero: 1 in 2^shift.
GPUOBS_HD bool keep_key(uint64_t key, uint32_t shift) {
  const uint64_t mask = (shift >= 64) ? ~0ULL : ((1ULL << shift) - 1);
  return (fmix64(key) & mask) == 0;
}

// An access: the same (pc, thread, block) is kept in every launch, so a sampled PC stays sampled.
GPUOBS_HD bool sample_keep(uint64_t pc, uint32_t thread, uint64_t block, uint32_t shift) {
  return keep_key(sample_key(pc, thread, block), shift);
}

// A block, in kernels without access hooks (`sampled` in the block set). Keyed by the launch's
// grid id, the block and an epoch of device time, so that the choice rotates: an eager launch's
// grid id is new at every launch, but a graph node keeps its grid id in every replay, and a
// choice by (grid id, block) alone would follow the same few blocks of a graph for the life of
// the process (a node of 1 block at shift 10 would almost never be seen). The epoch is
// %globaltimer >> kBlockEpochShift (33.6 ms): read by the patch itself, with no load, where a
// rotation with the replay number would put a second load from memory on every block's path.
// A block's enter and exit both decide; an exit decides by its own epoch and the one before
// (block_exit_choice), so a block shorter than an epoch never loses its exit.
constexpr uint32_t kBlockEpochShift = 25;
GPUOBS_HD uint64_t block_epoch(uint64_t globaltimer_ns) { return globaltimer_ns >> kBlockEpochShift; }
GPUOBS_HD uint64_t block_sample_key(uint64_t grid_id, uint64_t block, uint64_t epoch) {
  // thread 1023 + 1 never occurs in an access key (threads < 1024), so no block key is an access's
  return sample_key(grid_id ^ (epoch * 0x9e3779b97f4a7c15ULL), 1024, block);
}
GPUOBS_HD bool block_sample_keep(uint64_t grid_id, uint64_t block, uint64_t epoch, uint32_t shift) {
  return keep_key(block_sample_key(grid_id, block, epoch), shift);
}
// Whether a sampled block's exit is recorded, at device time `now_ns`: 0 no; 1 its epoch's choice
// keeps it; 2 only the epoch before keeps it (its enter may be there: kBlockEarlierEpoch).
GPUOBS_HD uint32_t block_exit_choice(uint64_t grid_id, uint64_t block, uint64_t now_ns, uint32_t shift) {
  const uint64_t epoch = block_epoch(now_ns);
  if (block_sample_keep(grid_id, block, epoch, shift)) return 1;
  return epoch > 0 && block_sample_keep(grid_id, block, epoch - 1, shift) ? 2 : 0;
}

}  // namespace gpuobs
