"""Engine steps (the records the vLLM plugin writes) joined to the replays they launched:
gpuobs-synth writes a step before each replay of its graph, with the injector's writer."""

from __future__ import annotations

import json

import grpc
import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import gpuobsctl

NODES, REPLAYS = 5, 30


def expected_ids(step: int) -> list[str]:
    group = (step - 1) // 3  # gpuobs-synth changes its requests every 3 steps
    return [f"cmpl-synth-{group}-{k}" for k in range(1 + group % 4)]


def test_each_replay_belongs_to_its_step_and_requests(start_synth, start_daemon) -> None:
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(NODES),
        "--steps",
        "--launches",
        str(NODES * REPLAYS),
        "--rate",
        "100000",
        "--kernels",
        "8",
        "--ring-records",
        str(1 << 18),
        "--label",
        "vllm engine rank 0",
    )
    daemon = start_daemon("--analysis-share", "1")  # the join is checked here, not the daemon's budget for it
    assert synth.wait() == 0
    daemon.wait_all_gone()
    response = daemon.stub.ListSteps(pb.ListStepsRequest(last=REPLAYS), timeout=10)
    (totals,) = response.totals
    assert (totals.steps, totals.launches_before_steps) == (REPLAYS, 0)
    assert [s.step for s in response.steps] == list(range(1, REPLAYS + 1))
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=REPLAYS), timeout=10).graphs[0]
    blocks_per_replay = graph.blocks_per_replay
    graph_replays = {r.replay: r for r in graph.recent_replays}
    for step in response.steps:
        assert step.label == "vllm engine rank 0"
        ids = expected_ids(step.step)
        assert (list(step.request_ids), step.request_ids_complete) == (ids, True)
        assert (step.requests, step.tokens) == (len(ids), len(ids))
        assert (step.kernel_launches, step.blocks_expected) == (NODES, blocks_per_replay)
        (replay,) = step.replays
        assert (replay.graph_exec, replay.replay) == (graph.graph_exec, step.step)
        # the replay's node executions, joined to their events by the graph census
        assert (replay.node_executions, replay.nodes_matched, replay.blocks_observed, replay.mode) == (
            NODES,
            NODES,
            blocks_per_replay,
            "blocks",
        )
        # its span on the device clock, the one `graphs` shows, and the step's (one replay)
        shown = graph_replays[replay.replay]
        assert 0 < replay.device_start_ns < replay.device_end_ns
        assert (replay.device_start_ns, replay.device_end_ns) == (shown.device_start_ns, shown.device_end_ns)
        assert step.device_span_ns == shown.span_ns

    (process,) = daemon.status().processes
    assert process.engine_steps == REPLAYS
    done = gpuobsctl(daemon.address, "--output", "json", "steps", "--replay", "17")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)["steps"]
    assert (found["step"], found["request_ids"]) == (17, expected_ids(17))
    text = gpuobsctl(daemon.address, "steps", "--last", "3")
    assert text.returncode == 0 and f"{REPLAYS} steps recorded" in text.stdout
    assert "cmpl-synth-9-0" in text.stdout  # steps 28..30 are group 9


def test_steps_refuse_bad_requests(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    synth = start_synth("--mode", "counter", "--graph-nodes", "3", "--steps", "--launches", "30")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    with pytest.raises(grpc.RpcError) as error:
        daemon.stub.ListSteps(pb.ListStepsRequest(last=100000), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as error:
        daemon.stub.ListSteps(pb.ListStepsRequest(replay=999), timeout=10)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    done = gpuobsctl(daemon.address, "steps", "--pid", "1")
    assert done.returncode != 0 and "1" in done.stderr
