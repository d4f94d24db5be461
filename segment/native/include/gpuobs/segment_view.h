// Typed pointers into a mapped segment, computed from capacities (never from header offsets).
// Shared by every writer and reader so that no one does offset arithmetic by hand.
#pragma once

#include <cstdint>

#include "gpuobs/layout.h"

namespace gpuobs {

struct SegmentView {
  uint8_t* base = nullptr;
  Capacities caps{};
  Geometry geometry{};
  SegmentHeader* header = nullptr;
  ControlBlock* control = nullptr;
  GlobalCounters* counters = nullptr;
  RingControl* launch_ring_control = nullptr;
  RingControl* event_ring_controls = nullptr;  // [caps.event_rings]
  KernelCounters* kernel_counters = nullptr;   // [caps.kernel_slots]
  KernelShapes* kernel_shapes = nullptr;       // [caps.kernel_slots]
  KernelEntry* kernel_table = nullptr;         // [caps.kernel_slots]
  char* name_arena = nullptr;                  // [caps.name_arena_bytes]
  LaunchRecord* launch_ring = nullptr;         // [caps.launch_ring_records]
  EventRecord* event_rings = nullptr;          // [caps.event_rings * caps.event_ring_records]

  EventRecord* event_ring(uint32_t index) const { return event_rings + uint64_t(index) * caps.event_ring_records; }
};

inline SegmentView make_view(uint8_t* base, const Capacities& caps) {
  SegmentView view;
  view.base = base;
  view.caps = caps;
  view.geometry = compute_geometry(caps);
  const Geometry& g = view.geometry;
  view.header = reinterpret_cast<SegmentHeader*>(base);
  view.control = reinterpret_cast<ControlBlock*>(base + g.control_offset);
  view.counters = reinterpret_cast<GlobalCounters*>(base + g.counters_offset);
  view.launch_ring_control = reinterpret_cast<RingControl*>(base + g.ring_controls_offset);
  view.event_ring_controls = view.launch_ring_control + 1;
  view.kernel_counters = reinterpret_cast<KernelCounters*>(base + g.kernel_counters_offset);
  view.kernel_shapes = reinterpret_cast<KernelShapes*>(base + g.kernel_shapes_offset);
  view.kernel_table = reinterpret_cast<KernelEntry*>(base + g.kernel_table_offset);
  view.name_arena = reinterpret_cast<char*>(base + g.name_arena_offset);
  view.launch_ring = reinterpret_cast<LaunchRecord*>(base + g.launch_ring_offset);
  view.event_rings = reinterpret_cast<EventRecord*>(base + g.event_rings_offset);
  return view;
}

inline Capacities capacities_of(const SegmentHeader& header) {
  Capacities caps;
  caps.event_rings = header.event_rings;
  caps.event_ring_records = header.event_ring_records;
  caps.launch_ring_records = header.launch_ring_records;
  caps.kernel_slots = header.kernel_slots;
  caps.name_arena_bytes = header.name_arena_bytes;
  return caps;
}

}  // namespace gpuobs
