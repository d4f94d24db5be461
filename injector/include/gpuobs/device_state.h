// What the patches read and write in device memory, one struct per CUDA context, shared by the
// patch functions (device) and the injector (host). Not part of the segment: the host copies
// counters out of it into the segment, and copies config into it when the daemon changes it.
//
// Hot config lives here, in device memory: DEVICE.md measured ~35 ns per call for a config
// word read from host-mapped memory in a per-access hook, and ~0 from device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuobs/layout.h"

namespace gpuobs {

constexpr uint32_t kBlockShards = 8;    // blocks counters per kernel, picked by %smid
constexpr uint32_t kAccessShards = 16;  // access counters per kernel, picked by %smid

struct DeviceContextState;

// Per kernel slot; the patch's userdata points here (bound to the CUfunction, never per
// launch: per-launch data misbehaved under graph replay, DEVICE.md pitfall 4).
struct alignas(256) DeviceKernelSlot {
  DeviceContextState* context;  // back pointer, written once at context creation
  uint32_t slot;
  uint32_t reserved0;
  uint64_t blocks[kBlockShards];
  uint64_t accesses[kAccessShards];
  uint64_t events_produced;
  uint64_t events_dropped;
  uint64_t reserved[4];
};
static_assert(sizeof(DeviceKernelSlot) == 256, "DeviceKernelSlot is 256 bytes");

// Config word: mode in bits 0-7, shift in bits 8-15.
GPUOBS_HD constexpr uint64_t make_config(Mode mode, uint32_t shift) { return uint64_t(mode) | (uint64_t(shift & 0xff) << 8); }
GPUOBS_HD constexpr uint32_t config_mode(uint64_t config) { return uint32_t(config & 0xff); }
GPUOBS_HD constexpr uint32_t config_shift(uint64_t config) { return uint32_t((config >> 8) & 0xff); }

// The part the host rewrites when the config changes: one contiguous copy.
struct DeviceConfig {
  uint64_t config;
  uint64_t generation;
  uint64_t replay;  // replay sequence of the graph launch in progress (graphs issue)
  uint64_t reserved;
  // followed by uint8_t capture[kernel_slots]: 1 when the kernel filter lets the slot record
};
static_assert(sizeof(DeviceConfig) == 32, "DeviceConfig is 32 bytes");

struct alignas(256) DeviceContextState {
  // ring (device-written words on their own line)
  uint64_t ring_head;      // tickets claimed
  uint64_t ring_limit;     // cached consumer tail + capacity
  uint64_t ring_reserved;  // room promised (ring::claim)
  uint64_t ring_refresh_after;  // device-clock time before which the tail is not re-read
  uint64_t reserved0[4];
  // ring description (host-written once)
  EventRecord* ring;               // host-mapped event ring in the segment
  uint64_t* consumer_tail;         // host-mapped RingControl::tail in the segment
  uint64_t ring_capacity;          // power of two
  const uint8_t* capture;          // [kernel_slots]
  DeviceKernelSlot* slots;         // [kernel_slots]
  uint32_t kernel_slots;
  uint32_t ring_index;
  uint64_t reserved1[2];
  DeviceConfig config;             // mirrored from the host on change
  uint64_t reserved2[12];
};
static_assert(sizeof(DeviceContextState) == 256, "DeviceContextState header is 256 bytes");
static_assert(offsetof(DeviceContextState, config) % 32 == 0, "config block aligned");

// Layout of one context's device allocation: state, slots, capture bytes.
constexpr uint64_t device_slots_offset() { return sizeof(DeviceContextState); }
constexpr uint64_t device_capture_offset(uint32_t kernel_slots) {
  return device_slots_offset() + uint64_t(kernel_slots) * sizeof(DeviceKernelSlot);
}
constexpr uint64_t device_state_bytes(uint32_t kernel_slots) {
  return device_capture_offset(kernel_slots) + ((kernel_slots + 255) / 256) * 256;
}

}  // namespace gpuobs
