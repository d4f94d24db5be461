"""The ring as one process sees it: order, wrap-around, drop-newest, torn and corrupt slots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE, Segment

RING = 8


def make_events(first: int, count: int, slot: int = 1) -> np.ndarray:
    records = np.zeros(count, dtype=EVENT_DTYPE)
    records["pc"] = np.arange(first, first + count, dtype=np.uint64) * 16 + 0x1000
    records["address"] = np.arange(first, first + count, dtype=np.uint64) * 0x9E3779B97F4A7C15 % (1 << 63)
    records["block_x"] = np.arange(first, first + count) % 1000
    records["thread"] = np.arange(first, first + count) % 1024
    records["kind"] = 3
    records["kernel_slot"] = slot
    return records


def without_seq(records: np.ndarray) -> bytes:
    return records.view(np.uint8).reshape(-1, 64)[:, :56].tobytes()


@pytest.fixture
def ring(tmp_path: Path) -> tuple[_native.Writer, Segment]:
    writer = _native.Writer(str(tmp_path), event_ring_records=RING, launch_ring_records=RING)
    return writer, Segment(writer.path, batch_records=64)


def test_wrap_around_keeps_order_and_bytes(ring) -> None:
    writer, segment = ring
    written = 0
    for round_size in [3, 5, 8, 1, 7, 8, 2, 6] * 10:
        batch = make_events(written, round_size)
        assert writer.put_events(0, batch) == round_size
        read = segment.read_events(0)
        assert without_seq(read) == without_seq(batch)
        assert list(read["seq"]) == list(range(written + 1, written + round_size + 1))
        written += round_size
    stats = segment.reader.event_ring_stats(0)
    assert stats["tail"] == stats["delivered"] == written > 10 * RING


def test_full_ring_drops_the_newest_and_keeps_the_oldest_intact(ring) -> None:
    writer, segment = ring
    batch = make_events(0, RING + 5)
    assert writer.put_events(0, batch) == RING  # the last 5 had no room
    read = segment.read_events(0).copy()
    assert len(read) == RING
    assert without_seq(read) == without_seq(batch[:RING])  # byte-identical, none overwritten
    writer.publish(quiescent=True)
    account = segment.accounting()
    device = account.stages[0]
    assert (device.produced, device.delivered, device.dropped) == (RING + 5, RING, 5)
    assert device.balanced and not account.errors
    # room again once read
    assert writer.put_events(0, make_events(100, 2)) == 2
    assert len(segment.read_events(0)) == 2


def test_launch_ring_keeps_records_and_counts_drops(ring) -> None:
    """Launch records are a trace: the ring drops the newest when full (counted); launches are
    counted by the device census, not by the records."""
    writer, segment = ring
    slot = writer.register_kernel("_ZN4vllm15rms_norm_kernelIN3c108BFloat16ELi8EEEvPT_PKS3_S6_fii")
    launch = np.zeros(1, dtype=LAUNCH_DTYPE)
    launch["kernel_slot"] = slot
    launch["grid_x"], launch["grid_y"], launch["grid_z"] = 4, 3, 2
    launch["block_x"], launch["block_y"], launch["block_z"] = 128, 1, 1
    launch["kind"] = 1
    results = [writer.write_launch(launch) for _ in range(RING + 3)]
    assert results.count(True) == RING and results.count(False) == 3
    read = segment.read_launches()
    assert len(read) == RING and set(read["grid_y"]) == {3}
    counters, kernels = segment.counters()
    assert counters["launch_records_dropped"] == 3
    assert counters["launches"] == 0 and kernels[slot]["launches"] == 0
    assert segment.kernels()[slot]["demangled"] == (
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, "
        "c10::BFloat16 const*, float, int, int)"
    )


def test_torn_slot_waits_for_a_live_writer_then_is_skipped_and_counted(ring) -> None:
    writer, segment = ring
    writer.put_events(0, make_events(0, 2))
    writer.put_half_event(0, make_events(2, 1))
    writer.put_events(0, make_events(3, 2))
    segment.reader.set_torn_timeout(3600)
    first = segment.read_events(0).copy()
    assert len(first) == 2  # stops at the slot being written: its writer is alive
    assert len(segment.read_events(0)) == 0
    segment.reader.set_torn_timeout(0)  # now it has been pending too long
    rest = segment.read_events(0)
    assert list(rest["seq"]) == [4, 5]
    stats = segment.reader.event_ring_stats(0)
    assert (stats["delivered"], stats["torn"], stats["tail"]) == (4, 1, 5)


def test_exited_writer_makes_a_half_written_slot_torn_at_once(ring) -> None:
    writer, segment = ring
    writer.put_events(0, make_events(0, 3))
    writer.put_half_event(0, make_events(3, 1))
    writer.mark_exited()
    segment.reader.set_torn_timeout(3600)
    read = segment.read_events(0)
    assert len(read) == 3
    assert segment.reader.event_ring_stats(0)["torn"] == 1


def test_unclaimed_slot_is_never_skipped(ring) -> None:
    writer, segment = ring
    writer.put_events(0, make_events(0, 2))
    writer.mark_exited()
    segment.reader.set_torn_timeout(0)
    assert len(segment.read_events(0)) == 2
    assert len(segment.read_events(0)) == 0
    stats = segment.reader.event_ring_stats(0)
    assert (stats["tail"], stats["torn"]) == (2, 0)


def test_corrupt_records_are_counted_and_not_delivered(ring) -> None:
    writer, segment = ring
    batch = make_events(0, 4)
    batch["kind"][1] = 77  # no such kind
    batch["kernel_slot"][2] = 10_000  # beyond the kernel table
    writer.put_events(0, batch)
    read = segment.read_events(0)
    assert list(read["seq"]) == [1, 4]
    stats = segment.reader.event_ring_stats(0)
    assert (stats["delivered"], stats["corrupt"], stats["tail"]) == (2, 2, 4)


def test_native_aggregates_count_delivered_events_per_kernel_and_kind(ring) -> None:
    writer, segment = ring
    a = make_events(0, 3, slot=2)
    b = make_events(3, 4, slot=5)
    b["kind"] = 1
    writer.put_events(0, a)
    segment.read_events(0)
    writer.put_events(0, b)
    segment.read_events(0)
    aggregates = segment.aggregates()
    assert aggregates[2, 3] == 3 and aggregates[5, 1] == 4
    assert aggregates.sum() == 7


def test_a_second_consumer_is_refused(ring) -> None:
    writer, _segment = ring
    with pytest.raises(_native.SegmentError, match="another consumer"):
        Segment(writer.path)


def test_cached_claims_drop_until_the_limit_moves_and_never_overwrite(tmp_path: Path) -> None:
    """The block-entry patch claims against a cached limit and never reads the consumer's tail;
    the injector's tool thread moves the limit (ring::moved_limit) once the consumer has read an
    eighth of the ring. Until then a full ring drops (counted); nothing unread is overwritten."""
    capacity = 16
    writer = _native.Writer(str(tmp_path), event_ring_records=capacity, launch_ring_records=8)
    segment = Segment(writer.path, batch_records=2)
    first = make_events(0, capacity + 3)
    assert writer.put_events(0, first, cached=True) == capacity  # the last 3: no room
    kept = [segment.read_events(0).copy()]  # the consumer reads 2: the tail moves, the limit not
    assert writer.put_events(0, make_events(100, 1), cached=True) == 0
    assert writer.move_limit(0) == capacity + 2  # an eighth read: moved
    assert writer.move_limit(0) == capacity + 2  # nothing more read: as it was
    second = make_events(200, 3)
    assert writer.put_events(0, second, cached=True) == 2
    while len(batch := segment.read_events(0)):
        kept.append(batch.copy())
    read = np.concatenate(kept)
    assert without_seq(read) == without_seq(np.concatenate([first[:capacity], second[:2]]))
    writer.publish(quiescent=True)
    device = segment.accounting().stages[0]
    assert (device.produced, device.delivered, device.dropped) == (capacity + 3 + 1 + 3, capacity + 2, 3 + 1 + 1)
    assert device.balanced
