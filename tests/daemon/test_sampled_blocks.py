"""`sampled` where it is deployed: a block-set process with live CUDA graph execs (the vLLM
drop-in's GPUOBS_PATCH_SET=block, mode counter, graphs captured at start) takes `set-mode
sampled --shift N` and every other switch of its set, both ways; its sampled block events join
to their graph exec, node and replay; its counts stay exact; and GPUOBS_MEMORY_KERNELS gives
`memory` and `sampled` accesses of chosen kernels with no other patch set."""

from __future__ import annotations

import itertools
import time

import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import device_stage, gpuobsctl

NODES = 8
BLOCK_SET_MODES = ["off", "noop", "counter", "blocks", "sampled"]


def deployed(start_synth, *extra: str):
    """A process as the drop-in starts vLLM: block set, counter, graph execs alive."""
    return start_synth(
        "--patch-set",
        "block",
        "--mode",
        "counter",
        "--graph-nodes",
        str(NODES),
        "--live-graphs",
        "1",
        "--kernels",
        "8",
        *extra,
    )


def wait_replays(daemon, pid: int, replays: int, timeout: float = 20.0) -> None:
    """Until the process has launched `replays` more replays of its graph than now."""
    launches = lambda: next(p for p in daemon.status().processes if p.pid == pid).launches  # noqa: E731
    wanted = launches() + replays * NODES
    deadline = time.monotonic() + timeout
    while launches() < wanted:
        assert time.monotonic() < deadline, f"fewer than {replays} replays in {timeout} s"
        time.sleep(0.05)


def wait_events(daemon, pid: int, more_than: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process = next(p for p in daemon.status().processes if p.pid == pid)
        if device_stage(process).delivered > more_than:
            return device_stage(process).delivered
        time.sleep(0.05)
    raise AssertionError(f"no events past {more_than} in {timeout} s")


def test_set_mode_sampled_is_acknowledged_beside_live_graph_execs_and_joins_its_events(
    start_synth, start_daemon
) -> None:
    synth = deployed(start_synth, "--rate", "2000000")
    daemon = start_daemon("--analysis-share", "1")
    daemon.wait_processes(1)
    time.sleep(0.3)
    assert device_stage(daemon.status().processes[0]).delivered == 0  # counter records no event
    result = gpuobsctl(daemon.address, "set-mode", "sampled", "--shift", "10")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout and "failed_precondition" not in result.stdout, result.stdout
    process = daemon.status().processes[0]
    assert (process.mode, process.shift, process.patch_set, process.control_status) == ("sampled", 10, "block", "ok")
    wait_events(daemon, synth.pid, 200)
    assert gpuobsctl(daemon.address, "set-mode", "counter").returncode == 0
    time.sleep(0.2)
    assert synth.stop() == 0
    process = daemon.wait_all_gone().processes[0]
    stage = device_stage(process)
    assert stage.produced == stage.delivered + stage.dropped + stage.torn + stage.corrupt
    assert process.accounting_errors == 0
    kernels = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels
    launched = [k for k in kernels if k.launches]
    assert all(k.blocks_observed == k.blocks_expected for k in launched)  # every block counted, all along
    assert all(k.memory_accesses == 0 and not k.access_hooks for k in launched)
    assert {k.records for k in launched} == {"counts"}  # what counter records, now
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=0), timeout=10).graphs[0]
    assert graph.alive and graph.executions_sampled > 0
    assert graph.executions_mismatched == 0 and graph.events_unmatched == 0  # every sampled event joined
    assert (
        graph.executions_matched
        + graph.executions_mismatched
        + graph.executions_sampled
        + graph.executions_unrecorded
        + graph.executions_unjoined
    ) == graph.node_executions
    # every kept block's enter joined to its node: an enter and an exit per kept block, the exits
    # the epoch before keeps (at most as many), and from a kept block (0,0,0) its launch, are all
    # the events there are
    joined = sum(node.blocks_observed for node in graph.nodes)
    assert 0 < 2 * joined <= stage.delivered <= 4 * joined
    listed = gpuobsctl(daemon.address, "graphs")
    assert listed.returncode == 0 and " sampled, " in listed.stdout, listed.stdout


def test_every_switch_of_the_block_set_is_taken_both_ways_with_live_graph_execs(start_synth, start_daemon) -> None:
    synth = deployed(start_synth, "--rate", "200000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    for before, after in itertools.permutations(BLOCK_SET_MODES, 2):
        for mode in (before, after):
            reply = daemon.stub.SetMode(pb.SetModeRequest(mode=mode, shift=6, timeout_ms=5000), timeout=10)
            (result,) = reply.results
            assert result.acknowledged and result.status == "ok", (before, after, result)
    process = daemon.status().processes[0]
    assert (process.mode, process.patch_set) == (BLOCK_SET_MODES[-2], "block")
    assert synth.stop() == 0


def test_memory_is_refused_with_its_remedy_where_no_kernel_has_access_hooks(start_synth, start_daemon) -> None:
    synth = deployed(start_synth, "--rate", "200000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    result = gpuobsctl(daemon.address, "set-mode", "memory")
    assert result.returncode != 0
    assert (
        "GPUOBS_MEMORY_KERNELS=REGEX" in result.stdout + result.stderr
        and "use sampled" in result.stdout + result.stderr
    )
    process = daemon.status().processes[0]
    assert (process.mode, process.patch_set) == ("counter", "block")  # nothing changed
    assert synth.stop() == 0


@pytest.mark.parametrize("mode", ["sampled", "memory"])
def test_chosen_kernels_record_accesses_beside_live_graph_execs(start_synth, start_daemon, mode: str) -> None:
    chosen = "reshape_and_cache|flash_fwd"
    synth = deployed(start_synth, "--rate", "1000000", "--memory-kernels", chosen)
    daemon = start_daemon("--analysis-share", "1")
    daemon.wait_processes(1)
    process = daemon.status().processes[0]
    assert process.memory_kernels == chosen and process.injector.modules_access_hooked >= 1
    result = gpuobsctl(daemon.address, "set-mode", mode, "--shift", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    wait_replays(daemon, synth.pid, 3)  # every node ran in the new mode
    assert synth.stop() == 0
    daemon.wait_all_gone()
    kernels = [k for k in daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels if k.launches]
    hooked = [k for k in kernels if k.access_hooks]
    others = [k for k in kernels if not k.access_hooks]
    assert hooked and others
    assert all(("reshape_and_cache" in k.name or "flash_fwd" in k.name) for k in hooked)
    assert all(k.memory_accesses > 0 for k in hooked) and all(k.memory_accesses == 0 for k in others), "; ".join(
        f"{k.name[:30]} {k.launches} {k.memory_accesses} {k.access_hooks}" for k in kernels
    )
    assert all(k.blocks_observed == k.blocks_expected for k in kernels)
    sample = " 1/2^4" if mode == "sampled" else ""
    assert {k.records for k in hooked} == {"accesses" + sample}
    assert {k.records for k in others} == ({"blocks 1/2^4"} if mode == "sampled" else {"counts"})
    status = gpuobsctl(daemon.address, "status")
    assert f"access hooks for kernels matching '{chosen}'" in status.stdout, status.stdout
    listing = gpuobsctl(daemon.address, "kernels", "--top", "0")
    assert "RECORDS" in listing.stdout and f"accesses{sample}" in listing.stdout, listing.stdout
