"""The ranks of a tensor-parallel job side by side, step by step (gpuobsctl steps --ranks).

A decode step of a job of W ranks is one engine step in each of W processes, and each process
numbers its steps the same way, so step N of rank 0 and step N of rank 1 are the same step: they
are aligned by step number. What tells a straggler is the slowest rank's span on the device clock
(first block enter to last block event of the step's graph replays); a step without one in some
rank (a mode without events, eager launches only) is compared by when each rank began it on the
host instead, the latest being the slowest.

A job is the processes whose identity (set by the framework plugin) has the same model and world
size, one per rank. Steps are the union over its ranks: a rank without some step (not among its
last N, or already let go by the daemon) has none in that row rather than the row being dropped,
since a rank that lags is what this view is for.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import Protocol

DEVICE = "device"  # a row compared by device spans
HOST = "host"  # ... by host start times


class Identified(Protocol):
    """What the grouping reads of a process (gpuobs.v1 Process)."""

    pid: int
    alive: bool
    identity_set: bool
    rank: int
    world_size: int
    model: str


class StepOfRank(Protocol):
    """What the alignment reads of a step (gpuobs.v1 Step)."""

    pid: int
    step: int
    host_time_ns: int
    tokens: int
    device_span_ns: int


@dataclasses.dataclass(frozen=True)
class Job:
    model: str
    world_size: int
    pids: dict[int, int]  # rank -> pid, ranks in order


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """Processes not in any job, and why."""

    pids: list[int]
    reason: str


@dataclasses.dataclass(frozen=True)
class RankStep:
    rank: int
    pid: int
    host_time_ns: int
    host_offset_ns: int  # after the earliest rank's start of this step
    device_span_ns: int
    tokens: int


@dataclasses.dataclass(frozen=True)
class AlignedStep:
    step: int
    ranks: dict[int, RankStep]  # the job's ranks that have this step, in rank order
    basis: str  # DEVICE when every one of them has a device span, else HOST
    slowest: int  # the rank with the largest span (DEVICE) or the latest start (HOST)
    spread: float  # slowest over fastest span (DEVICE, two ranks or more), else 0


def group_jobs(processes: Iterable[Identified]) -> tuple[list[Job], list[LeftOut]]:
    """Jobs by (model, world size), in that order, and the processes left out. A rank held by
    several processes (a job restarted, or two jobs of one model) takes its live one; when that
    does not settle it, the job is left out rather than guessed (--pid picks the processes)."""
    by_job: dict[tuple[str, int], list[Identified]] = collections.defaultdict(list)
    without = []
    for process in processes:
        if process.identity_set:
            by_job[(process.model, process.world_size)].append(process)
        else:
            without.append(process.pid)
    jobs: list[Job] = []
    left_out = (
        [LeftOut(sorted(without), "no identity (no framework plugin set its rank and world size)")] if without else []
    )
    for (model, world_size), members in sorted(by_job.items()):
        by_rank: dict[int, list[Identified]] = collections.defaultdict(list)
        for process in members:
            by_rank[process.rank].append(process)
        pids: dict[int, int] = {}
        shared: list[int] = []
        for rank, held in sorted(by_rank.items()):
            live = [p for p in held if p.alive]
            if len(held) == 1 or len(live) == 1:
                chosen = held[0] if len(held) == 1 else live[0]
                pids[rank] = chosen.pid
                exited = sorted(p.pid for p in held if p is not chosen)
                if exited:
                    left_out.append(
                        LeftOut(
                            exited,
                            f"exited; live pid {chosen.pid} is rank {rank} of "
                            f"{model or '(no model)'}, world size {world_size}",
                        )
                    )
            else:
                shared.append(rank)
        if shared:
            left_out.append(
                LeftOut(
                    sorted(p.pid for p in members),
                    f"{model or '(no model)'}, world size {world_size}: rank(s) "
                    f"{', '.join(map(str, shared))} held by several processes "
                    f"(give the job's pids with --pid)",
                )
            )
            continue
        jobs.append(Job(model, world_size, pids))
    return jobs, left_out


def align_steps(job: Job, steps: Iterable[StepOfRank]) -> list[AlignedStep]:
    """The job's steps by step number (the union over its ranks), each with its ranks side by
    side, the slowest of them and the spread of their device spans."""
    rank_of = {pid: rank for rank, pid in job.pids.items()}
    by_number: dict[int, dict[int, StepOfRank]] = collections.defaultdict(dict)
    for step in steps:
        if step.pid in rank_of:
            by_number[step.step][rank_of[step.pid]] = step  # a number seen twice: the later step
    aligned = []
    for number, of_rank in sorted(by_number.items()):
        earliest = min(s.host_time_ns for s in of_rank.values())
        ranks = {
            rank: RankStep(rank, s.pid, s.host_time_ns, s.host_time_ns - earliest, s.device_span_ns, s.tokens)
            for rank, s in sorted(of_rank.items())
        }
        spans = [r.device_span_ns for r in ranks.values()]
        if all(spans):
            slowest = max(ranks.values(), key=lambda r: (r.device_span_ns, -r.rank)).rank
            spread = max(spans) / min(spans) if len(spans) > 1 else 0.0
            aligned.append(AlignedStep(number, ranks, DEVICE, slowest, spread))
        else:
            slowest = max(ranks.values(), key=lambda r: (r.host_time_ns, -r.rank)).rank
            aligned.append(AlignedStep(number, ranks, HOST, slowest, 0.0))
    return aligned


def ranks_with_steps(job: Job, aligned: list[AlignedStep]) -> list[int]:
    """The job's ranks that have any of these steps: the columns worth showing."""
    present = {rank for step in aligned for rank in step.ranks}
    return [rank for rank in job.pids if rank in present]
