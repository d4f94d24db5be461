"""gpuobs-synth follows the mode ladder exactly as the injector will: what each mode counts and
records, checked against independent arithmetic (numpy's own fmix64 for sampling). The launch
census is the device's (launch_census.h, played by gpuobs-synth with the patches' own code):
with the opt-in launch trace, the host's launch records are the oracle it must equal."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.segment import (
    BLOCK_EARLIER_EPOCH,
    BLOCK_SAMPLED,
    EVENT_DTYPE,
    EVENT_KINDS,
    KERNEL_ACCESS_HOOKS_CHOSEN,
    LAUNCH_DTYPE,
    STATE_EXITED,
    Segment,
)
from gpuobs_testing.oracles import linear_block, numpy_block_sample_keep, numpy_fmix64, numpy_sample_keep

LAUNCHES = "300"


def run_to_end(start_synth, *args: str, launches: str = LAUNCHES) -> tuple[Segment, np.ndarray, np.ndarray]:
    """Runs gpuobs-synth for a fixed number of launches, paced so that the reader keeps up."""
    synth = start_synth(
        "--launches",
        launches,
        "--seed",
        "11",
        "--kernels",
        "12",
        "--ring-records",
        str(1 << 20),
        "--rate",
        "4000000",
        *args,
    )
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
    return (
        segment,
        np.concatenate(events) if events else empty_events,
        np.concatenate(launches) if launches else empty_launches,
    )


def shapes_of_records(segment: Segment, launches: np.ndarray) -> dict[tuple, int]:
    """(slot, grid, block) -> launches, from the host's launch records (the trace)."""
    keys = zip(
        launches["kernel_slot"].tolist(),
        launches[["grid_x", "grid_y", "grid_z"]].tolist(),
        launches[["block_x", "block_y", "block_z"]].tolist(),
    )
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
    by_grid = {int(launch["grid_id"]): launch for launch in launches}
    for event in launch_events:
        launch = by_grid[int(event["grid_id"])]
        assert int(event["kernel_slot"]) == int(launch["kernel_slot"])
        assert (
            int(event["address"]) == int(launch["grid_x"]) | int(launch["grid_y"]) << 32 | int(launch["grid_z"]) << 48
        )
        assert (int(event["block_x"]), int(event["block_y"]), int(event["block_z"])) == (
            int(launch["block_x"]),
            int(launch["block_y"]),
            int(launch["block_z"]),
        )


def test_sampled_in_the_memory_set_keeps_exactly_the_hashed_accesses_and_counts_stay_exact(start_synth) -> None:
    shift = 4
    # 3 M events a run: at 1 M/s the ring of 1 M records absorbs a reader that stalls for a
    # second (a loaded 2-core machine did, at 4 M/s)
    memory, every_access, launches = run_to_end(
        start_synth, "--mode", "memory", "--patch-set", "memory", "--launch-trace", "--rate", "1000000", launches="80"
    )
    sampled, kept, sampled_launches = run_to_end(
        start_synth,
        "--mode",
        "sampled",
        "--patch-set",
        "memory",
        "--shift",
        str(shift),
        "--launch-trace",
        "--rate",
        "1000000",
        launches="80",
    )
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


def within_sampling_bound(kept: int, population: int, shift: int) -> bool:
    """A binomial count of 1 in 2^shift: within 5 standard deviations (and 5 for small counts) of
    its mean. The hash of distinct keys behaves as independent draws; a wrong share (another
    shift, a rule that keeps all or none) is off by far more."""
    p = 2.0**-shift
    return abs(kept - population * p) <= 5 * np.sqrt(population * p * (1 - p)) + 5


def test_sampled_in_the_block_set_records_exactly_the_hashed_blocks_and_counts_every_block(start_synth) -> None:
    """The block set's `sampled`: every block counted (the census as in counter), 1 in 2^shift
    blocks recorded by the shared hash of (grid id, block, epoch), the exit of a kept block
    decided by its own epoch or the one before (flagged), and no event of an unsampled block."""
    shift = 3
    segment, events, launches = run_to_end(
        start_synth, "--mode", "sampled", "--shift", str(shift), "--launch-trace", launches="400"
    )
    assert segment.control_state()["applied_patch_set"] == 0  # the block set
    counters, kernels = segment.counters()
    assert np.array_equal(kernels["blocks_observed"], kernels["blocks_expected"])
    assert kernels["memory_accesses"].sum() == 0 and counters["device_memory_accesses"] == 0
    assert kernels["events_produced"].sum() == len(events) and kernels["events_dropped"].sum() == 0
    geometry = (launches["grid_x"].astype(np.int64) * launches["grid_y"] * launches["grid_z"]).sum()
    assert kernels["blocks_expected"].sum() == geometry
    kinds = events["kind"]
    assert set(np.unique(kinds).tolist()) <= {
        EVENT_KINDS["block_enter"],
        EVENT_KINDS["block_exit"],
        EVENT_KINDS["launch"],
    }
    enters, exits = events[kinds == EVENT_KINDS["block_enter"]], events[kinds == EVENT_KINDS["block_exit"]]
    # every recorded enter is a kept block, flagged as a sample
    assert ((enters["flags"] & BLOCK_SAMPLED) != 0).all()
    epochs = enters["globaltimer_ns"] >> np.uint64(_native.BLOCK_EPOCH_SHIFT)
    assert numpy_block_sample_keep(enters["grid_id"], linear_block(enters, launches), epochs, shift).all()
    assert within_sampling_bound(len(enters), int(geometry), shift), (len(enters), int(geometry))
    # an exit: kept by its own epoch, or (flagged) by the one before
    block = linear_block(exits, launches)
    epoch = exits["globaltimer_ns"] >> np.uint64(_native.BLOCK_EPOCH_SHIFT)
    own = numpy_block_sample_keep(exits["grid_id"], block, epoch, shift)
    earlier = numpy_block_sample_keep(exits["grid_id"], block, epoch - np.uint64(1), shift)
    flagged = (exits["flags"] & BLOCK_EARLIER_EPOCH) != 0
    assert (own | earlier).all() and np.array_equal(flagged, ~own)
    # a launch event exactly where block (0,0,0)'s enter was kept
    zero = enters[(enters["block_x"] == 0) & (enters["block_y"] == 0) & (enters["block_z"] == 0)]
    launch_events = events[kinds == EVENT_KINDS["launch"]]
    assert sorted(launch_events["grid_id"].tolist()) == sorted(zero["grid_id"].tolist())


def test_chosen_kernels_record_accesses_and_the_others_blocks(start_synth) -> None:
    """GPUOBS_MEMORY_KERNELS in the block set: the chosen kernels (here each a module of its own)
    have the access hooks; `sampled` samples their accesses and the others' blocks, `memory`
    records every access of theirs and nothing of the others, whose counts stay exact."""
    chosen = "reshape_and_cache|flash_fwd"
    for mode in ("sampled", "memory"):
        segment, events, launches = run_to_end(
            start_synth,
            "--mode",
            mode,
            "--shift",
            "2",
            "--memory-kernels",
            chosen,
            "--launch-trace",
            "--rate",
            "1000000",
            launches="120",
        )
        state = segment.control_state()
        assert (state["applied_patch_set"], segment.header["memory_kernels"]) == (0, chosen)
        entries = segment.kernels()
        hooked = {e["slot"] for e in entries if e["flags"] & KERNEL_ACCESS_HOOKS_CHOSEN}
        assert hooked == {e["slot"] for e in entries if re.search(chosen, e["mangled"])} and hooked
        assert segment.global_counters()["modules_access_hooked"] == len(hooked)
        _, kernels = segment.counters()
        launched = {int(slot) for slot in np.flatnonzero(kernels["launches"])}
        assert launched & hooked and launched - hooked, "both kinds of kernel ran"
        assert np.array_equal(kernels["blocks_observed"], kernels["blocks_expected"])
        accessed = {int(slot) for slot in np.flatnonzero(kernels["memory_accesses"])}
        assert accessed == launched & hooked  # accesses counted (exactly) where the hooks are, only

        def slots_of(kind: str, events: np.ndarray = events) -> set[int]:
            return set(events[events["kind"] == EVENT_KINDS[kind]]["kernel_slot"].tolist())

        assert slots_of("memory_access") == launched & hooked
        if mode == "sampled":
            assert slots_of("block_enter") == launched - hooked  # blocks sampled elsewhere
        else:
            assert slots_of("block_enter") == set()  # memory: the others are counted only
            accesses = events[events["kind"] == EVENT_KINDS["memory_access"]]
            assert len(accesses) == int(kernels["memory_accesses"].sum())  # every access recorded
