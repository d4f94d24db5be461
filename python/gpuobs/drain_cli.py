"""gpuobs-drain: drain every segment in a directory and print what went through.

The smallest whole path from producer to report, without the daemon: discovery, continuous
draining, native per-kernel aggregates and the per-stage accounting. Exits non-zero when any
stage fails its conservation check.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from gpuobs.segment import KERNEL_COUNTERS_DTYPE, MODE_NAMES, STATE_EXITED, Segment, SegmentError, segment_paths


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuobs-drain", description=__doc__.splitlines()[0])
    parser.add_argument("--segment-dir", default="/dev/shm", help="where producers create segments")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to drain (0: until producers exit)")
    parser.add_argument("--top", type=int, default=10, help="kernels to list, most events first")
    parser.add_argument("--remove", action="store_true", help="delete segments of exited producers once drained")
    return parser.parse_args(argv)


def report(segment: Segment, top: int) -> bool:
    counters, kernels = segment.counters() or ({}, np.zeros(0, dtype=KERNEL_COUNTERS_DTYPE))
    names = [k["demangled"] for k in segment.kernels()]
    delivered = segment.aggregates()[: len(names)].sum(axis=1)
    control = segment.control_state()
    print(
        f"pid {segment.pid} ({segment.header['producer']}): mode {MODE_NAMES.get(control['applied_mode'], '?')}"
        f" shift {control['applied_shift']}, {counters.get('launches', 0)} launches"
    )
    print(f"  {'launches':>9} {'blocks':>11} {'accesses':>12} {'events':>11} {'dropped':>9}  kernel")
    for slot in np.argsort(-(kernels["launches"].astype(np.int64)))[:top] if len(kernels) else []:
        k = kernels[slot]
        print(
            f"  {k['launches']:>9} {k['blocks_observed']:>11} {k['memory_accesses']:>12} {delivered[slot]:>11}"
            f" {k['events_dropped']:>9}  {names[slot][:90]}"
        )
    account = segment.accounting()
    for stage in account.stages:
        unpublished = f" (+ {stage.unpublished} read beyond the last published count)" if stage.unpublished else ""
        print(
            f"  stage {stage.stage}: produced {stage.produced}{unpublished} = delivered {stage.delivered} + dropped"
            f" {stage.dropped} + torn {stage.torn} + corrupt {stage.corrupt} + in flight {stage.in_flight}"
            f" -> {'balanced' if stage.balanced else 'NOT balanced'}"
        )
    for error in account.errors:
        print(f"  accounting error: {error}")
    return not account.errors and (not account.quiescent or all(s.balanced for s in account.stages))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    segments: dict[str, Segment] = {}
    rejected: set[str] = set()
    deadline = time.monotonic() + args.duration if args.duration > 0 else float("inf")
    while time.monotonic() < deadline:
        for path in segment_paths(args.segment_dir):
            if str(path) in segments or str(path) in rejected:
                continue
            try:
                segments[str(path)] = Segment(path)
            except SegmentError as error:
                rejected.add(str(path))
                print(f"gpuobs-drain: skipping {error}", file=sys.stderr)
        busy = False
        for segment in segments.values():
            events, launches = segment.drain_counts()
            busy = busy or events > 0 or launches > 0
        finished = segments and all(
            s.reader.state() == STATE_EXITED or not s.reader.producer_alive() for s in segments.values()
        )
        if args.duration == 0 and finished and not busy:
            break
        if not busy:
            time.sleep(0.005)
    ok = True
    for name, segment in segments.items():
        segment.drain_counts()
        ok = report(segment, args.top) and ok
        if args.remove and (segment.reader.state() == STATE_EXITED or not segment.reader.producer_alive()):
            os.unlink(name)
    if not segments:
        print(f"gpuobs-drain: no segments in {args.segment_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
