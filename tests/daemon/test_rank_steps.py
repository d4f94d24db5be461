"""The ranks of a tensor-parallel job side by side (`gpuobsctl steps --ranks`): three gpuobs-synth
processes play the three ranks of one engine, each writing a step before each replay of its graph
with the injector's writer, one of them a straggler whose device takes longer over each replay
(--replay-delay-us); a fourth process says nothing about itself."""

from __future__ import annotations

import json
import subprocess

import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.synth import synth_binary

NODES, STEPS, WORLD = 4, 12, 3
SLOW_RANK, DELAY_US = 1, 20_000
MODEL = "Qwen3-8B"


def start_job(start_synth, start_daemon, mode: str, env: dict | None = None):
    """The job's ranks and a process without identity, run to their end, then drained."""
    ranks = [
        start_synth(
            "--mode",
            mode,
            "--graph-nodes",
            str(NODES),
            "--steps",
            "--launches",
            str(NODES * STEPS),
            "--rank",
            str(rank),
            "--world-size",
            str(WORLD),
            "--model",
            MODEL,
            "--label",
            f"vllm engine rank {rank}",
            *(["--replay-delay-us", str(DELAY_US)] if rank == SLOW_RANK else []),
            env=env or {},
        )
        for rank in range(WORLD)
    ]
    plain = start_synth(
        "--mode", mode, "--graph-nodes", str(NODES), "--steps", "--launches", str(NODES * STEPS), env=env or {}
    )
    daemon = start_daemon("--analysis-share", "1")  # every replay joined: spans are not left to the budget
    for synth in (*ranks, plain):
        assert synth.wait() == 0
    daemon.wait_all_gone()
    return daemon, ranks, plain


def ranks_json(daemon) -> dict:
    done = gpuobsctl(daemon.address, "--output", "json", "steps", "--ranks", "--last", str(STEPS))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["blocks", "counter"])
def test_device_spans_align_by_step_and_name_the_straggler(start_synth, start_daemon, mode: str) -> None:
    """`blocks` spans a step by its block events, `counter` by its replay's span (block (0,0,0)'s
    first entry to its last: the straggler's delay is before its last node)."""
    daemon, ranks, plain = start_job(start_synth, start_daemon, mode)
    # each step's span is its replay's, first block enter to last block event, on the device clock
    response = daemon.stub.ListSteps(pb.ListStepsRequest(pids=[ranks[SLOW_RANK].pid], last=STEPS), timeout=10)
    for step in response.steps:
        (replay,) = step.replays
        assert 0 < replay.device_start_ns < replay.device_end_ns
        assert step.device_span_ns == replay.device_end_ns - replay.device_start_ns >= DELAY_US * 1000

    data = ranks_json(daemon)
    assert data["schema_version"] == 1
    assert data["left_out"] == [{"pids": [plain.pid], "reason": data["left_out"][0]["reason"]}]
    assert "no identity" in data["left_out"][0]["reason"]
    (job,) = data["jobs"]
    assert (job["model"], job["world_size"]) == (MODEL, WORLD)
    assert job["ranks"] == [{"rank": rank, "pid": synth.pid} for rank, synth in enumerate(ranks)]
    assert [s["step"] for s in job["steps"]] == list(range(1, STEPS + 1))
    for step in job["steps"]:
        assert [(r["rank"], r["pid"]) for r in step["ranks"]] == [(rank, s.pid) for rank, s in enumerate(ranks)]
        assert step["missing_ranks"] == []
        assert step["basis"] == "device" and all(r["device_span_ns"] > 0 for r in step["ranks"])
        spans = [r["device_span_ns"] for r in step["ranks"]]
        assert step["slowest_rank"] == SLOW_RANK and spans[SLOW_RANK] >= DELAY_US * 1000
        assert step["spread"] == max(spans) / min(spans) > 1

    text = gpuobsctl(daemon.address, "steps", "--ranks", "--last", str(STEPS))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert f"left out: pid(s) {plain.pid}: no identity" in lines[0]
    header = next(line for line in lines if line.startswith("STEP"))
    assert header.split() == ["STEP", "TOKENS", "r0", "r1", "r2", "SLOWEST", "SPREAD"]
    rows = [line.split() for line in lines[lines.index(header) + 1 :]]
    assert [int(row[0]) for row in rows] == list(range(1, STEPS + 1))
    assert all(row[5] == f"r{SLOW_RANK}" and float(row[2 + SLOW_RANK]) >= DELAY_US for row in rows)

    # kernels: a RANK column, since some process says which rank it is
    kernels = gpuobsctl(daemon.address, "kernels", "--top", "0").stdout.splitlines()
    assert kernels[0].split()[:3] == ["PID", "RANK", "LAUNCHES"]
    rank_of = {int(line.split()[0]): line.split()[1] for line in kernels[1:]}
    assert rank_of == {**{s.pid: str(rank) for rank, s in enumerate(ranks)}, plain.pid: "-"}


def test_without_device_spans_ranks_compare_host_starts(start_synth, start_daemon) -> None:
    """`counter` without replay spans (GPUOBS_REPLAY_SPANS=0) has no device timestamp: steps are
    aligned by their host start times."""
    daemon, ranks, plain = start_job(start_synth, start_daemon, "counter", {"GPUOBS_REPLAY_SPANS": "0"})
    for step in daemon.stub.ListSteps(pb.ListStepsRequest(last=STEPS), timeout=10).steps:
        (replay,) = step.replays
        assert (replay.device_start_ns, replay.device_end_ns, step.device_span_ns) == (0, 0, 0)
    (job,) = ranks_json(daemon)["jobs"]
    starts = {}
    for step in job["steps"]:
        assert step["basis"] == "host" and step["spread"] == 0
        by_rank = {r["rank"]: r for r in step["ranks"]}
        assert min(r["host_offset_ns"] for r in by_rank.values()) == 0
        latest = max(by_rank.values(), key=lambda r: r["host_time_ns"])
        assert step["slowest_rank"] == latest["rank"]
        starts[step["step"]] = by_rank
    assert sorted(starts) == list(range(1, STEPS + 1))
    text = gpuobsctl(daemon.address, "steps", "--ranks", "--pid", str(ranks[0].pid), "--pid", str(ranks[2].pid))
    assert text.returncode == 0, text.stderr
    header = next(line for line in text.stdout.splitlines() if line.startswith("STEP"))
    assert header.split() == ["STEP", "TOKENS", "r0", "r2", "SLOWEST", "SPREAD"]  # --pid: only those ranks
    assert "left out" not in text.stdout
    row = text.stdout.splitlines()[-1].split()
    assert row[2].startswith("+") and row[3].startswith("+")


def test_ranks_refuses_what_it_cannot_align(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    both = gpuobsctl(daemon.address, "steps", "--ranks", "--replay", "3")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr  # usage
    assert "Traceback" not in both.stderr
    synth = start_synth("--mode", "counter", "--graph-nodes", "2", "--steps", "--launches", "20")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    unknown = gpuobsctl(daemon.address, "steps", "--ranks", "--pid", "1")
    assert unknown.returncode == 1 and "no observed process with pid 1" in unknown.stderr, unknown.stderr
    nobody = gpuobsctl(daemon.address, "steps", "--ranks")
    assert nobody.returncode == 0 and "no job to show" in nobody.stdout, nobody.stdout
    assert f"left out: pid(s) {synth.pid}: no identity" in nobody.stdout
    data = json.loads(gpuobsctl(daemon.address, "--output", "json", "steps", "--ranks").stdout)
    assert (data["jobs"], [left["pids"] for left in data["left_out"]]) == ([], [[synth.pid]])


def test_synth_refuses_a_replay_delay_it_cannot_show() -> None:
    """The delay comes before a replay's last node: with one node it would not lengthen the span."""
    done = subprocess.run(
        [synth_binary(), "--graph-nodes", "1", "--replay-delay-us", "5"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "--replay-delay-us needs --graph-nodes 2 or more" in done.stderr
