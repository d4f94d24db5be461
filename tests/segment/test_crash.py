"""A producer killed mid-write: every committed record is delivered, the half-written slot is
skipped and counted, and the reader carries on."""

from __future__ import annotations

import os
import signal
import time

from gpuobs.segment import Segment
from gpuobs_testing.synth import drain_until_exit


def test_sigkill_mid_write_skips_exactly_the_torn_slot(start_synth) -> None:
    synth = start_synth(
        "--mode", "blocks", "--crash-after", "300000", "--ring-records", str(1 << 20), "--rate", "3000000"
    )
    segment = Segment(synth.segment)
    segment.reader.set_torn_timeout(3600)  # only the writer's death may release the slot
    delivered, _ = drain_until_exit(segment, pause=0.002)
    assert synth.wait() == -signal.SIGKILL
    counters, _ = segment.counters()  # published by the dying writer right after its claim
    stats = segment.reader.event_ring_stats(0)
    assert stats["torn"] == 1
    assert counters["device_events_dropped"] == 0
    assert delivered == stats["delivered"] == counters["device_events_produced"] - 1 >= 300000
    assert stats["tail"] == counters["device_events_claimed"]
    # reading on after the crash is harmless and finds nothing more
    assert segment.drain_counts() == (0, 0)
    assert segment.accounting().errors == ()


def killed_at_full_speed(start_synth, seconds: float, *args: str) -> Segment:
    """A producer recording every access, SIGKILLed after `seconds`, its segment drained to the end
    (torn claims are left to the reader: no timeout settles them)."""
    synth = start_synth("--mode", "sampled", "--shift", "0", *args)
    segment = Segment(synth.segment)
    segment.reader.set_torn_timeout(3600)
    deadline = time.monotonic() + 10  # running at full speed (the segment is out before its threads start)
    while time.monotonic() < deadline and not (
        segment.counters()[0]["launches"] and segment.reader.event_ring_stats(0)["head"]
    ):
        time.sleep(0.002)
    time.sleep(seconds)
    os.kill(synth.pid, signal.SIGKILL)
    assert synth.wait() == -signal.SIGKILL
    drain_until_exit(segment)
    return segment


def test_sigkill_at_full_speed_leaves_a_readable_segment(start_synth) -> None:
    segment = killed_at_full_speed(start_synth, 0.2, "--ring-records", str(1 << 14))
    stats = segment.reader.event_ring_stats(0)
    counters, kernels = segment.counters()
    assert stats["delivered"] > 0
    assert stats["delivered"] + stats["torn"] == stats["tail"]
    assert stats["torn"] <= 32  # at most one warp's claim can be cut short
    # the last snapshot lags the kill: it can only undercount what the reader saw
    assert counters["device_events_produced"] >= counters["device_events_dropped"]
    assert len(segment.kernels()) == 8
    # one snapshot: the per-kernel launches add up to the total published with them
    assert int(kernels["launches"].sum()) == counters["launches"] > 0


def test_sigkill_of_a_four_context_producer_is_accounted_exactly(start_synth) -> None:
    """Killed mid-publish, a producer leaves records read (or dropped) beyond its last published
    `produced`; the account must name that excess, never be silently off."""
    segment = killed_at_full_speed(start_synth, 0.3, "--contexts", "4", "--ring-records", str(1 << 12))
    account = segment.accounting()
    assert account.complete and not account.errors
    device = next(s for s in account.stages if s.stage == "device")
    assert device.delivered > 0
    consumed = device.delivered + device.torn + device.corrupt
    # the identity, with what the published counters cannot cover named explicitly
    assert device.produced + device.unpublished == consumed + device.dropped + device.in_flight
    assert device.unpublished == max(0, consumed + device.dropped - device.produced)
    assert all(stage.balanced for stage in account.stages)
