#include "device_context.h"

#include <algorithm>
#include <cstring>

#include "driver_api.h"
#include "gpuobs/ring_protocol.h"

namespace gpuobs {

std::unique_ptr<DeviceContext> DeviceContext::create(CUcontext context, uint32_t ring_index, SegmentWriter& writer,
                                                     uint32_t initial_flags, std::string* error) {
  DriverApi& api = driver();
  const SegmentView& view = writer.view();
  std::unique_ptr<DeviceContext> state(new DeviceContext());
  state->context_ = context;
  state->ring_index_ = ring_index;
  state->kernel_slots_ = view.caps.kernel_slots;

  // The tool's own stream: read-back copies must not queue behind the program's kernels (a
  // hung kernel would block them forever) nor join a stream that is being captured.
  CUstream stream = nullptr;
  CUresult result = api.stream_create(&stream, CU_STREAM_NON_BLOCKING);
  if (result != CUDA_SUCCESS) {
    *error = std::string("cuStreamCreate: ") + api.error_text(result);
    return nullptr;
  }
  if (sanitizerGetStreamHandle(context, stream, &state->tool_stream_) != SANITIZER_SUCCESS) {
    *error = "sanitizerGetStreamHandle failed";
    return nullptr;
  }

  CUdeviceptr ring_device = 0;
  CUdeviceptr tail_device = 0;
  EventRecord* ring_host = view.event_ring(ring_index);
  if (api.mem_host_get_device_pointer(&ring_device, ring_host, 0) != CUDA_SUCCESS ||
      api.mem_host_get_device_pointer(&tail_device, &view.event_ring_controls[ring_index].tail, 0) != CUDA_SUCCESS) {
    *error = "the segment is not mapped into this context's address space";
    return nullptr;
  }

  const uint64_t bytes = device_state_bytes(state->kernel_slots_);
  void* device = nullptr;
  if (sanitizerAlloc(context, &device, bytes) != SANITIZER_SUCCESS) {
    *error = "sanitizerAlloc of " + std::to_string(bytes) + " bytes failed";
    return nullptr;
  }
  state->device_ = static_cast<uint8_t*>(device);

  // Build the whole initial image on the host and copy it once.
  std::vector<uint8_t> image(bytes, 0);
  auto* header = reinterpret_cast<DeviceContextState*>(image.data());
  header->ring_head = 0;
  header->ring_limit = view.caps.event_ring_records;
  header->moved_limit = view.caps.event_ring_records;
  header->ring = reinterpret_cast<EventRecord*>(ring_device);
  header->consumer_tail = reinterpret_cast<uint64_t*>(tail_device);
  header->ring_capacity = view.caps.event_ring_records;
  header->slots = reinterpret_cast<DeviceKernelSlot*>(state->device_ + device_slots_offset());
  header->kernel_slots = state->kernel_slots_;
  header->ring_index = ring_index;
  auto* spans = reinterpret_cast<DeviceReplaySpan*>(image.data() + device_spans_offset());
  for (uint32_t slot = 0; slot < kReplaySpanSlots; ++slot) spans[slot] = reset_replay_span();
  auto* slots = reinterpret_cast<DeviceKernelSlot*>(image.data() + device_slots_offset());
  for (uint32_t slot = 0; slot < state->kernel_slots_; ++slot) {
    slots[slot].context = reinterpret_cast<DeviceContextState*>(state->device_);
    slots[slot].slot = slot;
    slots[slot].flags = initial_flags;
    slots[slot].ring = reinterpret_cast<EventRecord*>(ring_device);
    slots[slot].ring_mask = view.caps.event_ring_records - 1;
  }
  state->flags_in_place_.assign(state->kernel_slots_, initial_flags);
  state->entry_pc_in_place_.assign(state->kernel_slots_, 0);
  state->consumer_tail_ = &view.event_ring_controls[ring_index].tail;
  state->ring_capacity_ = view.caps.event_ring_records;
  state->limit_written_ = view.caps.event_ring_records;
  if (sanitizerMemcpyHostToDeviceAsync(state->device_, image.data(), bytes, state->tool_stream_) != SANITIZER_SUCCESS ||
      sanitizerStreamSynchronize(state->tool_stream_) != SANITIZER_SUCCESS) {
    *error = "initialising device state failed";
    return nullptr;
  }
  return state;
}

void* DeviceContext::slot_address(uint32_t slot) const {
  return device_ + device_slots_offset() + uint64_t(slot) * sizeof(DeviceKernelSlot);
}

bool DeviceContext::write_slot_headers(const std::vector<uint32_t>* new_flags, const std::vector<uint64_t>& entry_pcs,
                                       std::string* error) {
  const std::vector<uint32_t> flags = new_flags ? *new_flags : flags_in_place_;
  // flags and entry_pc are adjacent in the slot's first line: one copy of both per slot
  static_assert(offsetof(DeviceKernelSlot, entry_pc) == offsetof(DeviceKernelSlot, flags) + sizeof(uint32_t),
                "flags and entry_pc adjacent");
  struct Words {
    uint32_t flags;
    uint64_t entry_pc;
  } __attribute__((packed));
  std::vector<Words> sources;  // stay untouched until the copies are done
  sources.reserve(flags.size());
  for (size_t slot = 0; slot < flags.size() && slot < kernel_slots_; ++slot) {
    const uint64_t entry_pc = slot < entry_pcs.size() ? entry_pcs[slot] : 0;
    if (flags[slot] == flags_in_place_[slot] && entry_pc == entry_pc_in_place_[slot]) continue;
    sources.push_back(Words{flags[slot], entry_pc});
    uint8_t* word = static_cast<uint8_t*>(slot_address(uint32_t(slot))) + offsetof(DeviceKernelSlot, flags);
    if (sanitizerMemcpyHostToDeviceAsync(word, &sources.back(), sizeof(Words), tool_stream_) != SANITIZER_SUCCESS) {
      *error = "writing a kernel's config into device memory failed";
      sanitizerStreamSynchronize(tool_stream_);
      return false;
    }
    flags_in_place_[slot] = flags[slot];
    entry_pc_in_place_[slot] = entry_pc;
  }
  if (!sources.empty() && sanitizerStreamSynchronize(tool_stream_) != SANITIZER_SUCCESS) {
    *error = "waiting for the config copies failed";
    return false;
  }
  return true;
}

bool DeviceContext::ring_limit_stale() const {
  return ring::moved_limit(__atomic_load_n(consumer_tail_, __ATOMIC_ACQUIRE), ring_capacity_, limit_written_) !=
         limit_written_;
}

bool DeviceContext::refresh_ring_limit(std::string* error) {
  const uint64_t limit =
      ring::moved_limit(__atomic_load_n(consumer_tail_, __ATOMIC_ACQUIRE), ring_capacity_, limit_written_);
  if (limit == limit_written_) return true;
  limit_source_ = limit;
  uint8_t* word = device_ + offsetof(DeviceContextState, moved_limit);
  if (sanitizerMemcpyHostToDeviceAsync(word, &limit_source_, sizeof(uint64_t), tool_stream_) != SANITIZER_SUCCESS ||
      sanitizerStreamSynchronize(tool_stream_) != SANITIZER_SUCCESS) {
    *error = "moving the event ring's limit failed";
    return false;
  }
  limit_written_ = limit;
  return true;
}

uint8_t* DeviceContext::replay_word() const {
  return device_ + offsetof(DeviceContextState, config) + offsetof(DeviceConfig, replay);
}

bool DeviceContext::copy_to_replay_word(uint64_t* source, uint64_t value, Sanitizer_StreamHandle stream) {
  *source = value;  // a buffer of its own: the copy reads it when the stream reaches it
  return sanitizerMemcpyHostToDeviceAsync(replay_word(), source, sizeof(uint64_t), stream) == SANITIZER_SUCCESS;
}

bool DeviceContext::push_replay(Sanitizer_StreamHandle stream, uint64_t replay) {
  if (!copy_to_replay_word(&replay_sources_[replay % kReplayBuffers], replay, stream)) return false;
  replayed_.store(true, std::memory_order_release);
  // One word a context: a replay that may overlap another on the device (launched on another
  // stream than the one before it, or while another thread is between its launch's begin and
  // end) can fold into the other's span; both are counted unclean rather than published.
  const uint64_t me = current_thread_id();
  uint64_t open = 0;
  const bool alone = open_thread_.compare_exchange_strong(open, me) || open == me;
  if (!alone) open_thread_.store(me);
  const uint64_t previous = last_replay_.exchange(replay);
  const Sanitizer_StreamHandle previous_stream = last_stream_.exchange(stream);
  if (previous && (!alone || previous_stream != stream)) {
    span_ledger_.taint(previous);
    span_ledger_.taint(replay);
  }
  return true;
}

bool DeviceContext::end_replay(Sanitizer_StreamHandle stream, uint64_t replay) {
  uint64_t me = current_thread_id();
  open_thread_.compare_exchange_strong(me, 0);
  if (copy_to_replay_word(&ended_sources_[replay % kReplayBuffers], replay | kReplayEnded, stream)) return true;
  span_ledger_.taint(replay);  // it may take in the launches after it, up to the next replay
  return false;
}

namespace {
// The image a reset copies into every slot it resets: a run of slots is one copy.
const std::vector<DeviceReplaySpan>& reset_images() {
  static const std::vector<DeviceReplaySpan> images(kReplaySpanSlots, reset_replay_span());
  return images;
}
}  // namespace

bool DeviceContext::read_replay_spans(std::vector<ReplaySpanFound>* found, std::string* error) {
  std::lock_guard<std::mutex> lock(spans_mutex_);  // the tool thread, or retire() on the destroying one
  if (retired()) return true;                      // retire() read its last replays' spans
  uint8_t* word_address = replay_word();
  uint8_t* table_address = device_ + device_spans_offset();
  uint64_t word = 0;
  std::vector<DeviceReplaySpan> table(kReplaySpanSlots);
  // the word before the table: a replay the word says is done has all its entries in the copy
  if (sanitizerMemcpyDeviceToHost(&word, word_address, sizeof word, tool_stream_) != SANITIZER_SUCCESS ||
      sanitizerMemcpyDeviceToHost(table.data(), table_address, table.size() * sizeof(DeviceReplaySpan), tool_stream_) !=
          SANITIZER_SUCCESS) {
    *error = "reading the replay spans failed";
    return false;
  }
  uint64_t word_after_table = 0;
  if (sanitizerMemcpyDeviceToHost(&word_after_table, word_address, sizeof word_after_table, tool_stream_) !=
      SANITIZER_SUCCESS) {
    *error = "reading the replay word after the spans failed";
    return false;
  }
  std::vector<uint32_t> resets;
  span_ledger_.read(word, table.data(), word_after_table, found, &resets);
  if (resets.empty()) return true;
  for (const auto& [first, end] : slot_runs(resets)) {
    if (sanitizerMemcpyHostToDeviceAsync(table_address + uint64_t(first) * sizeof(DeviceReplaySpan),
                                         const_cast<DeviceReplaySpan*>(reset_images().data()),
                                         uint64_t(end - first) * sizeof(DeviceReplaySpan),
                                         tool_stream_) != SANITIZER_SUCCESS) {
      sanitizerStreamSynchronize(tool_stream_);
      span_ledger_.reset_failed(resets);
      *error = "resetting replay spans failed";
      return false;
    }
  }
  uint64_t word_after = 0;
  if (sanitizerStreamSynchronize(tool_stream_) != SANITIZER_SUCCESS ||
      sanitizerMemcpyDeviceToHost(&word_after, word_address, sizeof word_after, tool_stream_) != SANITIZER_SUCCESS) {
    *error = "reading the replay word after a reset failed";
    span_ledger_.reset_failed(resets);
    return false;
  }
  span_ledger_.reset_done(resets, word_after);
  return true;
}

bool DeviceContext::retire(uint32_t kernel_count, std::vector<ReplaySpanFound>* last_spans, std::string* error) {
  std::vector<DeviceKernelSlot> slots;
  ReadBack words;
  const bool read = read_back(kernel_count, &slots, &words, error);
  std::string spans_error;
  if (!read_replay_spans(last_spans, &spans_error) && read) *error = spans_error;
  std::lock_guard<std::mutex> lock(final_mutex_);
  if (read) {
    final_slots_ = std::move(slots);
    final_head_ = words.ring_head;
  }
  retired_.store(true, std::memory_order_release);
  return read;
}

bool DeviceContext::read_back(uint32_t kernel_count, std::vector<DeviceKernelSlot>* slots, ReadBack* words,
                              std::string* error) {
  if (retired()) {
    std::lock_guard<std::mutex> lock(final_mutex_);
    *slots = final_slots_;
    slots->resize(std::min<size_t>(slots->size(), kernel_count));
    words->ring_head = final_head_;
    return true;
  }
  if (kernel_count > kernel_slots_) kernel_count = kernel_slots_;
  slots->resize(kernel_count);
  // The state's words first, counters second: a claim seen in the head has its `produced` seen
  // too, and a replay seen begun has the events of the replays before it in the ring.
  DeviceContextState state{};
  if (sanitizerMemcpyDeviceToHost(&state, device_, sizeof(state), tool_stream_) != SANITIZER_SUCCESS) {
    *error = "reading the ring head failed";
    return false;
  }
  if (kernel_count > 0 && sanitizerMemcpyDeviceToHost(slots->data(), device_ + device_slots_offset(),
                                                      uint64_t(kernel_count) * sizeof(DeviceKernelSlot),
                                                      tool_stream_) != SANITIZER_SUCCESS) {
    *error = "reading the kernel counters failed";
    return false;
  }
  words->ring_head = state.ring_head;
  words->replay_begun = replay_of_word(state.config.replay);
  return true;
}

}  // namespace gpuobs
