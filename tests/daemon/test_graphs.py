"""The graph census from node launch records (gpuobs-synth replaying one graph of known shape)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from gpuobs.daemon.proto.gpuobs.v1 import observer_pb2 as pb

NODES, REPLAYS = 7, 40


def test_graphs_report_nodes_replays_and_blocks(start_synth, start_daemon) -> None:
    synth = start_synth("--mode", "counter", "--graph-nodes", str(NODES), "--launches", str(NODES * REPLAYS),
                        "--rate", "200000", "--kernels", "8")
    daemon = start_daemon()
    assert synth.wait() == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not daemon.status().processes or daemon.status().processes[0].alive):
        time.sleep(0.05)
    graphs = daemon.stub.ListGraphs(pb.ListGraphsRequest(), timeout=10).graphs
    assert len(graphs) == 1
    graph = graphs[0]
    assert (len(graph.nodes), graph.replays, graph.node_executions) == (NODES, REPLAYS, NODES * REPLAYS)
    assert (graph.first_launch_id, graph.last_launch_id) == (1, REPLAYS)
    assert graph.order_stable
    assert all(node.executions == REPLAYS and len(node.grid_ids) == 1 for node in graph.nodes)
    kernels = {k.slot: k for k in daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels}
    # every node execution is a launch of its kernel; counter mode counted every block
    for node in graph.nodes:
        assert kernels[node.slot].launches >= REPLAYS
    assert graph.blocks_per_replay * REPLAYS == sum(k.blocks_observed for k in kernels.values())
    done = subprocess.run([sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "--output",
                           "json", "graphs"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["replays"] == str(REPLAYS)  # uint64 is a string in proto JSON
