"""The graph census (gpuobs-synth replaying one graph of known shape, as the injector records it:
a graph launch record per replay, node records for the first replay only, or for every replay
with the launch trace)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from gpuobs.api.v1 import observer_pb2 as pb

NODES, REPLAYS = 7, 40


@pytest.mark.parametrize("trace", [False, True])
def test_graphs_report_nodes_replays_and_blocks(start_synth, start_daemon, trace: bool) -> None:
    synth = start_synth(
        "--mode",
        "counter",
        "--graph-nodes",
        str(NODES),
        "--launches",
        str(NODES * REPLAYS),
        "--rate",
        "200000",
        "--kernels",
        "8",
        *(["--launch-trace"] if trace else []),
    )
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone()
    graphs = daemon.stub.ListGraphs(pb.ListGraphsRequest(), timeout=10).graphs
    assert len(graphs) == 1
    graph = graphs[0]
    assert (len(graph.nodes), graph.replays, graph.node_executions) == (NODES, REPLAYS, NODES * REPLAYS)
    assert graph.replays_nodes_unknown == 0
    # the driver's launch ids come with node records: every replay's in the trace, the first's else
    assert (graph.first_launch_id, graph.last_launch_id) == (1, REPLAYS if trace else 1)
    assert graph.order_stable
    assert all(node.executions == REPLAYS and len(node.grid_ids) == 1 for node in graph.nodes)
    kernels = {k.slot: k for k in daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels}
    # every node execution is a launch of its kernel; counter mode counted every block
    for node in graph.nodes:
        assert kernels[node.slot].launches >= REPLAYS
    assert graph.blocks_per_replay * REPLAYS == sum(k.blocks_observed for k in kernels.values())
    done = subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "--output", "json", "graphs"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["schema_version"] == 1 and listed["graphs"][0]["replays"] == REPLAYS  # a number, not a string
    done = subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "graphs"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and f"{NODES} kernel nodes, {REPLAYS} replays" in done.stdout, done.stderr


def test_every_node_execution_is_joined_to_its_own_replays_events(start_synth, start_daemon) -> None:
    """Blocks mode: the nodes keep their grid ids in all 40 replays, so only the replay number
    tells the replays' events apart; a join on grid id alone would give node_blocks x40."""
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(NODES),
        "--launches",
        str(NODES * REPLAYS),
        "--rate",
        "100000",
        "--kernels",
        "8",
        "--ring-records",
        str(1 << 18),
    )
    # the join and the pairing are what is checked here, not the daemon's budget for them (on a
    # loaded 2-core machine the budget can skip a batch: counted, and then not all pairs)
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=REPLAYS), timeout=10).graphs[0]
    assert graph.alive and graph.replays == REPLAYS
    assert (
        graph.executions_matched,
        graph.executions_mismatched,
        graph.executions_unrecorded,
        graph.executions_unjoined,
    ) == (NODES * REPLAYS, 0, 0, 0)
    assert graph.events_unmatched == 0 and graph.order_stable and graph.device_order_stable
    assert [r.replay for r in graph.recent_replays] == list(range(1, REPLAYS + 1))
    per_node = [node.blocks_per_execution for node in graph.nodes]
    for replay in graph.recent_replays:
        assert (replay.node_executions, replay.nodes_matched, replay.mode) == (NODES, NODES, "blocks")
        assert list(replay.node_blocks) == per_node
        assert replay.device_end_ns >= replay.device_start_ns > 0
    starts = [r.device_start_ns for r in graph.recent_replays]
    assert starts == sorted(starts)
    assert all(r.gap_ns >= 0 for r in graph.recent_replays[1:]) and graph.recent_replays[0].gap_ns == 0
    for node in graph.nodes:
        assert (node.executions_matched, node.blocks_observed) == (REPLAYS, REPLAYS * node.blocks_per_execution)
    kernels = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels
    for kernel in kernels:
        if not kernel.launches:
            continue
        assert kernel.graph_launches == kernel.launches
        assert len(kernel.shapes) == 1 and kernel.shapes[0].launches == kernel.launches
        durations = kernel.block_durations
        # gpuobs-synth writes an exit after every enter: every block pairs
        assert (durations.count, durations.unpaired) == (kernel.blocks_observed, 0), kernel.name
        assert durations.min_ns <= durations.p50_ns <= durations.p99_ns <= durations.max_ns


def test_replays_queued_far_ahead_of_the_device_are_joined_when_they_run(start_synth, start_daemon) -> None:
    """A GPU runs replays long after the host launched them (its queue holds over a thousand
    replays of a short graph): the daemon reads the launch records of replays the device has not
    begun, and catches up with every event there is, over and over. It judges a replay only once
    the device has begun a later one (GlobalCounters.device_replay_begun), so every event still
    finds its replay however far the window (GraphJoin.KEEP_REPLAYS) is behind the host."""
    from gpuobs.daemon.graph_join import GraphJoin
    from gpuobs_testing.daemon import device_stage

    nodes, replays, lag = 2, 1600, GraphJoin.KEEP_REPLAYS + 200
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(nodes),
        "--launches",
        str(nodes * replays),
        "--device-lag",
        str(nodes * lag),
        "--rate",
        "100000",
        "--kernels",
        "8",
        "--ring-records",
        str(1 << 20),
    )
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait(timeout=120) == 0
    daemon.wait_all_gone()
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(), timeout=10).graphs[0]
    assert device_stage(daemon.status().processes[0]).dropped == 0
    assert (graph.replays, graph.node_executions) == (replays, nodes * replays)
    assert (
        graph.executions_matched,
        graph.executions_mismatched,
        graph.executions_unrecorded,
        graph.executions_unjoined,
        graph.events_unmatched,
    ) == (nodes * replays, 0, 0, 0, 0)


def test_replays_argument_is_checked(start_daemon) -> None:
    import grpc
    import pytest

    daemon = start_daemon()
    with pytest.raises(grpc.RpcError) as error:
        daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=5000), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.slow
def test_the_daemon_answers_while_a_graph_replays_at_full_speed(start_synth, start_daemon) -> None:
    """Joining costs Python time per node execution: beyond the analysis budget executions are
    counted unjoined, and set-mode and status keep answering within their deadlines."""
    from gpuobs_testing.daemon import device_stage

    daemon = start_daemon()
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        "40",
        "--rate",
        "0",
        "--kernels",
        "8",
        "--ring-records",
        str(1 << 20),
        "--duration",
        "8",
    )
    daemon.wait_processes(1)
    # through the stub, not the CLI: a new Python process starts slowly on a saturated 2-core machine
    for mode in ["counter", "blocks"] * 5:
        began = time.monotonic()
        results = daemon.stub.SetMode(pb.SetModeRequest(mode=mode, timeout_ms=2000), timeout=7).results
        assert [r.status for r in results] == ["ok"] and time.monotonic() - began < 3, results
        time.sleep(0.3)
    assert synth.wait(timeout=60) == 0
    daemon.wait_all_gone()
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(), timeout=30).graphs[0]
    judged = graph.executions_matched + graph.executions_mismatched + graph.executions_unrecorded
    assert judged + graph.executions_unjoined == graph.node_executions > 0
    for node in graph.nodes:
        assert (
            node.executions_matched + node.executions_mismatched + node.executions_unrecorded + node.executions_unjoined
            == node.executions
        )
    if device_stage(daemon.status().processes[0]).dropped == 0:
        assert graph.executions_mismatched == 0
