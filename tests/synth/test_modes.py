"""gpuobs-synth follows the mode ladder exactly as the injector will: what each mode counts and
records, checked against independent arithmetic (numpy's own fmix64 for sampling)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuobs import _native
from gpuobs.segment import EVENT_DTYPE, Segment
from oracles import linear_block, numpy_fmix64, numpy_sample_keep

LAUNCHES = "300"


def run_to_end(start_synth, *args: str, launches: str = LAUNCHES) -> tuple[Segment, np.ndarray, np.ndarray]:
    """Runs gpuobs-synth for a fixed number of launches, paced so that the reader keeps up."""
    synth = start_synth("--launches", launches, "--seed", "11", "--kernels", "12", "--ring-records", str(1 << 20),
                        "--rate", "4000000", *args)
    segment = Segment(synth.segment)
    events, launches = [], []
    while True:
        exited = segment.reader.state() == 2
        got = False
        for batch, sink in ((segment.read_events(0), events), (segment.read_launches(), launches)):
            if len(batch):
                sink.append(batch.copy())
                got = True
        if exited and not got:
            break
    assert synth.wait() == 0
    assert segment.counters()[0]["device_events_dropped"] == 0  # these oracles need every event
    empty_events = np.zeros(0, dtype=EVENT_DTYPE)
    return (segment, np.concatenate(events) if events else empty_events, np.concatenate(launches))


def test_fmix64_matches_numpy() -> None:
    keys = np.random.default_rng(3).integers(0, 2**63, size=1000, dtype=np.uint64)
    assert [_native.fmix64(int(k)) for k in keys[:50]] == list(numpy_fmix64(keys[:50]))


@pytest.mark.parametrize("mode", ["off", "noop"])
def test_off_and_noop_record_launches_only(start_synth, mode: str) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", mode)
    counters, kernels = segment.counters()
    assert len(events) == 0 and len(launches) == int(LAUNCHES)
    assert kernels["blocks_observed"].sum() == 0 and kernels["blocks_expected"].sum() > 0
    assert counters["launches"] == int(LAUNCHES)


def test_counter_counts_every_block_and_records_nothing(start_synth) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", "counter")
    _, kernels = segment.counters()
    assert len(events) == 0
    assert np.array_equal(kernels["blocks_observed"], kernels["blocks_expected"])
    geometry = launches["grid_x"].astype(np.int64) * launches["grid_y"] * launches["grid_z"]
    assert kernels["blocks_expected"].sum() == geometry.sum()


def test_blocks_records_an_enter_and_an_exit_per_block(start_synth) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", "blocks")
    _, kernels = segment.counters()
    geometry = launches["grid_x"].astype(np.int64) * launches["grid_y"] * launches["grid_z"]
    assert np.count_nonzero(events["kind"] == 1) == np.count_nonzero(events["kind"] == 2) == geometry.sum()
    assert set(np.unique(events["grid_id"])) == set(launches["grid_id"])
    assert kernels["events_produced"].sum() == len(events)


def test_sampled_keeps_exactly_the_hashed_subset_and_counts_stay_exact(start_synth) -> None:
    shift = 4
    memory, every_access, launches = run_to_end(start_synth, "--mode", "memory", launches="80")
    sampled, kept, sampled_launches = run_to_end(start_synth, "--mode", "sampled", "--shift", str(shift),
                                                 launches="80")
    assert np.array_equal(launches["grid_id"], sampled_launches["grid_id"])  # the same run twice
    _, memory_kernels = memory.counters()
    _, sampled_kernels = sampled.counters()
    # exact access counts whatever the shift
    assert np.array_equal(memory_kernels["memory_accesses"], sampled_kernels["memory_accesses"])
    assert memory_kernels["memory_accesses"].sum() == len(every_access)
    # the kept events are exactly the accesses whose hash has `shift` low zero bits
    block = linear_block(every_access, launches)
    keep = numpy_sample_keep(every_access["pc"], every_access["thread"], block, shift)
    expected = every_access[keep]
    assert len(kept) == len(expected) > 0
    assert 0.5 / 2**shift < len(kept) / len(every_access) < 2.0 / 2**shift
    key = lambda e: np.stack([e["grid_id"], e["pc"], e["thread"], e["block_x"], e["block_y"]]).T  # noqa: E731
    assert np.array_equal(np.unique(key(kept), axis=0), np.unique(key(expected), axis=0))
