#include "simulated_device.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "gpuobs/launch_census.h"
#include "gpuobs/ring_protocol.h"
#include "gpuobs/sample_hash.h"
#include "gpuobs/shm_segment.h"

namespace gpuobs {
namespace synth {
namespace {

constexpr uint32_t kWarpLanes = 32;
constexpr uint32_t kSmCount = 132;

void device_add(uint64_t* word, uint64_t delta) { __atomic_fetch_add(word, delta, __ATOMIC_RELAXED); }

// A copy of device memory another thread is updating (a kernel slot, a replay's span): one relaxed
// load per word, as a copy from a running device reads it.
template <class Words>
Words load_words(const Words& from) {
  static_assert(sizeof(Words) % sizeof(uint64_t) == 0, "whole words");
  Words copy;
  const uint64_t* source = reinterpret_cast<const uint64_t*>(&from);
  uint64_t* to = reinterpret_cast<uint64_t*>(&copy);
  for (size_t word = 0; word < sizeof(Words) / sizeof(uint64_t); ++word) to[word] = ring::load_relaxed(source + word);
  return copy;
}

// The host writing device memory the device thread reads: one relaxed store per word.
template <class Words>
void store_words(Words* to, const Words& from) {
  static_assert(sizeof(Words) % sizeof(uint64_t) == 0, "whole words");
  const uint64_t* source = reinterpret_cast<const uint64_t*>(&from);
  uint64_t* target = reinterpret_cast<uint64_t*>(to);
  for (size_t word = 0; word < sizeof(Words) / sizeof(uint64_t); ++word)
    ring::store_relaxed(target + word, source[word]);
}

}  // namespace

SimulatedDevice::SimulatedDevice(SegmentWriter* writer, uint32_t kernel_slots)
    : writer_(writer),
      kernels_(kernel_slots, DeviceKernelSlot{}),
      heads_(writer->view().caps.event_rings, 0),
      limits_(writer->view().caps.event_rings, 0),
      reserved_(writer->view().caps.event_rings, 0),
      spans_(kReplaySpanSlots, reset_replay_span()) {}

void SimulatedDevice::emit(uint32_t ring_index, const EventRecord* bodies, uint32_t count, uint32_t slot) {
  if (count == 0) return;
  events_produced_.fetch_add(count, std::memory_order_relaxed);
  device_add(&kernels_[slot].events_produced, count);
  const ring::ProducerView producer =
      writer_->event_ring_producer(ring_index, &heads_[ring_index], &reserved_[ring_index], &limits_[ring_index]);
  uint64_t first = 0;
  if (!ring::claim(producer, count, &first)) {
    events_dropped_.fetch_add(count, std::memory_order_relaxed);
    device_add(&kernels_[slot].events_dropped, count);
    return;
  }
  EventRecord* ring_base = writer_->view().event_ring(ring_index);
  const uint64_t mask = producer.capacity - 1;
  for (uint32_t lane = 0; lane < count; ++lane) {
    const uint64_t ticket = first + lane;
    EventRecord* record = ring_base + (ticket & mask);
    ring::mark_writing(&record->seq, ticket);
    std::memcpy(record, &bodies[lane], offsetof(EventRecord, seq));
    ring::commit(&record->seq, ticket);
  }
}

uint64_t SimulatedDevice::run(const LaunchShape& launch, const KernelProfile& profile, const DeviceConfig& config) {
  const uint64_t blocks = uint64_t(launch.grid_x) * launch.grid_y * launch.grid_z;
  const Mode mode = config.mode;
  DeviceKernelSlot& counters = kernels_[launch.slot];
  // Launches run one after another: a replay begun means the ones before it finished.
  if (launch.replay > replay_begun()) {
    ring::store_release(&replay_word_, launch.replay);  // the host's copy ahead of the replay's nodes
  }
  count_launch(&counters, pack_grid(launch.grid_x, launch.grid_y, launch.grid_z),
               pack_block(launch.block_threads, 1, 1));
  // the patches' own decision, from the config word the injector would write for this kernel
  const uint32_t flags = make_flags(make_config(mode, config.shift), config.captured, config.access_hooked,
                                    config.launch_times, config.replay_spans);
  if (spans_replays(flags)) note_replay_span(spans_.data(), ring::load_acquire(&replay_word_), realtime_ns());
  // the host's copy of the replay's end after its last node (in every mode, as the injector)
  if (launch.ends_replay && config.replay_spans) ring::store_release(&replay_word_, launch.replay | kReplayEnded);
  const BlockCapture capture = block_capture(flags);
  const bool observed = mode >= Mode::Counter;
  for (uint64_t block = 0; block < blocks; ++block) count_block(&counters, observed, uint32_t(block % kSmCount));
  // gpuobs-synth hooks block exits (kBlockExitsHooked): every block exits, counted in every mode,
  // before the launch's events are written (a block's exit is counted before a later launch runs)
  for (uint64_t block = 0; block < blocks; ++block) count_block_exit(&counters, uint32_t(block % kSmCount));
  if (!observed) return 2 * blocks;
  blocks_.fetch_add(blocks, std::memory_order_relaxed);
  // the access patch runs only in kernels with the access hooks, and works in the access modes
  const bool accesses = config.access_hooked && mode >= Mode::Memory;
  if (capture == BlockCapture::None && !accesses) return 2 * blocks;

  EventRecord bodies[kWarpLanes];
  std::memset(bodies, 0, sizeof(bodies));
  for (EventRecord& body : bodies) {
    body.grid_id = launch.grid_id;
    body.kernel_slot = launch.slot;
    body.replay = uint32_t(launch.replay);
  }
  uint64_t work = 0;
  uint64_t block_index = 0;
  for (uint32_t z = 0; z < launch.grid_z; ++z) {
    for (uint32_t y = 0; y < launch.grid_y; ++y) {
      for (uint32_t x = 0; x < launch.grid_x; ++x, ++block_index) {
        // as the block-entry patch's leader: its enter (every block, or the hash's 1 in 2^shift),
        // then from block (0,0,0) the launch
        const uint64_t enter_ns = realtime_ns();
        bool entered = false;
        if (capture == BlockCapture::Every) {
          entered = true;
          emit_block_event(launch, profile, x, y, z, block_index, false, enter_ns);
        } else if (capture == BlockCapture::Sampled &&
                   block_sample_keep(launch.grid_id, block_index, block_epoch(enter_ns), config.shift)) {
          entered = true;
          emit_block_event(launch, profile, x, y, z, block_index, false, enter_ns, kBlockSampled);
        }
        if (block_index == 0 && (entered || capture == BlockCapture::Launches)) emit_launch_event(launch, profile);
        if (accesses) {
          work += run_block_accesses(launch, profile, config, x, y, z, block_index, bodies);
        } else {
          work += 2;
        }
        // as the exit patch's leader
        const uint64_t exit_ns = realtime_ns();
        if (capture == BlockCapture::Every) {
          emit_block_event(launch, profile, x, y, z, block_index, true, exit_ns);
        } else if (capture == BlockCapture::Sampled) {
          const uint32_t choice = block_exit_choice(launch.grid_id, block_index, exit_ns, config.shift);
          if (choice)
            emit_block_event(launch, profile, x, y, z, block_index, true, exit_ns,
                             uint16_t(kBlockSampled | (choice == 2 ? kBlockEarlierEpoch : 0)));
        }
      }
    }
  }
  return work;
}

uint64_t SimulatedDevice::run_block_accesses(const LaunchShape& launch, const KernelProfile& profile,
                                             const DeviceConfig& config, uint32_t x, uint32_t y, uint32_t z,
                                             uint64_t block_index, EventRecord* bodies) {
  // every thread executes every access instruction once; a cache-write block past the step's
  // tokens (a captured graph's padding) returns before any
  const CacheWrite& cache = launch.cache;
  const bool padding = cache.model != nullptr && block_index >= cache.slots->size();
  const uint16_t sm = uint16_t(block_index % kSmCount);
  const uint64_t block_accesses = padding ? 0 : uint64_t(launch.block_threads) * profile.accesses_per_thread;
  device_add(&kernels_[launch.slot].accesses[sm % kAccessShards], block_accesses);
  memory_accesses_.fetch_add(block_accesses, std::memory_order_relaxed);
  if (!config.captured || padding) return block_accesses;
  for (uint32_t access = 0; access < profile.accesses_per_thread; ++access) {
    const uint64_t pc = profile.access_offsets.empty() ? profile.base_pc + 0x100 + 0x10 * access
                                                       : profile.base_pc + profile.access_offsets[access];
    for (uint32_t warp_base = 0; warp_base < launch.block_threads; warp_base += kWarpLanes) {
      uint32_t lanes = 0;
      for (uint32_t lane = 0; lane < kWarpLanes && warp_base + lane < launch.block_threads; ++lane) {
        const uint32_t thread = warp_base + lane;
        if (config.mode == Mode::Sampled && !sample_keep(pc, thread, block_index, config.shift)) continue;
        EventRecord& body = bodies[lanes++];
        body.globaltimer_ns = realtime_ns();
        body.pc = pc;
        const bool store = access & 1;
        const bool to_cache = store && cache.model != nullptr;
        body.address = to_cache ? cache.model->store_address(cache.layer, (*cache.slots)[block_index], thread)
                                : 0x7e0000000000ULL + (block_index * launch.block_threads + thread) * 16 + access * 4;
        body.block_x = x;
        body.block_y = uint16_t(y);
        body.block_z = uint16_t(z);
        body.thread = uint16_t(thread);
        body.sm_id = sm;
        body.kind = uint8_t(EventKind::MemoryAccess);
        body.access_bytes = to_cache ? 2 : 4;
        body.flags = store ? kAccessWrite : kAccessRead;
      }
      emit(launch.ring, bodies, lanes, launch.slot);
    }
  }
  return block_accesses;
}

void SimulatedDevice::emit_launch_event(const LaunchShape& launch, const KernelProfile& profile) {
  EventRecord body;
  std::memset(&body, 0, sizeof(body));
  body.globaltimer_ns = realtime_ns();
  body.pc = profile.base_pc;
  body.address = pack_grid(launch.grid_x, launch.grid_y, launch.grid_z);
  body.grid_id = launch.grid_id;
  body.block_x = launch.block_threads;
  body.block_y = 1;
  body.block_z = 1;
  body.kernel_slot = launch.slot;
  body.replay = uint32_t(launch.replay);
  body.kind = uint8_t(EventKind::Launch);
  emit(launch.ring, &body, 1, launch.slot);
}

void SimulatedDevice::emit_block_event(const LaunchShape& launch, const KernelProfile& profile, uint32_t x, uint32_t y,
                                       uint32_t z, uint64_t block_index, bool exit, uint64_t time_ns, uint16_t flags) {
  EventRecord body;
  std::memset(&body, 0, sizeof(body));
  body.grid_id = launch.grid_id;
  body.kernel_slot = launch.slot;
  body.replay = uint32_t(launch.replay);
  body.globaltimer_ns = time_ns;
  body.flags = flags;
  body.pc = profile.base_pc + (exit ? 0xff0 : 0);
  body.block_x = x;
  body.block_y = uint16_t(y);
  body.block_z = uint16_t(z);
  body.sm_id = uint16_t(block_index % kSmCount);
  body.kind = uint8_t(exit ? EventKind::BlockExit : EventKind::BlockEnter);
  emit(launch.ring, &body, 1, launch.slot);
}

void SimulatedDevice::run_held(const LaunchShape& launch, const KernelProfile& profile, double seconds,
                               const std::atomic<bool>& stop) {
  const uint64_t blocks = uint64_t(launch.grid_x) * launch.grid_y * launch.grid_z;
  DeviceKernelSlot& counters = kernels_[launch.slot];
  count_launch(&counters, pack_grid(launch.grid_x, launch.grid_y, launch.grid_z),
               pack_block(launch.block_threads, 1, 1));
  emit_launch_event(launch, profile);
  for (uint64_t block = 0; block < blocks; ++block) count_block(&counters, true, uint32_t(block % kSmCount));
  blocks_.fetch_add(blocks, std::memory_order_relaxed);
  for (int exit = 0; exit < 2; ++exit) {
    uint64_t block_index = 0;
    for (uint32_t z = 0; z < launch.grid_z; ++z)
      for (uint32_t y = 0; y < launch.grid_y; ++y)
        for (uint32_t x = 0; x < launch.grid_x; ++x, ++block_index)
          emit_block_event(launch, profile, x, y, z, block_index, exit != 0, realtime_ns());
    if (exit)  // released: every block exits
      for (uint64_t block = 0; block < blocks; ++block) count_block_exit(&counters, uint32_t(block % kSmCount));
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!exit && !stop.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void SimulatedDevice::publish_replay_spans() {
  // as the tool thread: the word, then the table, one word at a time while the device runs on
  const uint64_t word = ring::load_acquire(&replay_word_);
  std::vector<DeviceReplaySpan> table(kReplaySpanSlots);
  for (uint32_t slot = 0; slot < kReplaySpanSlots; ++slot) table[slot] = load_words(spans_[slot]);
  std::vector<ReplaySpanFound> found;
  std::vector<uint32_t> resets;
  span_ledger_.read(word, table.data(), ring::load_acquire(&replay_word_), &found, &resets);
  for (const ReplaySpanFound& span : found) writer_->write_replay_span(span, 0);
  const DeviceReplaySpan reset = reset_replay_span();
  for (uint32_t slot : resets) store_words(&spans_[slot], reset);
  span_ledger_.reset_done(resets, ring::load_acquire(&replay_word_));
}

void SimulatedDevice::publish(bool quiescent) {
  DeviceSnapshot snapshot;
  // Dropped before produced: a racing snapshot may show an event produced but not yet
  // resolved, never one dropped but not produced.
  snapshot.events_dropped = events_dropped_.load(std::memory_order_acquire);
  snapshot.ring_heads.resize(heads_.size());
  for (size_t ring_index = 0; ring_index < heads_.size(); ++ring_index)
    snapshot.ring_heads[ring_index] = __atomic_load_n(&heads_[ring_index], __ATOMIC_ACQUIRE);
  snapshot.events_produced = events_produced_.load(std::memory_order_acquire);
  snapshot.memory_accesses = memory_accesses_.load(std::memory_order_relaxed);
  snapshot.blocks = blocks_.load(std::memory_order_relaxed);
  snapshot.quiescent = quiescent;
  snapshot.replay_begun = replay_begun();
  {
    std::lock_guard<std::mutex> lock(spans_mutex_);
    publish_replay_spans();  // after the word the snapshot says: its done replays are read
    snapshot.replay_spans = span_ledger_.published();
    snapshot.replay_spans_unclean = span_ledger_.unclean();
  }
  std::vector<KernelCounters> kernels(kernels_.size());
  std::vector<KernelShapes> shapes(kernels_.size());
  for (size_t slot = 0; slot < kernels_.size(); ++slot) {
    const DeviceKernelSlot copy = load_words(kernels_[slot]);
    kernels[slot] = census_counters(copy);
    shapes[slot] = census_shapes(copy);
    snapshot.launches += kernels[slot].launches;
  }
  snapshot.kernels = kernels.data();
  snapshot.shapes = shapes.data();
  snapshot.kernel_count = uint32_t(kernels_.size());
  writer_->publish(snapshot);
}

void SimulatedDevice::write_half_record(uint32_t ring_index, uint32_t slot) {
  events_produced_.fetch_add(1, std::memory_order_relaxed);
  const ring::ProducerView producer =
      writer_->event_ring_producer(ring_index, &heads_[ring_index], &reserved_[ring_index], &limits_[ring_index]);
  uint64_t ticket = 0;
  if (!ring::claim(producer, 1, &ticket)) {
    events_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  publish(false);  // the published head covers the claimed ticket, as a device snapshot may
  EventRecord* record = writer_->view().event_ring(ring_index) + (ticket & (producer.capacity - 1));
  ring::mark_writing(&record->seq, ticket);
  record->kernel_slot = slot;
  record->pc = 0xdead;
}

}  // namespace synth
}  // namespace gpuobs
