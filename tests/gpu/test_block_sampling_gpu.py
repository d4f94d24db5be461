"""`sampled` in the block patch set and the access hooks of chosen kernels (GPUOBS_MEMORY_KERNELS)
on the GPU: every block counted while 1 in 2^shift is recorded by the hash gpuobs-synth shares;
a switch to it reaches graph execs instantiated before it, and back; the chosen kernels' modules,
and only theirs, count and record accesses; outputs unchanged. Checked on the CPU against
gpuobs-synth first (tests/synth/test_modes.py, tests/daemon/test_sampled_blocks.py)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpuobs import _native
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import BLOCK_SAMPLED, EVENT_KINDS, MODES
from gpuobs_testing.daemon import DaemonProcess, device_stage, free_port, gpuobsctl
from gpuobs_testing.oracles import linear_block, numpy_block_sample_keep, numpy_sample_keep
from harness import WORKLOADS, InjectedRun, find_kernel

PROGRAMS = Path(__file__).parent / "programs"
DECODE = [sys.executable, str(WORKLOADS / "decode_graph40.py")]
EPOCH_SHIFT = np.uint64(_native.BLOCK_EPOCH_SHIFT)
CHOSEN = "cache_write"


def within_sampling_bound(kept: int, population: int, shift: int) -> bool:
    """A binomial count of 1 in 2^shift within 5 standard deviations (and 5) of its mean."""
    p = 2.0**-shift
    return abs(kept - population * p) <= 5 * math.sqrt(population * p * (1 - p)) + 5


def kept_by(events: np.ndarray, launches: np.ndarray, shift: int, epochs_back: int) -> np.ndarray:
    """Each event's block kept by the epoch of its timestamp or one of the `epochs_back` before:
    the patch reads %globaltimer for its choice before it stamps the record, so the record may
    fall in the next epoch."""
    block = linear_block(events, launches)
    epoch = events["globaltimer_ns"] >> EPOCH_SHIFT
    kept = np.zeros(len(events), dtype=bool)
    for back in range(epochs_back + 1):
        kept |= numpy_block_sample_keep(events["grid_id"], block, epoch - np.uint64(back), shift)
    return kept


@pytest.fixture(scope="module")
def two_modules_program(tmp_path_factory: pytest.TempPathFactory) -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = tmp_path_factory.mktemp("programs") / "two_modules"
    subprocess.run(
        [
            nvcc,
            "-O2",
            "-arch=sm_90",
            "-o",
            str(binary),
            str(PROGRAMS / "two_modules_main.cu"),
            str(PROGRAMS / "two_modules_cache.cu"),
        ],
        check=True,
    )
    return str(binary)


def test_block_set_sampled_counts_every_block_and_records_the_hashed_ones(geometry_program, shm_dir) -> None:
    shift = 3
    run = InjectedRun(
        [geometry_program, "--rounds", "4"],
        shm_dir,
        mode="sampled",
        patch_set="block",
        shift=shift,
        ring_records=1 << 21,
        env={"GPUOBS_BLOCK_EXIT": "1", "GPUOBS_LAUNCH_TRACE": "1"},
    )
    out = run.finish()
    events, launches = run.all_events(), run.all_launches()
    counters = run.global_counters()
    assert counters["device_events_dropped"] == 0 and counters["device_events_produced"] == len(events)
    assert counters["device_memory_accesses"] == 0
    table = run.kernel_table()
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        assert row["blocks_observed"] == row["blocks_expected"] == 4 * math.prod(spec["grid"]), name
    kinds = events["kind"]
    enters, exits = events[kinds == EVENT_KINDS["block_enter"]], events[kinds == EVENT_KINDS["block_exit"]]
    assert ((enters["flags"] & BLOCK_SAMPLED) != 0).all() and ((exits["flags"] & BLOCK_SAMPLED) != 0).all()
    assert kept_by(enters, launches, shift, 1).all()  # no event of a block the hash did not keep
    assert kept_by(exits, launches, shift, 2).all()
    population = int(sum(4 * math.prod(spec["grid"]) for spec in out["kernels"].values()))
    assert within_sampling_bound(len(enters), population, shift), (len(enters), population)

    # every kept block's exit came (the blocks are far shorter than an epoch)
    def key(e: np.ndarray) -> set:
        return set(zip(e["grid_id"].tolist(), e["block_x"].tolist(), e["block_y"].tolist(), e["block_z"].tolist()))

    assert key(enters) <= key(exits)
    # an exit without its enter was kept by an epoch its block did not enter in: the flagged ones,
    # or unflagged where the block entered in the epoch before (choice and stamp one epoch apart)
    alone = exits[
        [
            k not in key(enters)
            for k in zip(
                exits["grid_id"].tolist(),
                exits["block_x"].tolist(),
                exits["block_y"].tolist(),
                exits["block_z"].tolist(),
            )
        ]
    ]
    assert len(alone) <= 1.5 * len(enters) + 20  # about as many as the enters: p(1 - p) of the blocks


def test_sampled_reaches_graph_execs_captured_before_it_and_counter_after_it(shm_dir, tmp_path) -> None:
    """The deployed case: graphs captured in counter (block set), then `set-mode sampled`; the
    replays record sampled blocks joined to their node executions, counts stay exact; back to
    counter, the replays record nothing more."""
    argv = DECODE + ["--layers", "6", "--replays", "400", "--wait-before-replays"]
    reference = InjectedRun(argv, shm_dir, inject=False)
    reference.send_line()
    reference_out = reference.finish()
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port(), "--analysis-share", "1")
    try:
        run = InjectedRun(argv, shm_dir, mode="counter", patch_set="block", drain=False, ring_records=1 << 22)
        assert run.read_json_line() == {"captured": True}
        switched = gpuobsctl(daemon.address, "set-mode", "sampled", "--shift", "4")
        assert switched.returncode == 0 and "failed_precondition" not in switched.stdout, switched.stdout
        run.send_line()
        out = run.finish()
        daemon.wait_all_gone()
        process = daemon.status().processes[0]
        graph = [g for g in daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=0), timeout=30).graphs if g.replays][0]
        kernels = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=30).kernels
    finally:
        daemon.stop()
    assert out["checksum"] == reference_out["checksum"]
    assert (process.mode, process.patch_set, process.accounting_errors) == ("sampled", "block", 0)
    stage = device_stage(process)
    assert stage.produced == stage.delivered + stage.dropped + stage.torn + stage.corrupt
    assert all(k.blocks_observed + k.blocks_unobserved + k.blocks_unpatched == k.blocks_expected for k in kernels)
    assert graph.executions_sampled > 0 and graph.events_unmatched == 0
    assert graph.executions_mismatched == 0 or stage.dropped > 0
    judged = (
        graph.executions_matched
        + graph.executions_mismatched
        + graph.executions_sampled
        + graph.executions_unrecorded
        + graph.executions_unjoined
    )
    assert judged == graph.node_executions


@pytest.mark.parametrize("mode", ["memory", "sampled"])
def test_chosen_kernels_modules_alone_get_the_access_hooks(two_modules_program, shm_dir, mode) -> None:
    shift = 2
    reference = InjectedRun([two_modules_program], shm_dir, inject=False).finish()
    run = InjectedRun(
        [two_modules_program],
        shm_dir,
        mode=mode,
        patch_set="block",
        shift=shift,
        ring_records=1 << 21,
        env={"GPUOBS_MEMORY_KERNELS": CHOSEN, "GPUOBS_LAUNCH_TRACE": "1"},
    )
    out = run.finish()
    assert out["checksum"] == reference["checksum"]
    counters = run.global_counters()
    assert counters["modules_access_hooked"] == 1 and counters["device_events_dropped"] == 0
    table = run.kernel_table()
    events, launches = run.all_events(), run.all_launches()
    hooked = {"cache_write_kernel", "cache_neighbour_kernel"}  # one module: the choice covers both
    for name, spec in out["kernels"].items():
        row = find_kernel(table, name)
        assert row["blocks_observed"] == row["blocks_expected"] == 3 * math.prod(spec["grid"]), name
        expected = 3 * spec["accesses_per_launch"] if name in hooked else 0
        assert row["memory_accesses"] == expected, name
        mine = events[events["kernel_slot"] == row["slot"]]
        accesses = mine[mine["kind"] == EVENT_KINDS["memory_access"]]
        blocks = mine[mine["kind"] == EVENT_KINDS["block_enter"]]
        if name in hooked:
            assert len(blocks) == 0, name
            if mode == "memory":
                assert len(accesses) == expected, name
            else:
                assert numpy_sample_keep(
                    accesses["pc"], accesses["thread"], linear_block(accesses, launches), shift
                ).all(), name
        else:
            assert len(accesses) == 0, name
            if mode == "memory":
                assert len(blocks) == 0, name  # counted only
            else:
                assert kept_by(blocks, launches, shift, 1).all(), name
    assert any(MODES[mode] == m for m in launches["mode"].tolist())


def test_outputs_identical_with_block_set_sampled_and_chosen_kernels(two_modules_program, shm_dir) -> None:
    reference = InjectedRun([two_modules_program], shm_dir, inject=False).finish()
    for env in ({"GPUOBS_BLOCK_EXIT": "1"}, {"GPUOBS_MEMORY_KERNELS": CHOSEN}):
        run = InjectedRun([two_modules_program], shm_dir, mode="sampled", patch_set="block", shift=0, env=env)
        assert run.finish()["checksum"] == reference["checksum"], env
