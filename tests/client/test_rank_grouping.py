"""The grouping behind `gpuobsctl steps --ranks`, on status and step messages as the daemon sends
them: processes into jobs by (model, world size), their steps aligned by step number."""

from __future__ import annotations

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.client.rank_steps import DEVICE, HOST, Job, align_steps, group_jobs, ranks_with_steps


def process(
    pid: int, rank: int | None = None, world_size: int = 2, model: str = "Qwen3-8B", alive: bool = True
) -> pb.Process:
    if rank is None:
        return pb.Process(pid=pid, alive=alive)
    return pb.Process(
        pid=pid, alive=alive, identity_set=True, role="engine", rank=rank, world_size=world_size, model=model
    )


def step(pid: int, number: int, host_time_ns: int, span_ns: int = 0, tokens: int = 1) -> pb.Step:
    return pb.Step(pid=pid, step=number, host_time_ns=host_time_ns, device_span_ns=span_ns, tokens=tokens)


def test_processes_group_into_jobs_by_model_and_world_size() -> None:
    jobs, left_out = group_jobs(
        [
            process(11, 1),
            process(10, 0),
            process(20, 0, world_size=1, model="tiny"),
            process(30),
            process(40, 0, world_size=4),
            process(41, 1, world_size=4),  # another world size: another job
        ]
    )
    assert jobs == [Job("Qwen3-8B", 2, {0: 10, 1: 11}), Job("Qwen3-8B", 4, {0: 40, 1: 41}), Job("tiny", 1, {0: 20})]
    assert [(left.pids, "no identity" in left.reason) for left in left_out] == [([30], True)]


def test_a_rank_held_twice_takes_the_live_process_or_leaves_the_job_out() -> None:
    # a restarted job: the exited rank 0 is left out, the live one kept
    jobs, left_out = group_jobs([process(10, 0, alive=False), process(12, 0), process(11, 1)])
    assert jobs == [Job("Qwen3-8B", 2, {0: 12, 1: 11})]
    assert [left.pids for left in left_out] == [[10]] and "live pid 12 is rank 0" in left_out[0].reason
    # two live jobs of one model and world size: not guessed
    jobs, left_out = group_jobs([process(10, 0), process(11, 1), process(20, 0), process(21, 1)])
    assert jobs == []
    (left,) = left_out
    assert left.pids == [10, 11, 20, 21] and "rank(s) 0, 1 held by several processes" in left.reason
    assert "--pid" in left.reason


def test_steps_align_by_number_with_the_slowest_rank_and_the_spread() -> None:
    job = Job("Qwen3-8B", 3, {0: 10, 1: 11, 2: 12})
    aligned = align_steps(
        job,
        [
            step(10, 7, 1_000, 100_000, tokens=4),
            step(11, 7, 1_500, 300_000, tokens=4),
            step(12, 7, 900, 150_000),
            step(10, 8, 2_000, 100_000),
            step(12, 8, 2_100, 0),  # rank 2 without a span, rank 1 without the step
            step(11, 9, 3_000, 50_000),
            step(99, 9, 0, 1),  # a pid of no rank of the job: ignored
        ],
    )
    assert [s.step for s in aligned] == [7, 8, 9]
    seven, eight, nine = aligned
    assert (seven.basis, seven.slowest, seven.spread) == (DEVICE, 1, 3.0)
    assert [(r.rank, r.pid, r.host_offset_ns, r.tokens) for r in seven.ranks.values()] == [
        (0, 10, 100, 4),
        (1, 11, 600, 4),
        (2, 12, 0, 1),
    ]
    # a rank without a span: the row compares host starts, the latest being the slowest
    assert (eight.basis, eight.slowest, eight.spread, sorted(eight.ranks)) == (HOST, 2, 0.0, [0, 2])
    assert (nine.basis, nine.slowest, nine.spread, list(nine.ranks)) == (DEVICE, 1, 0.0, [1])  # one rank: no spread
    assert ranks_with_steps(job, aligned) == [0, 1, 2]
    assert ranks_with_steps(job, aligned[2:]) == [1]
    assert align_steps(job, []) == []


def test_equal_spans_name_the_lowest_rank() -> None:
    job = Job("m", 2, {0: 10, 1: 11})
    (only,) = align_steps(job, [step(11, 1, 5, 200), step(10, 1, 5, 200)])
    assert (only.slowest, only.spread) == (0, 1.0)
