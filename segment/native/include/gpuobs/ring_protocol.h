// The ring protocol, written once for the host (gpuobs-synth, the injector's host callbacks)
// and the device (patch functions): reserve room, claim tickets, write the record, store seq
// last. Drop-newest: a producer that finds the ring full counts a drop and returns; it never
// waits for the consumer and never overwrites an unread record. Why a reservation and not a
// plain fetch_add or a CAS loop: see claim() below.
#pragma once

#include <cstdint>

#include "gpuobs/layout.h"

namespace gpuobs {
namespace ring {

// Device side: explicit global-space PTX with the scope each word needs. Plain atomics on a
// generic pointer compiled to a shared-memory check and a CAS-spin fallback per call, and
// volatile+__threadfence_system to a full L1 invalidate; patches cannot afford either.
GPUOBS_HD uint64_t load_acquire(const uint64_t* word) {
#if defined(__CUDA_ARCH__)
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(word) : "memory");
  return value;
#else
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
#endif
}

GPUOBS_HD uint64_t load_relaxed(const uint64_t* word) {
#if defined(__CUDA_ARCH__)
  uint64_t value;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(word) : "memory");
  return value;
#else
  return __atomic_load_n(word, __ATOMIC_RELAXED);
#endif
}

GPUOBS_HD void store_release(uint64_t* word, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
#else
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
#endif
}

GPUOBS_HD void store_relaxed(uint64_t* word, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
#else
  __atomic_store_n(word, value, __ATOMIC_RELAXED);
#endif
}

GPUOBS_HD uint64_t fetch_add(uint64_t* word, uint64_t delta) {
#if defined(__CUDA_ARCH__)
  uint64_t before;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(before) : "l"(word), "l"(delta) : "memory");
  return before;
#else
  // acq_rel: a producer's earlier count (`produced`) is never seen after its claim
  return __atomic_fetch_add(word, delta, __ATOMIC_ACQ_REL);
#endif
}

// fetch_add whose result nobody reads (a counter): a reduction, cheaper on the device.
GPUOBS_HD void add(uint64_t* word, uint64_t delta) {
#if defined(__CUDA_ARCH__)
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(word), "l"(delta) : "memory");
#else
  __atomic_fetch_add(word, delta, __ATOMIC_RELAXED);
#endif
}

GPUOBS_HD void fetch_max(uint64_t* word, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("red.relaxed.gpu.global.max.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
#else
  uint64_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
  while (seen < value && !__atomic_compare_exchange_n(word, &seen, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

GPUOBS_HD void fetch_min(uint64_t* word, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("red.relaxed.gpu.global.min.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
#else
  uint64_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
  while (seen > value && !__atomic_compare_exchange_n(word, &seen, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

// The producer's view of one ring. `head`, `reserved` and `limit` live where the producer's
// atomics are cheap (device memory for the GPU, the segment for host producers);
// `consumer_tail` is the reader's position in the segment, read only when the cached limit
// says the ring looks full.
struct ProducerView {
  uint64_t* head;      // tickets handed out: every one of them will be written
  uint64_t* reserved;  // room promised, including promises being taken back
  uint64_t* limit;     // cached consumer tail + capacity
  const uint64_t* consumer_tail;
  uint64_t capacity;  // power of two
  // Device producers: the consumer's tail is read over PCIe at most once per
  // kTailRefreshNs (a device-clock deadline kept here); nullptr: read it whenever needed.
  uint64_t* refresh_after = nullptr;
};

// Without this bound, a full ring with no reader (no daemon) sent every dropped event on a
// PCIe round trip for the tail: `blocks` ran 13x slower than with a reader draining.
constexpr uint64_t kTailRefreshNs = 20000;

// Claims `count` consecutive tickets. False when the ring has no room for all of them: the
// caller counts `count` drops. Never waits, never retries.
//
// Room is reserved first and the ticket taken second, both with fetch_add: a reservation that
// finds no room is taken back and nothing is claimed, so every ticket handed out is below
// tail + capacity and will be written (no hole for the in-order reader to stall on). A
// compare-and-swap loop on the head was measured first: under a few hundred concurrent block
// leaders only one claim succeeds per round trip, and `blocks` mode ran 111x slower.
// A reservation racing with one being taken back may see the ring fuller than it is and drop:
// conservative, and counted like any drop.
GPUOBS_HD bool claim(const ProducerView& view, uint32_t count, uint64_t* first_ticket) {
  const uint64_t promised = fetch_add(view.reserved, count) + count;
  uint64_t limit = load_relaxed(view.limit);
  if (promised > limit) {
    bool refresh = true;
#if defined(__CUDA_ARCH__)
    if (view.refresh_after != nullptr) {
      uint64_t now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      refresh = now >= load_relaxed(view.refresh_after);
      if (refresh) fetch_max(view.refresh_after, now + kTailRefreshNs);
    }
#endif
    if (refresh) {
      limit = load_acquire(view.consumer_tail) + view.capacity;
      fetch_max(view.limit, limit);
    }
    if (promised > limit) {
      fetch_add(view.reserved, uint64_t(0) - count);
      return false;
    }
  }
  *first_ticket = fetch_add(view.head, count);
  return true;
}

// claim() without ever reading the consumer's tail: the cached limit alone decides, and the
// tool thread keeps it current (a device producer with no room for a register-hungry refresh,
// the block-entry patch). Conservative like claim(): a stale limit means a counted drop.
GPUOBS_HD bool claim_cached(const ProducerView& view, uint32_t count, uint64_t* first_ticket) {
  const uint64_t promised = fetch_add(view.reserved, count) + count;
  if (promised > load_relaxed(view.limit)) {
    add(view.reserved, uint64_t(0) - count);
    return false;
  }
  *first_ticket = fetch_add(view.head, count);
  return true;
}

// The limit that keeps a claim_cached producer going: the consumer's tail + capacity once the
// consumer has read an eighth of the ring since the limit was last moved (so that a moving
// consumer costs one move per eighth of the ring), else the limit as it is.
GPUOBS_HD uint64_t moved_limit(uint64_t consumer_tail, uint64_t capacity, uint64_t current) {
  const uint64_t limit = consumer_tail + capacity;
  return limit >= current + capacity / 8 ? limit : current;
}

// Marks a claimed slot as being written. Not ordered before the body on purpose: its only job
// is to let a reader tell a torn slot (writer died) from a slot not yet claimed.
GPUOBS_HD void mark_writing(uint64_t* seq_word, uint64_t ticket) {
  store_relaxed(seq_word, (ticket + 1) | kSeqWriting);
}

// Publishes a fully written record: every earlier store becomes visible before seq.
GPUOBS_HD void commit(uint64_t* seq_word, uint64_t ticket) { store_release(seq_word, ticket + 1); }

// Claims one slot, writes `body` (all but its seq) and commits it. False: ring full, the
// caller counts one drop. Record is EventRecord or LaunchRecord (seq is their last word).
// `cached`: claim as claim_cached does (a producer whose limit someone else moves).
template <class Record>
GPUOBS_HD bool put(const ProducerView& view, Record* ring, const Record& body, bool cached = false) {
  uint64_t ticket = 0;
  if (!(cached ? claim_cached(view, 1, &ticket) : claim(view, 1, &ticket))) return false;
  Record* slot = ring + (ticket & (view.capacity - 1));
  mark_writing(&slot->seq, ticket);
  constexpr unsigned kWords = (sizeof(Record) - sizeof(uint64_t)) / sizeof(uint64_t);
  const uint64_t* from = reinterpret_cast<const uint64_t*>(&body);
  uint64_t* to = reinterpret_cast<uint64_t*>(slot);
  for (unsigned word = 0; word < kWords; ++word) to[word] = from[word];
  commit(&slot->seq, ticket);
  return true;
}

}  // namespace ring
}  // namespace gpuobs
