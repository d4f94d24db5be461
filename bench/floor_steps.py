"""The floor tool's configurations (bench/floor_tool), named once for every benchmark: what the
Sanitizer API alone costs a workload, taken apart a part at a time, beside what gpuobs adds. A
floor row of one bench and the same-named row of another measure the same thing."""

from __future__ import annotations

LIBRARY = "libgpuobs_floor_tool.so"

# name -> (what it is, GPUOBS_FLOOR_PATCH, GPUOBS_FLOOR_CALLBACKS)
FLOORS: dict[str, tuple[str, str, str]] = {
    "floor-patch": ("an empty block-entry patch, no callback but the two patching needs", "1", ""),
    "floor-subscribe": ("subscribed, no callback, no patch", "0", ""),
    "floor-resource": ("+ the steady resource callbacks", "0", "steady-resource"),
    "floor-launch": ("+ the graph callbacks (one per replay)", "0", "steady-resource,steady-graphs"),
    "floor-steady": ("+ the empty block-entry patch", "1", "steady"),
    "floor-old": (
        "every callback of the first design's four domains, no patch",
        "0",
        "resource,launch,graphs,synchronize",
    ),
}
# the floor of `off` taken apart: each step adds a part of the one before; the last is gpuobs's floor
DECOMPOSITION = ("floor-subscribe", "floor-resource", "floor-launch", "floor-steady")


def environment(name: str) -> dict[str, str]:
    """The floor tool's environment for a configuration of FLOORS."""
    _, patch, callbacks = FLOORS[name]
    return {"GPUOBS_FLOOR_PATCH": patch, "GPUOBS_FLOOR_CALLBACKS": callbacks}
