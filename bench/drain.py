"""Drain throughput of the native reader on one core, beside a plain memcpy of the same bytes.

gpuobs-synth (another process, the other core) fills an event ring at its maximum rate in
`blocks` mode; this process drains it with gpuobs.segment in batches, as the daemon does. The
reader lets the producer get ahead (20 ms), then drains the backlog while the producer keeps
writing; its rate is the records of the read calls that found a whole batch ready divided by the
time inside those calls (the work one core sustains; time spent waiting for the producer is the
producer's speed, reported beside it as the wall-clock rate). memcpy: numpy copies of the same
number of bytes between two ring-sized buffers, measured in the same run. The last line is the summary:

    drain: <X> Mevents/s, memcpy <Y> GB/s, ratio <Z>

Z = event bytes per second drained / memcpy bytes per second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gpuobs.segment import EVENT_DTYPE, Segment, segment_paths
from gpuobs_testing.synth import synth_binary


def measure_memcpy(total_bytes: int, buffer_bytes: int) -> float:
    """Bytes per second of numpy's copy between two buffers of the ring's size."""
    source = np.random.default_rng(0).integers(0, 255, size=buffer_bytes, dtype=np.uint8)
    target = np.empty_like(source)
    np.copyto(target, source)  # fault the pages in
    copied = 0
    start = time.perf_counter()
    while copied < total_bytes:
        np.copyto(target, source)
        copied += buffer_bytes
    return copied / (time.perf_counter() - start)


def measure_drain(seconds: float, ring_records: int, batch_records: int) -> dict:
    with tempfile.TemporaryDirectory(
        prefix="gpuobs-drain-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    ) as directory:
        producer = subprocess.Popen(
            [
                synth_binary(),
                "--segment-dir",
                directory,
                "--mode",
                "blocks",
                "--rate",
                "0",
                "--kernels",
                "16",
                "--ring-records",
                str(ring_records),
                "--duration",
                str(seconds + 5),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not segment_paths(directory):
                time.sleep(0.001)
            segment = Segment(segment_paths(directory)[0], batch_records=batch_records)
            out = np.empty(batch_records, dtype=EVENT_DTYPE)
            read = segment.reader.read_events
            clock = time.perf_counter
            delivered = full_batches = 0
            busy = 0.0
            wall_start = clock()
            while clock() - wall_start < seconds:
                # Let the producer get ahead, then drain the backlog: only calls that found a whole
                # batch ready are timed, so the figure is the reader's rate, not the producer's.
                time.sleep(0.02)
                while True:
                    started = clock()
                    count = read(0, out)
                    elapsed = clock() - started
                    delivered += count
                    if count < batch_records:
                        break
                    busy += elapsed
                    full_batches += 1
            wall = clock() - wall_start
            counters, _ = segment.counters()
        finally:
            producer.terminate()
            producer.wait()
    return {
        "delivered": delivered,
        "timed_events": full_batches * batch_records,
        "busy_s": busy,
        "wall_s": wall,
        "reader_events_per_s": full_batches * batch_records / busy if busy else 0.0,
        "wall_events_per_s": delivered / wall,
        "producer_events_per_s_snapshot": counters["device_events_produced"] / (seconds + 0.2),
        "dropped_by_full_ring": counters["device_events_dropped"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--ring-records", type=int, default=1 << 18)
    parser.add_argument("--batch-records", type=int, default=1 << 14)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    drain = measure_drain(args.seconds, args.ring_records, args.batch_records)
    memcpy_bytes_per_s = measure_memcpy(
        max(drain["delivered"], 1 << 26) * EVENT_DTYPE.itemsize, args.ring_records * EVENT_DTYPE.itemsize
    )
    x = drain["reader_events_per_s"] / 1e6
    y = memcpy_bytes_per_s / 1e9
    z = drain["reader_events_per_s"] * EVENT_DTYPE.itemsize / memcpy_bytes_per_s
    print(
        f"reader: {drain['timed_events']} events in {drain['busy_s']:.3f} s of full-batch read calls "
        f"({drain['wall_s']:.2f} s wall, {drain['wall_events_per_s'] / 1e6:.1f} Mevents/s wall-clock)"
    )
    print(
        f"producer: gpuobs-synth --mode blocks --rate 0, {drain['dropped_by_full_ring']} events dropped on a full ring"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({**drain, "memcpy_bytes_per_s": memcpy_bytes_per_s, "x": x, "y": y, "z": z}, indent=2) + "\n"
        )
    print(f"drain: {x:.1f} Mevents/s, memcpy {y:.2f} GB/s, ratio {z:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
