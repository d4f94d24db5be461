"""gpuobsctl request ID: one request's GPU time in each process that scheduled it: its steps,
tokens, device time, the launches and blocks of its steps, and per kernel its executions and
blocks (the KV-cache write's blocks: its tokens x layers)."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import pid
from .requests import show

NAME = "request"
HELP = "one request's GPU time (vLLM plugin): its steps, tokens, device time, launches and blocks"
EXAMPLES = """examples:
  gpuobsctl request cmpl-af327439bae1226f-0-91d5e375"""


def request_id(text: str) -> str:
    """A request id as vLLM names it: non-empty, one line, bounded (what a step record carries)."""
    if not text or len(text) > 1024 or "\n" in text or "\t" in text:
        raise argparse.ArgumentTypeError("a request id is 1..1024 characters, without a tab or newline")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", type=request_id, help="the request id (as `requests` and `steps` show it)")
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")


def run(args: argparse.Namespace) -> int:
    return show(args.address, args.output, pb.ListRequestsRequest(pids=args.pid, request=args.request))
