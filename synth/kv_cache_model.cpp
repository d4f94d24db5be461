#include "kv_cache_model.h"

#include "gpuobs/layout.h"

namespace gpuobs {
namespace synth {
namespace {

constexpr uint64_t kCacheBase = 0x7d0000000000ULL;  // layer l's cache at kCacheBase + l * kLayerStride
constexpr uint64_t kLayerStride = 0x100000ULL;
constexpr uint32_t kRequestsPerGroup = 4;

// Request k of group g is the (4g + k)th: its blocks are 2q and 2q + 1 of the layer's 64, so a
// block goes to another request 32 requests later.
uint32_t request_block(uint64_t group, uint32_t k, uint32_t position) {
  const uint64_t q = group * kRequestsPerGroup + k;
  return uint32_t((2 * q + position / KvCacheModel::kBlockSize) % KvCacheModel::kBlocks);
}

std::string request_id(uint64_t group, uint32_t k) {
  return "cmpl-synth-" + std::to_string(group) + "-" + std::to_string(k);
}

}  // namespace

EngineStep KvCacheModel::step(uint64_t step) const {
  const uint64_t group = (step - 1) / 3;
  const uint64_t in_group = (step - 1) % 3;
  const uint32_t requests = uint32_t(1 + group % kRequestsPerGroup);
  EngineStep out;
  out.requests = requests;
  auto slots = std::make_shared<std::vector<int64_t>>();
  std::string lines;
  std::string block_lines;  // a `same` step's: only the requests handed a block
  for (uint32_t k = 0; k < requests; ++k) {
    // request k's positions so far: k + 1 in the prefill, then one a step
    const uint32_t first = in_group == 0 ? 0 : k + uint32_t(in_group);
    const uint32_t scheduled = in_group == 0 ? k + 1 : 1;
    std::string blocks;
    for (uint32_t position = first; position < first + scheduled; ++position) {
      const uint32_t block = request_block(group, k, position);
      slots->push_back(int64_t(block) * kBlockSize + position % kBlockSize);
      if (position % kBlockSize == 0) blocks += (blocks.empty() ? "" : ",") + std::to_string(block);
    }
    out.tokens += scheduled;
    if (k) lines += '\n';
    lines += request_id(group, k) + "\t" + std::to_string(scheduled);
    if (!blocks.empty()) {
      lines += "\t" + blocks;
      block_lines += "\n" + request_id(group, k) + "\t\t" + blocks;
    }
  }
  out.slots = std::move(slots);
  const bool layout = (step - 1) % kLayoutEvery == 0;
  const std::string head = layout ? std::string(1, kStepTextDirective) + kStepTextKvCache + " " + layout_json() : "";
  if (in_group == 2) {
    if (block_lines.empty() && !layout) {
      out.flags = kStepSameRequests;
      return out;
    }
    out.text = head + (head.empty() ? "" : "\n") + kStepTextDirective + kStepTextSame + block_lines;
    return out;
  }
  out.text = head + (head.empty() ? "" : "\n") + lines;
  return out;
}

uint64_t KvCacheModel::store_address(uint32_t layer, int64_t slot, uint32_t thread) const {
  // shape (blocks, key/value, positions, 2 heads, 64) of 2-byte elements, blocks first
  const uint64_t block = uint64_t(slot) / kBlockSize;
  const uint64_t position = uint64_t(slot) % kBlockSize;
  const uint64_t half = thread / 128;  // key, then value
  return kCacheBase + layer * kLayerStride + block * 2 * kBlockSize * kRowBytes + half * kBlockSize * kRowBytes +
         position * kRowBytes + (thread % 128) * 2;
}

std::string KvCacheModel::layout_json() const {
  const uint32_t row = kRowBytes / 2;  // elements
  std::string bases;
  for (uint32_t layer = 0; layer < layers_; ++layer)
    bases += (layer ? "," : "") + std::to_string(kCacheBase + layer * kLayerStride);
  return "{\"block_size\":" + std::to_string(kBlockSize) + ",\"element_bytes\":2,\"shape\":[" +
         std::to_string(kBlocks) + ",2," + std::to_string(kBlockSize) + ",2,64],\"strides\":[" +
         std::to_string(2 * kBlockSize * row) + "," + std::to_string(kBlockSize * row) + "," + std::to_string(row) +
         ",64,1],\"block_dim\":0,\"position_dim\":2,\"bases\":[" + bases + "]}";
}

}  // namespace synth
}  // namespace gpuobs
