"""gpuobsctl tail [--pid PID] [--count N]: live events, one line each (JSON lines with --output json)."""

from __future__ import annotations

import argparse
import json

import grpc
import numpy as np
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, field_names

from ..arguments import pid, uint32
from ..connection import CommandError, stub
from ..entry import interrupted

NAME = "tail"
HELP = "print live events as they are drained"
EXAMPLES = """examples:
  gpuobsctl tail --count 20
  gpuobsctl --output json tail --pid 4242 | head"""
KIND_NAMES = {value: name for name, value in EVENT_KINDS.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--count", type=uint32, default=0, help="stop after this many events (0: until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    request = pb.StreamEventsRequest(pids=args.pid, max_events=max(0, args.count))
    printed = 0
    dropped = 0
    try:
        for batch in stub(args.address).StreamEvents(request):
            records = np.frombuffer(batch.records, dtype=EVENT_DTYPE, count=batch.count)
            for record in records:  # printing is per event by nature; the daemon never is
                row: dict[str, int | str] = {name: int(record[name]) for name in field_names(EVENT_DTYPE)}
                row["pid"] = batch.pid
                kind = int(record["kind"])
                row["kind"] = KIND_NAMES.get(kind, str(kind))
                if args.output == "json":
                    print(json.dumps(row))
                else:
                    print(
                        f"{row['pid']} {row['kind']:<13} slot {row['kernel_slot']:<4} block "
                        f"({row['block_x']},{row['block_y']},{row['block_z']}) sm {row['sm_id']:<3} "
                        f"t {row['globaltimer_ns']} pc 0x{row['pc']:x}"
                    )
                printed += 1
            dropped = batch.dropped_for_client
    except grpc.RpcError as error:
        raise CommandError(f"{error.code().name.lower()}: {error.details()}") from None
    except KeyboardInterrupt:
        stopped = True
    else:
        stopped = False
    if dropped:
        print(f"# {dropped} events skipped: this terminal read slower than events arrived")
    if stopped:  # the usual way to end a tail, still told apart from reaching --count
        return interrupted()
    return 0
