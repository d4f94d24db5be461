// The serving engine's KV cache as gpuobs-synth plays it with --steps: which requests each step
// schedules and how many tokens (the pattern write_engine_step has always followed), the cache
// blocks each request is handed, the slot each scheduled token is written to, the step's text as
// the vLLM plugin writes it (layout.h's grammar: request lines with their new blocks, the `same`
// directive, the cache's layout now and then), and the address a cache-write kernel stores to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpuobs {
namespace synth {

// A step as the plugin records it, and the slot of each token it schedules (in the scheduler's
// order: the order a cache-write kernel's blocks take them).
struct EngineStep {
  std::string text;  // empty with flags kStepSameRequests
  uint32_t flags = 0;
  uint32_t requests = 0;
  uint32_t tokens = 0;
  std::shared_ptr<const std::vector<int64_t>> slots;
};

class KvCacheModel {
 public:
  static constexpr uint32_t kBlockSize = 4;       // slots a block
  static constexpr uint32_t kBlocks = 64;         // blocks a layer: handed out again after 32 requests
  static constexpr uint32_t kRowBytes = 256;      // one token's key (or value): 2 heads x 64 x 2 bytes
  static constexpr uint32_t kLayoutEvery = 1000;  // steps between the layout sent again, as the plugin

  explicit KvCacheModel(uint32_t layers) : layers_(layers) {}

  // Step `step` (from 1): its requests change every 3 steps (1 to 4 of them); a group's first
  // step is its prefill (request k schedules k + 1 tokens), the next two decode one token each;
  // the third is flagged as the same requests and tokens, with a `same` text where a request
  // was handed a block in it.
  EngineStep step(uint64_t step) const;

  // The address thread `thread` (of 256: key then value, 2 bytes each) of a cache-write block
  // stores to for `slot` in `layer`.
  uint64_t store_address(uint32_t layer, int64_t slot, uint32_t thread) const;

  uint32_t layers() const { return layers_; }

 private:
  std::string layout_json() const;
  uint32_t layers_;
};

// What one launch of a cache-write kernel writes: its layer and the slot of each of its blocks
// (a block past the step's tokens pads a captured graph's batch and stores nothing).
struct CacheWrite {
  const KvCacheModel* model = nullptr;
  uint32_t layer = 0;
  std::shared_ptr<const std::vector<int64_t>> slots;
};

}  // namespace synth
}  // namespace gpuobs
