// The sampling decision of `sampled` mode, one definition for the patches and gpuobs-synth.
// A pure function of (pc, thread, block): no random state, no memory traffic, and the same
// decision on every replay of a graph, so a sampled PC stays sampled.
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

// Keep the event when the low `shift` bits of the hash are zero: 1 in 2^shift.
GPUOBS_HD bool sample_keep(uint64_t pc, uint32_t thread, uint64_t block, uint32_t shift) {
  const uint64_t mask = (shift >= 64) ? ~0ULL : ((1ULL << shift) - 1);
  return (fmix64(sample_key(pc, thread, block)) & mask) == 0;
}

}  // namespace gpuobs
