"""The layout Python sees is the layout C++ compiles: checked against an independent C++
program built here from the same header (not through the pybind11 module)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.segment import EVENT_DTYPE, KERNEL_COUNTERS_DTYPE, LAUNCH_DTYPE

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "segment" / "native" / "include"

DUMP_PROGRAM = r"""
#include <cstddef>
#include <cstdio>
#include "gpuobs/layout.h"
using namespace gpuobs;
#define F(S, f) std::printf("\"%s.%s\": [%zu, %zu],", #S, #f, offsetof(S, f), sizeof(((S*)0)->f));
int main() {
  std::printf("{");
  F(EventRecord, globaltimer_ns) F(EventRecord, pc) F(EventRecord, address) F(EventRecord, grid_id)
  F(EventRecord, block_x) F(EventRecord, block_y) F(EventRecord, block_z) F(EventRecord, thread)
  F(EventRecord, sm_id) F(EventRecord, kernel_slot) F(EventRecord, replay) F(EventRecord, kind)
  F(EventRecord, access_bytes) F(EventRecord, flags) F(EventRecord, seq)
  F(LaunchRecord, host_time_ns) F(LaunchRecord, grid_id) F(LaunchRecord, stream) F(LaunchRecord, graph_exec)
  F(LaunchRecord, graph_node) F(LaunchRecord, graph_launch_id) F(LaunchRecord, kernel_slot) F(LaunchRecord, grid_x)
  F(LaunchRecord, grid_y) F(LaunchRecord, grid_z) F(LaunchRecord, block_x) F(LaunchRecord, block_y)
  F(LaunchRecord, block_z) F(LaunchRecord, context_index) F(LaunchRecord, kind) F(LaunchRecord, mode)
  F(LaunchRecord, shift) F(LaunchRecord, flags) F(LaunchRecord, replay) F(LaunchRecord, thread) F(LaunchRecord, op)
  F(LaunchRecord, seq)
  F(KernelCounters, launches) F(KernelCounters, blocks_expected) F(KernelCounters, blocks_observed)
  F(KernelCounters, blocks_unpatched) F(KernelCounters, memory_accesses) F(KernelCounters, events_produced)
  F(KernelCounters, events_dropped) F(KernelCounters, blocks_unobserved) F(KernelCounters, blocks_exited)
  Capacities caps; caps.event_rings = 3; caps.event_ring_records = 1u << 12; caps.launch_ring_records = 1u << 10;
  caps.kernel_slots = 100; caps.name_arena_bytes = 12345;
  Geometry g = compute_geometry(caps);
  std::printf("\"geometry\": [%llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu],",
    (unsigned long long)g.control_offset, (unsigned long long)g.counters_offset,
    (unsigned long long)g.ring_controls_offset, (unsigned long long)g.kernel_counters_offset,
    (unsigned long long)g.kernel_shapes_offset, (unsigned long long)g.kernel_table_offset,
    (unsigned long long)g.name_arena_offset,
    (unsigned long long)g.launch_ring_offset, (unsigned long long)g.event_rings_offset,
    (unsigned long long)g.segment_bytes);
  std::printf("\"sizes\": [%zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu], \"version\": %u, "
    "\"magic\": %llu}",
    sizeof(SegmentHeader), sizeof(ControlBlock), sizeof(GlobalCounters), sizeof(RingControl),
    sizeof(KernelCounters), sizeof(KernelShapes), sizeof(KernelEntry), sizeof(EventRecord), sizeof(LaunchRecord),
    sizeof(StepRecord), sizeof(StepTextRecord), sizeof(ShapeCount), sizeof(OpRecord), sizeof(OpNodesRecord),
    kLayoutVersion,
    (unsigned long long)kMagic);
}
"""


@pytest.fixture(scope="module")
def cxx_layout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.fail("a C++ compiler is needed to check the layout")
    work = tmp_path_factory.mktemp("layout")
    source = work / "dump.cpp"
    source.write_text(DUMP_PROGRAM)
    binary = work / "dump"
    subprocess.run([compiler, "-std=c++17", f"-I{INCLUDE}", str(source), "-o", str(binary)], check=True)
    return json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)


@pytest.mark.parametrize(
    "struct, dtype",
    [("EventRecord", EVENT_DTYPE), ("LaunchRecord", LAUNCH_DTYPE), ("KernelCounters", KERNEL_COUNTERS_DTYPE)],
)
def test_numpy_dtypes_match_cxx_offsets(cxx_layout: dict, struct: str, dtype: np.dtype) -> None:
    fields = {key.split(".", 1)[1]: value for key, value in cxx_layout.items() if key.startswith(struct + ".")}
    assert fields, struct
    assert set(dtype.names) == set(fields)
    for name, (offset, size) in fields.items():
        field_dtype, field_offset = dtype.fields[name][:2]
        assert (field_offset, field_dtype.itemsize) == (offset, size), name


def test_record_sizes_and_version(cxx_layout: dict) -> None:
    (
        header,
        control,
        counters,
        ring_control,
        kernel_counters,
        kernel_shapes,
        kernel_entry,
        event,
        launch,
        step,
        step_text,
        shape_count,
        op,
        op_nodes,
    ) = cxx_layout["sizes"]
    assert EVENT_DTYPE.itemsize == event == 64
    assert LAUNCH_DTYPE.itemsize == launch == 128
    assert KERNEL_COUNTERS_DTYPE.itemsize == kernel_counters == 128
    assert _native.STRUCT_SIZES == {
        "header": header,
        "control": control,
        "global_counters": counters,
        "ring_control": ring_control,
        "kernel_counters": kernel_counters,
        "kernel_shapes": kernel_shapes,
        "kernel_entry": kernel_entry,
        "event_record": event,
        "launch_record": launch,
        "step_record": step,
        "step_text_record": step_text,
        "shape_count": shape_count,
        "op_record": op,
        "op_nodes_record": op_nodes,
    }
    assert _native.LAYOUT_VERSION == cxx_layout["version"]
    assert _native.MAGIC == cxx_layout["magic"]
    assert _native.MAGIC.to_bytes(8, "little") == b"GPUOBSEG"


def test_geometry_matches_cxx(cxx_layout: dict) -> None:
    geometry = _native.geometry(3, 1 << 12, 1 << 10, 100, 12345)
    names = [
        "control_offset",
        "counters_offset",
        "ring_controls_offset",
        "kernel_counters_offset",
        "kernel_shapes_offset",
        "kernel_table_offset",
        "name_arena_offset",
        "launch_ring_offset",
        "event_rings_offset",
        "segment_bytes",
    ]
    assert [geometry[name] for name in names] == cxx_layout["geometry"]
    assert geometry["event_rings_offset"] % 4096 == 0  # rings page aligned for host registration


def test_geometry_rejects_bad_capacities() -> None:
    with pytest.raises(ValueError, match="power of two"):
        _native.geometry(1, 1000, 1024, 64, 4096)
    with pytest.raises(ValueError, match="event ring count"):
        _native.geometry(0, 1024, 1024, 64, 4096)


def test_records_in_the_file_sit_at_the_dtype_offsets(tmp_path: Path) -> None:
    """Bytes written by the C++ writer, read back from the file with numpy alone."""
    writer = _native.Writer(str(tmp_path), event_ring_records=16)
    record = np.zeros(1, dtype=EVENT_DTYPE)
    record["pc"] = 0x1234_5678_9ABC
    record["block_z"] = 7
    record["sm_id"] = 131
    record["kind"] = 3
    record["kernel_slot"] = 5
    assert writer.put_events(0, record) == 1
    geometry = _native.geometry(1, 16, 1024, 64, 65536)
    raw = np.fromfile(writer.path, dtype=np.uint8)
    first = raw[geometry["event_rings_offset"] : geometry["event_rings_offset"] + 64].view(EVENT_DTYPE)[0]
    assert first["pc"] == 0x1234_5678_9ABC
    assert first["block_z"] == 7 and first["sm_id"] == 131 and first["kind"] == 3 and first["kernel_slot"] == 5
    assert first["seq"] == 1  # ticket 0, committed
    header = raw[:16].view(np.uint64)
    assert header[0] == _native.MAGIC
