"""Exact counts on CUDA C++ kernels of known geometry and known memory traffic. Launches,
blocks and shapes come from the device census (no host callback per launch); where a test
needs a record per launch it runs with the opt-in launch trace (GPUOBS_LAUNCH_TRACE=1)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from gpuobs.segment import EVENT_KINDS, MODES
from gpuobs_testing.oracles import linear_block, numpy_sample_keep
from gpuobs_testing.synth import wait_applied
from harness import InjectedRun, find_kernel

SM_COUNT_LIMIT = 1024  # %smid must be a small SM index


def uninjected_checksum(program: str, shm_dir, *args: str) -> str:
    run = InjectedRun([program, *args], shm_dir, inject=False)
    return run.finish()["checksum"]


@pytest.mark.parametrize("config", ["slot", "bound"])
def test_counter_mode_counts_every_launch_block_and_shape_on_the_device(geometry_program, shm_dir, config) -> None:
    """The steady state: no host callback per launch (no launch record, no launch callback
    time), and the device's census equals the geometry exactly, with the config read from the
    kernel's device slot (slot, the default) or carried in the functions' userdata (bound)."""
    run = InjectedRun([geometry_program, "--rounds", "3"], shm_dir, mode="counter", env={"GPUOBS_CONFIG_WORD": config})
    out = run.finish()
    table = run.kernel_table()
    assert len(out["kernels"]) == 4
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        grid = math.prod(spec["grid"])
        assert row["launches"] == 3, name
        assert row["blocks_expected"] == 3 * grid, name
        assert row["blocks_observed"] == 3 * grid, name
        assert row["blocks_unpatched"] == 0 and row["blocks_unobserved"] == 0, name
        assert row["shapes"] == {(tuple(spec["grid"]), tuple(spec["block"])): 3} and row["other_shapes"] == 0, name
    assert len(run.all_events()) == 0 and len(run.all_launches()) == 0
    counters = run.global_counters()
    assert counters["launches"] == 12 and counters["launch_callback_ns"] == 0
    assert counters["modules_patched"] >= 1 and counters["patch_failures"] == 0


@pytest.mark.parametrize("config", ["slot", "bound"])
def test_counter_with_launch_times_records_one_launch_event_per_launch(geometry_program, shm_dir, config) -> None:
    """GPUOBS_LAUNCH_TIMES=1: `counter` counts as before, and block (0,0,0) of every launch records
    one launch event (its entry time: what gives an engine step a span in `counter`), no block
    event, no host record."""
    run = InjectedRun(
        [geometry_program, "--rounds", "3"],
        shm_dir,
        mode="counter",
        env={"GPUOBS_CONFIG_WORD": config, "GPUOBS_LAUNCH_TIMES": "1"},
    )
    out = run.finish()
    table = run.kernel_table()
    events = run.all_events()
    assert set(events["kind"].tolist()) == {EVENT_KINDS["launch"]}, set(events["kind"].tolist())
    assert len(np.unique(events["grid_id"])) == len(events) == 12  # one each, 4 kernels x 3 rounds
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        grid = math.prod(spec["grid"])
        assert row["launches"] == 3 and row["blocks_observed"] == 3 * grid, name
        mine = events[events["kernel_slot"] == row["slot"]]
        assert len(mine) == 3 and all(int(t) > 0 for t in mine["globaltimer_ns"]), name
    counters = run.global_counters()
    assert counters["device_events_dropped"] == 0 and counters["launch_callback_ns"] == 0
    assert len(run.all_launches()) == 0


@pytest.mark.parametrize("mode", ["off", "noop"])
def test_off_and_noop_count_launches_and_leave_blocks_unobserved(geometry_program, shm_dir, mode) -> None:
    run = InjectedRun([geometry_program, "--rounds", "2"], shm_dir, mode=mode)
    out = run.finish()
    table = run.kernel_table()
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        assert row["launches"] == 2 and row["blocks_observed"] == 0, name
        assert row["blocks_unobserved"] == row["blocks_expected"] == 2 * math.prod(spec["grid"]), name
    assert len(run.all_events()) == 0


def test_blocks_mode_records_a_launch_and_one_enter_and_one_exit_per_block(geometry_program, shm_dir) -> None:
    run = InjectedRun(
        [geometry_program, "--rounds", "2"],
        shm_dir,
        mode="blocks",
        env={"GPUOBS_BLOCK_EXIT": "1", "GPUOBS_LAUNCH_TRACE": "1"},
    )
    out = run.finish()
    events, launches = run.all_events(), run.all_launches()
    counters = run.global_counters()
    assert counters["device_events_dropped"] == 0
    assert counters["device_events_produced"] == len(events)
    # %gridid on the device is the gridId of the launch callback: every event joins a launch,
    # and the launch event of block (0,0,0) carries the launch's kernel and shape
    assert set(np.unique(events["grid_id"])) == set(launches["grid_id"])
    launch_events = events[events["kind"] == EVENT_KINDS["launch"]]
    assert sorted(launch_events["grid_id"].tolist()) == sorted(launches["grid_id"].tolist())
    for launch in launches:
        grid = int(launch["grid_x"]) * int(launch["grid_y"]) * int(launch["grid_z"])
        mine = events[events["grid_id"] == launch["grid_id"]]
        enters, exits = mine[mine["kind"] == 1], mine[mine["kind"] == 2]
        assert len(enters) == len(exits) == grid
        blocks = np.unique(enters[["block_x", "block_y", "block_z"]])
        assert len(blocks) == grid  # each block exactly once
        assert np.all(mine["kernel_slot"] == launch["kernel_slot"])
        (event,) = mine[mine["kind"] == EVENT_KINDS["launch"]]
        assert (
            int(event["address"]) == int(launch["grid_x"]) | int(launch["grid_y"]) << 32 | int(launch["grid_z"]) << 48
        )
        assert (int(event["block_x"]), int(event["block_y"]), int(event["block_z"])) == (
            int(launch["block_x"]),
            int(launch["block_y"]),
            int(launch["block_z"]),
        )
    assert np.all(events["sm_id"] < SM_COUNT_LIMIT)
    assert np.all(events["globaltimer_ns"] > 1_600_000_000 * 10**9)  # ns since the epoch
    # per block: exit after enter on the device clock
    enters = events[events["kind"] == 1]
    exits = events[events["kind"] == 2]
    order_e = np.lexsort((enters["block_z"], enters["block_y"], enters["block_x"], enters["grid_id"]))
    order_x = np.lexsort((exits["block_z"], exits["block_y"], exits["block_x"], exits["grid_id"]))
    assert np.all(exits["globaltimer_ns"][order_x] >= enters["globaltimer_ns"][order_e])
    assert len(out["kernels"]) == 4


def test_memory_mode_counts_every_access_exactly(geometry_program, shm_dir) -> None:
    run = InjectedRun(
        [geometry_program, "--rounds", "2"], shm_dir, mode="memory", patch_set="memory", ring_records=1 << 21
    )
    out = run.finish()
    table = run.kernel_table()
    events = run.all_events()
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        assert row["memory_accesses"] == 2 * spec["accesses_per_launch"], name
        assert row["events_produced"] == row["memory_accesses"] + row["launches"], name  # + the launch events
        delivered = int(np.count_nonzero(events["kernel_slot"] == row["slot"]))
        assert delivered + row["events_dropped"] == row["events_produced"], name
        assert row["blocks_observed"] == 2 * math.prod(spec["grid"]), name
    memory_events = events[events["kind"] == 3]
    assert np.all(memory_events["access_bytes"] == 4)
    assert np.all(memory_events["address"] != 0)


def test_sampled_keeps_exactly_the_hashed_subset_after_a_live_switch(geometry_program, shm_dir) -> None:
    shift = 3
    run = InjectedRun(
        [geometry_program, "--rounds", "1", "--phases", "2"],
        shm_dir,
        mode="memory",
        patch_set="memory",
        ring_records=1 << 21,
        env={"GPUOBS_LAUNCH_TRACE": "1"},
    )
    assert run.read_json_line() == {"phase_done": 0}
    while run.segment is None:
        time.sleep(0.01)
    generation = run.segment.request_control("sampled", shift=shift)
    state = wait_applied(run.segment, generation)
    assert (state["applied_mode"], state["applied_shift"]) == (MODES["sampled"], shift)
    run.send_line()
    out = run.finish()
    events, launches = run.all_events(), run.all_launches()
    assert run.global_counters()["device_events_dropped"] == 0
    events = events[events["kind"] == EVENT_KINDS["memory_access"]]
    mode_of = dict(zip(launches["grid_id"].tolist(), launches["mode"].tolist()))
    event_modes = np.array([mode_of[g] for g in events["grid_id"].tolist()])
    full = events[event_modes == MODES["memory"]]
    kept = events[event_modes == MODES["sampled"]]
    assert len(full) > 0 and len(kept) > 0
    block_full = linear_block(full, launches)
    expected = full[numpy_sample_keep(full["pc"], full["thread"], block_full, shift)]
    key = lambda e: np.stack([e["kernel_slot"], e["pc"], e["thread"], linear_block(e, launches)]).T.astype(np.uint64)  # noqa: E731
    assert np.array_equal(np.unique(key(kept), axis=0), np.unique(key(expected), axis=0))
    ratio = len(kept) / len(full)
    assert 0.5 / 2**shift < ratio < 2.0 / 2**shift
    # counts stay exact across the switch: two phases of one round each
    table = run.kernel_table()
    for name, spec in out["kernels"].items():
        assert find_kernel(table, name)["memory_accesses"] == 2 * spec["accesses_per_launch"], name


@pytest.mark.parametrize(
    "mode, patch_set, exits",
    [
        ("off", "block", "0"),
        ("noop", "block", "0"),
        ("counter", "block", "0"),
        ("blocks", "block", "0"),
        ("blocks", "block", "1"),
        ("memory", "memory", "0"),
        ("sampled", "memory", "0"),
    ],
)
def test_outputs_identical_with_and_without_the_injector(geometry_program, shm_dir, mode, patch_set, exits) -> None:
    reference = uninjected_checksum(geometry_program, shm_dir, "--rounds", "2")
    run = InjectedRun(
        [geometry_program, "--rounds", "2"],
        shm_dir,
        mode=mode,
        patch_set=patch_set,
        shift=4,
        env={"GPUOBS_BLOCK_EXIT": exits},
    )
    assert run.finish()["checksum"] == reference


def test_mode_switches_while_a_loop_runs_keep_counts_consistent(geometry_program, shm_dir) -> None:
    """Each launch runs whole in one mode (the config rides in the binding it launched with):
    a launch with a launch event (blocks) has all its blocks' enters, one without has none."""
    run = InjectedRun(
        [geometry_program, "--loop", "3"],
        shm_dir,
        mode="counter",
        ring_records=1 << 21,
        env={"GPUOBS_LAUNCH_TRACE": "1"},
    )
    deadline = time.monotonic() + 30
    while run.segment is None and time.monotonic() < deadline:
        time.sleep(0.01)
    switches = []  # (requested, applied) on CLOCK_MONOTONIC, the clock of the launch records
    for mode in ["blocks", "counter", "blocks", "off", "counter"]:
        time.sleep(0.4)
        requested = time.monotonic_ns()
        wait_applied(run.segment, run.segment.request_control(mode))
        switches.append((requested, time.monotonic_ns()))
    run.finish()
    events, launches = run.all_events(), run.all_launches()
    assert run.global_counters()["device_events_dropped"] == 0
    modes = set(launches["mode"].tolist())
    assert {MODES["blocks"], MODES["counter"], MODES["off"]} <= modes
    in_blocks = set(events["grid_id"][events["kind"] == EVENT_KINDS["launch"]].tolist())
    enters = events[events["kind"] == EVENT_KINDS["block_enter"]]
    per_launch = dict(zip(*np.unique(enters["grid_id"], return_counts=True)))
    # The host records the mode in force when a launch is made; a launch made while a switch's
    # copies land, or queued behind the stream before it, can run in the other one (measured on an
    # H100 at 0737875: 88 of 5,560 launches). Away from a switch the record is the mode it ran in.
    margin = 50_000_000  # ns: launches queued on the program's stream ahead of a switch
    disagree = []
    for launch in launches:
        grid = int(launch["grid_x"]) * int(launch["grid_y"]) * int(launch["grid_z"])
        expected = grid if int(launch["grid_id"]) in in_blocks else 0  # enter events (exits not hooked)
        assert per_launch.get(launch["grid_id"], 0) == expected, (launch["mode"], grid)
        if (launch["mode"] == MODES["blocks"]) != (expected > 0):
            disagree.append(int(launch["host_time_ns"]))
    far = [t for t in disagree if not any(begin - margin <= t <= end + margin for begin, end in switches)]
    assert not far, (len(far), len(disagree), switches)
    assert len(disagree) <= 0.05 * len(launches), len(disagree)
    for name, row in run.kernel_table().items():
        assert row["blocks_observed"] + row["blocks_unobserved"] == row["blocks_expected"], name
        assert row["blocks_unobserved"] > 0, name  # the `off` phase


def test_events_reach_the_segment_while_the_program_runs(geometry_program, shm_dir) -> None:
    started = time.monotonic()
    run = InjectedRun([geometry_program, "--loop", "3"], shm_dir, mode="blocks", ring_records=1 << 21)
    run.finish()
    assert run.first_event_at is not None
    assert run.first_event_at < run.exited_at - 1.5, (run.first_event_at - started, run.exited_at - started)


def test_no_segment_directory_means_unobserved_not_broken(geometry_program, shm_dir) -> None:
    reference = uninjected_checksum(geometry_program, shm_dir, "--rounds", "2")
    run = InjectedRun([geometry_program, "--rounds", "2"], shm_dir / "missing", mode="blocks")
    assert run.finish()["checksum"] == reference
    lines = [line for line in run.stderr.splitlines() if line.startswith("gpuobs:")]
    assert len(lines) == 1 and "no segment" in lines[0], run.stderr


def test_missing_patches_mean_unpatched_counted_and_unchanged(geometry_program, shm_dir) -> None:
    reference = uninjected_checksum(geometry_program, shm_dir, "--rounds", "2")
    run = InjectedRun(
        [geometry_program, "--rounds", "2"],
        shm_dir,
        mode="counter",
        env={"GPUOBS_PATCH_FILE": str(shm_dir / "absent.fatbin")},
    )
    out = run.finish()
    assert out["checksum"] == reference
    counters = run.global_counters()
    assert counters["patch_failures"] >= 1
    table = run.kernel_table()
    for name, spec in out["kernels"].items():  # counted by the host's launch callbacks instead
        row = find_kernel(table, name)
        assert row["launches"] == 2, name
        assert row["blocks_observed"] == 0 and row["blocks_unpatched"] == row["blocks_expected"] == 2 * math.prod(
            spec["grid"]
        ), name
    assert sum(line.startswith("gpuobs:") for line in run.stderr.splitlines()) <= 3


def test_sharded_warp_count_equals_the_naive_count(geometry_program, shm_dir) -> None:
    """The warp-aggregated, sharded access count against two plain atomics per access."""
    counts = {}
    for naive in ("0", "1"):
        run = InjectedRun(
            [geometry_program, "--rounds", "2"],
            shm_dir,
            mode="memory",
            patch_set="memory",
            ring_records=1 << 21,
            env={"GPUOBS_NAIVE_COUNTING": naive},
        )
        out = run.finish()
        table = run.kernel_table()
        counts[naive] = {name: find_kernel(table, name)["memory_accesses"] for name in out["kernels"]}
        for name, spec in out["kernels"].items():
            assert counts[naive][name] == 2 * spec["accesses_per_launch"], (naive, name)
    assert counts["0"] == counts["1"]
