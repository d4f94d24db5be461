"""produced = delivered + dropped, exactly, with a real producer process at full speed against
a reader that is slower on purpose, and the records that do arrive are in order and intact."""

from __future__ import annotations

import time

import numpy as np
from gpuobs.segment import STATE_EXITED, Segment
from gpuobs_testing.synth import drain_until_exit

EVENTS = 12_000_000


def test_conservation_under_load_with_a_slow_reader(start_synth) -> None:
    synth = start_synth(
        "--mode",
        "blocks",
        "--kernels",
        "24",
        "--max-events",
        str(EVENTS),
        "--ring-records",
        str(1 << 16),
        "--seed",
        "7",
    )
    segment = Segment(synth.segment, batch_records=4096)
    delivered = 0
    last_seq = 0
    gaps = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        exited = segment.reader.state() == STATE_EXITED
        batch = segment.read_events(0)
        if len(batch):
            seq = batch["seq"]
            # in order, nothing skipped: the reader only hands out seq == tail + 1
            gaps += int(seq[0] != last_seq + 1) + int(np.count_nonzero(np.diff(seq) != 1))
            last_seq = int(seq[-1])
            assert set(np.unique(batch["kind"])) <= {1, 2, 5}  # block enters and exits, launches
            delivered += len(batch)
            time.sleep(0.0005)  # the slow reader
        elif exited:
            break
    assert synth.wait() == 0
    assert gaps == 0
    counters, kernels = segment.counters()
    produced = counters["device_events_produced"]
    dropped = counters["device_events_dropped"]
    stats = segment.reader.event_ring_stats(0)
    assert counters["device_quiescent"] == 1
    assert produced >= EVENTS
    assert dropped > 0 and delivered > 0, "the reader must have been slow enough to drop"
    assert produced == delivered + dropped  # exactly
    assert stats["torn"] == 0 and stats["corrupt"] == 0
    assert stats["delivered"] == delivered == stats["tail"] == counters["device_events_claimed"]
    # per kernel, too: what the device produced for it = delivered for it + dropped for it
    per_kernel_delivered = segment.aggregates()[: len(kernels)].sum(axis=1)
    assert np.array_equal(kernels["events_produced"], per_kernel_delivered + kernels["events_dropped"])
    assert kernels["events_produced"].sum() == produced
    # blocks mode: two events per observed block and one per launch
    assert kernels["events_produced"].sum() == 2 * kernels["blocks_observed"].sum() + kernels["launches"].sum()
    account = segment.accounting()
    assert not account.errors and all(stage.balanced for stage in account.stages)


def test_several_rings_each_conserve(start_synth) -> None:
    synth = start_synth(
        "--mode", "sampled", "--shift", "2", "--contexts", "4", "--max-events", "1000000", "--ring-records", "4096"
    )
    segment = Segment(synth.segment)
    drain_until_exit(segment, pause=0.001)
    assert synth.wait() == 0
    counters, _ = segment.counters()
    rings = [segment.reader.event_ring_stats(i) for i in range(4)]
    assert all(r["delivered"] > 0 for r in rings)
    assert sum(r["delivered"] for r in rings) + counters["device_events_dropped"] == counters["device_events_produced"]
