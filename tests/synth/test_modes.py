"""gpuobs-synth follows the mode ladder exactly as the injector will: what each mode counts and
records, checked against independent arithmetic (numpy's own fmix64 for sampling). The launch
census is the device's (launch_census.h, played by gpuobs-synth with the patches' own code):
with the opt-in launch trace, the host's launch records are the oracle it must equal."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from gpuobs import _native
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, LAUNCH_DTYPE, STATE_EXITED, Segment
from gpuobs_testing.oracles import linear_block, numpy_fmix64, numpy_sample_keep

LAUNCHES = "300"


def run_to_end(start_synth, *args: str, launches: str = LAUNCHES) -> tuple[Segment, np.ndarray, np.ndarray]:
    """Runs gpuobs-synth for a fixed number of launches, paced so that the reader keeps up."""
    synth = start_synth("--launches", launches, "--seed", "11", "--kernels", "12", "--ring-records", str(1 << 20),
                        "--rate", "4000000", *args)
    segment = Segment(synth.segment)
    events, launches = [], []
    while True:
        exited = segment.reader.state() == STATE_EXITED
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
    empty_launches = np.zeros(0, dtype=LAUNCH_DTYPE)
    return (segment, np.concatenate(events) if events else empty_events,
            np.concatenate(launches) if launches else empty_launches)


def shapes_of_records(segment: Segment, launches: np.ndarray) -> dict[tuple, int]:
    """(slot, grid, block) -> launches, from the host's launch records (the trace)."""
    keys = zip(launches["kernel_slot"].tolist(), launches[["grid_x", "grid_y", "grid_z"]].tolist(),
               launches[["block_x", "block_y", "block_z"]].tolist())
    return dict(collections.Counter((slot, tuple(grid), tuple(block)) for slot, grid, block in keys))


def shapes_of_census(segment: Segment) -> dict[tuple, int]:
    """(slot, grid, block) -> launches, as the device census published them."""
    out = {}
    for slot, (shapes, other) in segment.reader.launch_shapes().items():
        assert other == 0, slot  # a handful of shapes per kernel: every one attributed
        for grid, block, count in shapes:
            out[(slot, grid, block)] = count
    return out


def test_fmix64_matches_numpy() -> None:
    keys = np.random.default_rng(3).integers(0, 2**63, size=1000, dtype=np.uint64)
    assert [_native.fmix64(int(k)) for k in keys[:50]] == list(numpy_fmix64(keys[:50]))


@pytest.mark.parametrize("mode", ["off", "noop"])
def test_off_and_noop_count_launches_on_the_device_and_record_nothing(start_synth, mode: str) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", mode)
    counters, kernels = segment.counters()
    assert len(events) == 0 and len(launches) == 0  # no launch trace: no host record per launch
    assert counters["launches"] == kernels["launches"].sum() == int(LAUNCHES)
    assert kernels["blocks_observed"].sum() == 0 and kernels["blocks_expected"].sum() > 0
    assert np.array_equal(kernels["blocks_unobserved"], kernels["blocks_expected"])


def test_counter_counts_every_launch_block_and_shape_as_the_trace_records_them(start_synth) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", "counter", "--launch-trace")
    counters, kernels = segment.counters()
    assert len(events) == 0 and len(launches) == int(LAUNCHES)
    assert segment.header["launch_trace"]
    assert np.array_equal(kernels["blocks_observed"], kernels["blocks_expected"])
    geometry = launches["grid_x"].astype(np.int64) * launches["grid_y"] * launches["grid_z"]
    assert kernels["blocks_expected"].sum() == geometry.sum()
    per_slot = collections.Counter(launches["kernel_slot"].tolist())
    assert {slot: int(kernels["launches"][slot]) for slot in per_slot} == dict(per_slot)
    assert shapes_of_census(segment) == shapes_of_records(segment, launches)


def test_blocks_records_a_launch_and_an_enter_and_an_exit_per_block(start_synth) -> None:
    segment, events, launches = run_to_end(start_synth, "--mode", "blocks", "--launch-trace")
    _, kernels = segment.counters()
    geometry = launches["grid_x"].astype(np.int64) * launches["grid_y"] * launches["grid_z"]
    assert np.count_nonzero(events["kind"] == 1) == np.count_nonzero(events["kind"] == 2) == geometry.sum()
    assert set(np.unique(events["grid_id"])) == set(launches["grid_id"])
    assert kernels["events_produced"].sum() == len(events)
    # the launch events: one per launch, with the launch's kernel and shape
    launch_events = events[events["kind"] == EVENT_KINDS["launch"]]
    assert np.array_equal(np.sort(launch_events["grid_id"]), np.sort(launches["grid_id"]))
    by_grid = {int(l["grid_id"]): l for l in launches}
    for event in launch_events:
        launch = by_grid[int(event["grid_id"])]
        assert int(event["kernel_slot"]) == int(launch["kernel_slot"])
        assert int(event["address"]) == int(launch["grid_x"]) | int(launch["grid_y"]) << 32 | int(launch["grid_z"]) << 48
        assert (int(event["block_x"]), int(event["block_y"]), int(event["block_z"])) == \
            (int(launch["block_x"]), int(launch["block_y"]), int(launch["block_z"]))


def test_sampled_keeps_exactly_the_hashed_subset_and_counts_stay_exact(start_synth) -> None:
    shift = 4
    # 3 M events a run: at 1 M/s the ring of 1 M records absorbs a reader that stalls for a
    # second (a loaded 2-core machine did, at 4 M/s)
    memory, every_access, launches = run_to_end(start_synth, "--mode", "memory", "--launch-trace", "--rate",
                                                "1000000", launches="80")
    sampled, kept, sampled_launches = run_to_end(start_synth, "--mode", "sampled", "--shift", str(shift),
                                                 "--launch-trace", "--rate", "1000000", launches="80")
    every_access = every_access[every_access["kind"] == EVENT_KINDS["memory_access"]]
    kept = kept[kept["kind"] == EVENT_KINDS["memory_access"]]
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
