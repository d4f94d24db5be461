"""gpuobsctl set-mode MODE [--shift N] [--pid PID ...] [--rank R ...] [--gpu GPU ...] [--kernel REGEX]"""

from __future__ import annotations

import argparse

from gpuobs import _native
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import MODES

from ..arguments import acknowledgement_timeout, pid, sample_shift, uint32
from ..connection import CommandError, call
from ..output import emit, table

NAME = "set-mode"
HELP = "switch mode, sample shift and kernel filter of running processes"
EXAMPLES = """examples:
  gpuobsctl set-mode sampled --shift 10            # every observed process
  gpuobsctl set-mode blocks --rank 0 --kernel 'flash|gemm'
  gpuobsctl set-mode counter --pid 4242 --timeout 5s"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=list(MODES), help="the mode to put in force")
    parser.add_argument(
        "--shift", type=sample_shift, help=f"sampled: keep 1 in 2^SHIFT events (0..{_native.MAX_SHIFT})"
    )
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument(
        "--rank",
        type=uint32,
        action="append",
        default=[],
        help="also the processes of this rank, as their plugin set it (repeatable)",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        help="also the processes with a context on this GPU: its UUID or PCI bus id (repeatable)",
    )
    parser.add_argument("--kernel", help="record events only for kernels matching this regex ('' for all)")
    parser.add_argument(
        "--timeout",
        type=acknowledgement_timeout,
        default=2.0,
        help="how long to wait for acknowledgements (500ms, 2s; a bare number is seconds)",
    )


def run(args: argparse.Namespace) -> int:
    request = pb.SetModeRequest(
        mode=args.mode, pids=args.pid, ranks=args.rank, gpus=args.gpu, timeout_ms=int(args.timeout * 1000)
    )
    if args.shift is not None:
        request.shift = args.shift
    if args.kernel is not None:
        request.kernel_regex = args.kernel
    return acknowledgements(call(args.address, "SetMode", request, timeout=args.timeout + 5), args.output, "switch")


def acknowledgements(response: pb.SetModeResponse, output: str, verb: str) -> int:
    """Each process's answer to a control request; fails unless every one applied it."""
    rows = [
        {
            "pid": r.pid,
            "acknowledged": r.acknowledged,
            "status": r.status,
            "generation": r.generation,
            "message": r.message,
        }
        for r in response.results
    ]
    if output == "json":
        emit("json", {"results": rows})
    else:
        table([("pid", "PID"), ("status", "STATUS"), ("generation", "GEN"), ("message", "MESSAGE")], rows)
    if not rows:
        raise CommandError(f"no process to {verb}")
    failed = [r for r in rows if not r["acknowledged"] or r["status"] != "ok"]
    if failed:
        raise CommandError(f"{len(failed)} of {len(rows)} process(es) did not {verb}: {failed[0]['message']}")
    return 0
