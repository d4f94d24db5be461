"""gpuobsctl steps: a serving engine's steps (vLLM plugin), their requests, replays and blocks; with
--ranks, the ranks of each tensor-parallel job side by side, step by step."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid, uint32, uint64
from ..connection import CommandError, all_pages, call
from ..output import emit, message_dict, micros, table
from ..rank_steps import DEVICE, AlignedStep, Job, LeftOut, align_steps, group_jobs, ranks_with_steps

NAME = "steps"
HELP = "engine steps (vLLM plugin): requests and tokens, the graph replays and blocks of each step"
EXAMPLES = """examples:
  gpuobsctl steps --last 20
  gpuobsctl steps --replay 9717          # the step that launched this replay
  gpuobsctl steps --ranks                # tensor-parallel ranks side by side"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--last", type=uint32, default=20, help="the last N steps of each process")
    one_or_all = parser.add_mutually_exclusive_group()  # a replay number is one process's, --ranks spans several
    one_or_all.add_argument(
        "--replay",
        type=uint64,
        default=None,
        help="only the step that launched this replay number (as `graphs` and events show it)",
    )
    one_or_all.add_argument(
        "--ranks",
        action="store_true",
        help="the ranks of each job (model, world size) side by side by step number: each "
        "rank's device span, the slowest rank and the spread",
    )


def tera(per_second: float) -> str:
    return f"{per_second / 1e12:.3f}"


def short_ids(ids: list[str], complete: bool) -> str:
    text = ",".join(ids[:3]) + (f",+{len(ids) - 3}" if len(ids) > 3 else "")
    return (text or "-") + ("" if complete else " (incomplete)")


def run(args: argparse.Namespace) -> int:
    if args.ranks:
        return run_ranks(args)
    request = pb.ListStepsRequest(pids=args.pid, last=args.last)
    if args.replay is not None:
        request.replay = args.replay
    response = all_pages(args.address, "ListSteps", request, "steps")
    if args.output == "json":
        emit("json", message_dict(response))
        return 0
    for total in response.totals:
        print(
            f"pid {total.pid}: {total.steps} steps recorded, {total.launches_before_steps} recorded kernel "
            f"launches before the first step"
        )
    rows = []
    for step in response.steps:
        replays = " ".join(
            f"{r.replay}({r.nodes_matched}/{r.node_executions} matched, {r.blocks_observed} blocks)"
            if r.node_executions
            else str(r.replay)
            for r in step.replays
        )
        rows.append(
            {
                "pid": step.pid,
                "step": step.step,
                "requests": step.requests,
                "tokens": step.tokens,
                "launches": step.kernel_launches,
                "blocks": step.blocks_expected,
                "span": micros(step.device_span_ns) if step.device_span_ns else "-",
                "busy": micros(step.device_busy_ns) if step.HasField("device_busy_ns") else "-",
                "host": micros(step.host_step_ns) if step.HasField("host_step_ns") else "-",
                "ratio": f"{step.busy_ratio:.2f}" if step.HasField("busy_ratio") else "-",
                "device_tflops": tera(step.device_flops_per_s) if step.HasField("device_flops_per_s") else "-",
                "host_tflops": tera(step.host_flops_per_s) if step.HasField("host_flops_per_s") else "-",
                "replays": replays or "-",
                "ids": short_ids(list(step.request_ids), step.request_ids_complete),
            }
        )
    if rows:
        # the FLOP rates where the engine estimates its steps' FLOPs (vLLM --enable-mfu-metrics)
        estimated = any(step.HasField("flops") for step in response.steps)
        flop_columns = [("device_tflops", "DEVICE TFLOP/s"), ("host_tflops", "HOST TFLOP/s")] if estimated else []
        table(
            [
                ("pid", "PID"),
                ("step", "STEP"),
                ("requests", "REQS"),
                ("tokens", "TOKENS"),
                ("launches", "LAUNCHES"),
                ("blocks", "BLOCKS"),
                ("span", "DEVICE us"),
                ("busy", "BUSY us"),
                ("host", "HOST us"),
                ("ratio", "DEVICE/HOST"),
                *flop_columns,
                ("replays", "REPLAYS"),
                ("ids", "REQUEST IDS"),
            ],
            rows,
        )
    elif not response.totals:
        print("no observed process")
    else:
        print("no engine steps recorded (is the gpuobs vLLM plugin installed beside vLLM?)")
    return 0


def rank_cell(step: AlignedStep, rank: int) -> str:
    """A rank's device span in microseconds; +offset of its host start when the row is compared
    on the host; - when the rank has no such step."""
    found = step.ranks.get(rank)
    if found is None:
        return "-"
    if step.basis == DEVICE:
        return micros(found.device_span_ns)
    return "+" + micros(found.host_offset_ns)


def job_dict(job: Job, aligned: list[AlignedStep]) -> dict:
    return {
        "model": job.model,
        "world_size": job.world_size,
        "ranks": [{"rank": rank, "pid": pid} for rank, pid in job.pids.items()],
        "steps": [
            {
                "step": s.step,
                "basis": s.basis,
                "slowest_rank": s.slowest,
                "spread": s.spread,
                "missing_ranks": [rank for rank in job.pids if rank not in s.ranks],
                "ranks": [
                    {
                        "rank": r.rank,
                        "pid": r.pid,
                        "host_time_ns": r.host_time_ns,
                        "host_offset_ns": r.host_offset_ns,
                        "device_span_ns": r.device_span_ns,
                        "tokens": r.tokens,
                    }
                    for r in s.ranks.values()
                ],
            }
            for s in aligned
        ],
    }


def print_job(job: Job, aligned: list[AlignedStep]) -> None:
    ranks = ranks_with_steps(job, aligned)
    print(
        f"{job.model or '(no model)'}, world size {job.world_size}: "
        + ", ".join(f"rank {rank} pid {pid}" for rank, pid in job.pids.items())
    )
    silent = [rank for rank in job.pids if rank not in ranks]
    if silent:
        print(f"  no steps recorded by rank(s) {', '.join(map(str, silent))}")
    if not aligned:
        return
    rows = [
        {
            "step": s.step,
            "tokens": s.ranks[0].tokens if 0 in s.ranks else "-",
            **{f"r{rank}": rank_cell(s, rank) for rank in ranks},
            "slowest": f"r{s.slowest}",
            "spread": f"{s.spread:.2f}x" if s.spread else "-",
        }
        for s in aligned
    ]
    table(
        [
            ("step", "STEP"),
            ("tokens", "TOKENS"),
            *[(f"r{rank}", f"r{rank}") for rank in ranks],
            ("slowest", "SLOWEST"),
            ("spread", "SPREAD"),
        ],
        rows,
    )


def left_out_line(left: LeftOut) -> str:
    return f"left out: pid(s) {', '.join(map(str, left.pids))}: {left.reason}"


def run_ranks(args: argparse.Namespace) -> int:
    """Steps of every job's ranks side by side: identity from the status, steps from ListSteps."""
    processes = call(args.address, "GetStatus", pb.GetStatusRequest()).processes
    if args.pid:
        unknown = sorted(set(args.pid) - {p.pid for p in processes})
        if unknown:
            raise CommandError(f"no observed process with pid {unknown[0]}")
        processes = [p for p in processes if p.pid in set(args.pid)]
    jobs, left_out = group_jobs(processes)
    pids = sorted(pid for job in jobs for pid in job.pids.values())
    steps = (
        list(all_pages(args.address, "ListSteps", pb.ListStepsRequest(pids=pids, last=args.last), "steps").steps)
        if pids
        else []
    )
    aligned = [(job, align_steps(job, steps)) for job in jobs]
    if args.output == "json":
        emit(
            "json",
            {
                "jobs": [job_dict(job, rows) for job, rows in aligned],
                "left_out": [{"pids": left.pids, "reason": left.reason} for left in left_out],
            },
        )
        return 0
    for left in left_out:
        print(left_out_line(left))
    if not jobs:
        print(
            "no job to show: no observed process says which rank it is (the framework plugin sets it; "
            "`gpuobsctl status` shows RANK)"
        )
        return 0
    print(
        "rN: the step's device span on rank N, us (its replays' first block enter to last block event); "
        "+us: a rank had no span, so when each began (host), after the first; -: no such step"
    )
    for job, rows in aligned:
        print_job(job, rows)
    return 0
