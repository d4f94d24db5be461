"""Corrupt and foreign segments are refused with a reason, never a crash. Header fields are
fuzzed with hypothesis; owners, permissions, sizes and versions are changed for real."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.segment import EVENT_DTYPE, Segment, SegmentError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HEADER_BYTES = _native.STRUCT_SIZES["header"]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a valid segment with some records in it."""
    directory = tmp_path_factory.mktemp("template")
    writer = _native.Writer(
        str(directory), event_ring_records=64, launch_ring_records=64, kernel_slots=16, name_arena_bytes=4096
    )
    writer.register_kernel("_ZN4vllm15rms_norm_kernelIN3c108BFloat16ELi8EEEvPT_PKS3_S6_fii")
    records = np.zeros(10, dtype=EVENT_DTYPE)
    records["kind"] = 1
    writer.put_events(0, records)
    writer.publish()
    return Path(writer.path).read_bytes()


def write_segment(directory: Path, data: bytes, name: str = "gpuobs-1-1.seg", mode: int = 0o600) -> Path:
    path = directory / name
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_the_template_itself_is_accepted(tmp_path: Path, template: bytes) -> None:
    segment = Segment(write_segment(tmp_path, template))
    assert len(segment.read_events(0)) == 10
    assert _native.validate_file(str(segment.reader.path)) == ""


@pytest.mark.parametrize(
    "offset, fmt, value, reason",
    [
        (0, "<Q", 0x1122334455667788, "bad magic"),
        (8, "<I", 99, "layout version 99"),
        # a segment of the next layout (record kinds this reader does not know): refused, named
        (
            8,
            "<I",
            _native.LAYOUT_VERSION + 1,
            f"layout version {_native.LAYOUT_VERSION + 1}, this reader speaks {_native.LAYOUT_VERSION}",
        ),
        (12, "<I", 256, "header size"),
        (16, "<Q", 1 << 40, "disagrees with the capacities"),
        (56, "<I", 0, "event ring count"),
        (60, "<I", 1000, "not a power of two"),
        (68, "<I", 0, "kernel slots"),
        (72, "<I", 0, "name arena"),
        (76, "<I", 32, "record sizes"),
        (96, "<Q", 64, "section offsets"),
        (152, "<I", 7, "state 7"),
    ],
)
def test_bad_header_fields_are_named(
    tmp_path: Path, template: bytes, offset: int, fmt: str, value: int, reason: str
) -> None:
    data = bytearray(template)
    struct.pack_into(fmt, data, offset, value)
    path = write_segment(tmp_path, bytes(data))
    with pytest.raises(SegmentError, match=reason):
        Segment(path)
    assert reason in _native.validate_file(str(path))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(0, HEADER_BYTES - 1), data=st.binary(min_size=1, max_size=16))
def test_fuzzed_headers_are_rejected_or_read_safely(tmp_path: Path, template: bytes, offset: int, data: bytes) -> None:
    mutated = bytearray(template)
    mutated[offset : offset + len(data)] = data
    mutated = mutated[: len(template)]
    path = write_segment(tmp_path, bytes(mutated), name=f"gpuobs-{offset}-{len(data)}.seg")
    try:
        try:
            segment = Segment(path)
        except SegmentError as error:
            assert str(error).startswith(str(path) + ": ") and len(str(error)) > len(str(path)) + 2
            return
        # accepted: the mutation hit a field that does not decide the layout; reading is safe
        segment.drain_counts()
        segment.kernels()
        segment.counters()
        segment.control_state()
        segment.accounting()
    finally:
        path.unlink()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=st.lists(st.integers(HEADER_BYTES, 1 << 16), min_size=1, max_size=40), byte=st.integers(0, 255))
def test_fuzzed_bodies_never_crash_the_reader(tmp_path: Path, template: bytes, offsets: list[int], byte: int) -> None:
    """Garbage in control blocks, counters, kernel entries and rings: counted, never fatal."""
    mutated = bytearray(template)
    for offset in offsets:
        if offset < len(mutated):
            mutated[offset] = byte
    path = write_segment(tmp_path, bytes(mutated), name="gpuobs-body.seg")
    try:
        segment = Segment(path, batch_records=1024)
        segment.reader.set_torn_timeout(0)
        tail_before = segment.reader.event_ring_stats(0)["tail"]
        for _ in range(3):
            segment.read_events(0)
        # however corrupt the counters, one read call consumes at most a batch and one lap
        assert segment.reader.event_ring_stats(0)["tail"] - tail_before <= 3 * (1024 + 64)
        segment.drain_counts()
        for kernel in segment.kernels():
            assert isinstance(kernel["demangled"], str)
        segment.counters()
        segment.accounting()
    finally:
        path.unlink()


def test_truncated_files_are_rejected(tmp_path: Path, template: bytes) -> None:
    for size in [0, 100, HEADER_BYTES, len(template) // 2, len(template) - 1]:
        path = write_segment(tmp_path, template[:size], name=f"gpuobs-t{size}.seg")
        with pytest.raises(SegmentError, match="truncated|bytes, the header says"):
            Segment(path)


def test_world_accessible_segment_is_refused(tmp_path: Path, template: bytes) -> None:
    path = write_segment(tmp_path, template, mode=0o666)
    with pytest.raises(SegmentError, match="world-accessible"):
        Segment(path)


def test_group_access_only_when_allowed(tmp_path: Path, template: bytes) -> None:
    path = write_segment(tmp_path, template, mode=0o660)
    with pytest.raises(SegmentError, match="group-accessible"):
        Segment(path, allow_group=False)
    assert Segment(path).pid == struct.unpack_from("<I", template, 24)[0]


def test_foreign_owner_is_refused(tmp_path: Path, template: bytes) -> None:
    path = write_segment(tmp_path, template)
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")  # CI runs as root
    os.chown(path, 54321, 54321)
    with pytest.raises(SegmentError, match="owned by uid 54321"):
        Segment(path)
    assert Segment(path, owners=[54321]).pid > 0  # an explicitly trusted owner is fine


def test_symlinks_and_non_files_are_refused(tmp_path: Path, template: bytes) -> None:
    real = write_segment(tmp_path, template)
    link = tmp_path / "gpuobs-link.seg"
    link.symlink_to(real)
    with pytest.raises(SegmentError, match="cannot open"):
        Segment(link)
    directory = tmp_path / "gpuobs-dir.seg"
    directory.mkdir()
    with pytest.raises(SegmentError):
        Segment(directory)


def test_random_files_are_not_segments(tmp_path: Path) -> None:
    path = tmp_path / "gpuobs-random.seg"
    path.write_bytes(os.urandom(1 << 16))
    os.chmod(path, 0o600)
    with pytest.raises(SegmentError, match="bad magic"):
        Segment(path)


def test_shrunk_file_is_noticed(tmp_path: Path, template: bytes) -> None:
    path = write_segment(tmp_path, template)
    segment = Segment(path)
    assert segment.reader.size_intact()
    os.truncate(path, len(template) // 2)
    assert not segment.reader.size_intact()


@pytest.mark.parametrize("size", [0, 4096])
def test_reading_a_segment_shrunk_under_the_reader_does_not_fault(tmp_path: Path, template: bytes, size: int) -> None:
    """Issue 13, item 10: any process of the producer's uid can shrink a mapped segment; the next
    load past the new end would be SIGBUS for the whole daemon. Run in a child: were the guard
    missing, the child dies of SIGBUS and the test sees it."""
    path = write_segment(tmp_path, template)
    script = f"""
import os, sys
from gpuobs import _native
from gpuobs.segment import Segment
segment = Segment({str(path)!r})
before = _native.mapping_faults_absorbed()
os.truncate({str(path)!r}, {size})
segment.counters(); segment.kernels(); segment.read_events(0); segment.read_launches(); segment.control_state()
segment.accounting(); segment.aggregates()
assert segment.reader.faulted() and not segment.reader.size_intact()
assert _native.mapping_faults_absorbed() == before + 1
print("survived")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "survived"


def test_a_fault_outside_every_segment_is_still_fatal(tmp_path: Path, template: bytes) -> None:
    """The guard absorbs only faults on a segment's mapping; any other SIGBUS ends the process as
    it always would (a real bug must not be hidden)."""
    path = write_segment(tmp_path, template)
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * 65536)
    script = f"""
import mmap, os
from gpuobs.segment import Segment
segment = Segment({str(path)!r})
with open({str(other)!r}, "r+b") as f:
    view = mmap.mmap(f.fileno(), 65536)
    os.truncate({str(other)!r}, 0)
    view[40000]
print("not reached")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr[-2000:])


def test_no_segment_left_behind_when_the_directory_is_missing(tmp_path: Path) -> None:
    with pytest.raises(SegmentError, match="segment directory refused: cannot open .*missing"):
        _native.Writer(str(tmp_path / "missing"))
    assert list(tmp_path.iterdir()) == []  # no directory made, no temporary file left
