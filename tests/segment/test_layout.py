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
from gpuobs.segment import _struct_dtype as struct_dtype

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "segment" / "native" / "include"
CAPACITIES = (3, 1 << 12, 1 << 10, 100, 12345)  # event rings, their records, launch records, kernels, arena

# The C++ type of each struct the field tables export, by the name Python knows it by (the keys of
# _native.FIELDS and STRUCT_SIZES, checked below). The members checked are the tables' own.
CXX_STRUCTS = {
    "header": "SegmentHeader",
    "control": "ControlBlock",
    "global_counters": "GlobalCounters",
    "ring_control": "RingControl",
    "kernel_counters": "KernelCounters",
    "shape_count": "ShapeCount",
    "kernel_shapes": "KernelShapes",
    "kernel_entry": "KernelEntry",
    "event_record": "EventRecord",
    "launch_record": "LaunchRecord",
    "step_record": "StepRecord",
    "step_text_record": "StepTextRecord",
    "op_record": "OpRecord",
    "op_nodes_record": "OpNodesRecord",
    "replay_span_record": "ReplaySpanRecord",
}


def exported_members(dtype: np.dtype, prefix: str = "") -> dict[str, tuple[int, int]]:
    """(offset, size) of every field of a dtype built from a field table, by its C++ member
    designator: an array of structs also as its first element's members (gpus[0].uuid), at
    offsets from the start of the outer struct."""
    members = {}
    for name, (field, offset, *_) in dtype.fields.items():
        members[prefix + name] = (offset, field.itemsize)
        if field.subdtype is not None and field.subdtype[0].names:
            inner = exported_members(field.subdtype[0], f"{prefix}{name}[0].")
            members.update({key: (offset + at, size) for key, (at, size) in inner.items()})
    return members


def dump_program() -> str:
    """A C++ program that prints, as JSON, the offset and size of each member the field tables
    export, each struct's size and the geometry of CAPACITIES, by the compiler's own offsetof and
    sizeof over layout.h (a member a table names that its struct lacks does not compile)."""
    lines = []
    for key, struct in CXX_STRUCTS.items():
        lines += [f"F({key}, {struct}, {member})" for member in exported_members(struct_dtype(key))]
        lines.append(f'std::printf("\\"sizeof.{key}\\": %zu,", sizeof({struct}));')
    for name in _native.geometry(*CAPACITIES):
        lines.append(f'std::printf("\\"geometry.{name}\\": %llu,", (unsigned long long)g.{name});')
    rings, ring_records, launch_records, kernels, arena = CAPACITIES
    return "\n".join(
        [
            "#include <cstddef>",
            "#include <cstdio>",
            '#include "gpuobs/layout.h"',
            "using namespace gpuobs;",
            '#define F(k, S, f) std::printf("\\"%s.%s\\": [%zu, %zu],", #k, #f, offsetof(S, f), sizeof(((S*)0)->f));',
            "int main() {",
            f"  Capacities caps; caps.event_rings = {rings}; caps.event_ring_records = {ring_records};",
            f"  caps.launch_ring_records = {launch_records}; caps.kernel_slots = {kernels};",
            f"  caps.name_arena_bytes = {arena};",
            "  Geometry g = compute_geometry(caps);",
            '  std::printf("{");',
            *(f"  {line}" for line in lines),
            '  std::printf("\\"version\\": %u, \\"magic\\": %llu}", kLayoutVersion, (unsigned long long)kMagic);',
            "}",
        ]
    )


@pytest.fixture(scope="module")
def cxx_layout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.fail("a C++ compiler is needed to check the layout")
    work = tmp_path_factory.mktemp("layout")
    source = work / "dump.cpp"
    source.write_text(dump_program())
    binary = work / "dump"
    subprocess.run([compiler, "-std=c++17", f"-I{INCLUDE}", str(source), "-o", str(binary)], check=True)
    return json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)


def test_every_struct_of_the_field_tables_is_checked() -> None:
    assert set(CXX_STRUCTS) == set(_native.FIELDS) == set(_native.STRUCT_SIZES)


@pytest.mark.parametrize("key", CXX_STRUCTS)
def test_numpy_dtypes_match_cxx_offsets(cxx_layout: dict, key: str) -> None:
    dtype = struct_dtype(key)
    members = {name.split(".", 1)[1]: tuple(value) for name, value in cxx_layout.items() if name.startswith(key + ".")}
    assert members and members == exported_members(dtype), key
    assert dtype.itemsize == cxx_layout[f"sizeof.{key}"] == _native.STRUCT_SIZES[key]


def test_record_sizes_and_version(cxx_layout: dict) -> None:
    assert EVENT_DTYPE == struct_dtype("event_record") and EVENT_DTYPE.itemsize == 64
    assert LAUNCH_DTYPE == struct_dtype("launch_record") and LAUNCH_DTYPE.itemsize == 128
    assert KERNEL_COUNTERS_DTYPE == struct_dtype("kernel_counters") and KERNEL_COUNTERS_DTYPE.itemsize == 128
    assert _native.LAYOUT_VERSION == cxx_layout["version"]
    assert _native.MAGIC == cxx_layout["magic"]
    assert _native.MAGIC.to_bytes(8, "little") == b"GPUOBSEG"


def test_geometry_matches_cxx(cxx_layout: dict) -> None:
    geometry = _native.geometry(*CAPACITIES)
    assert {f"geometry.{name}": value for name, value in geometry.items()} == {
        name: value for name, value in cxx_layout.items() if name.startswith("geometry.")
    }
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
