"""set-mode -> every producer acknowledged: p50 and p99 over 200 switches with 8 gpuobs-synth
producers under a real gpuobsd, timed at the client (gRPC SetMode round trip).

    python bench/control_latency.py [--switches 200] [--producers 8]

The last line is `control latency: p50 <X> ms, p99 <Y> ms over N switches, P producers`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import DaemonProcess, free_port
from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.synth import synth_binary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=200)
    parser.add_argument("--producers", type=int, default=8)
    args = parser.parse_args()
    unwind_on_signals()
    with scratch_folder("control") as tmp:
        segments = Path(tmp) / "segments"
        segments.mkdir()
        producers = [
            subprocess.Popen(
                [
                    synth_binary(),
                    "--segment-dir",
                    str(segments),
                    "--mode",
                    "counter",
                    "--rate",
                    "200000",
                    "--seed",
                    str(i),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(args.producers)
        ]
        daemon = DaemonProcess(Path(tmp) / "run", segments, free_port())
        try:
            daemon.wait_processes(args.producers, timeout=30)
            latencies = []
            modes = ["blocks", "counter"]
            for index in range(args.switches):
                started = time.perf_counter()
                response = daemon.stub.SetMode(pb.SetModeRequest(mode=modes[index % 2], timeout_ms=5000), timeout=10)
                latencies.append((time.perf_counter() - started) * 1000)
                assert len(response.results) == args.producers
                assert all(r.acknowledged and r.status == "ok" for r in response.results), response
        finally:
            daemon.stop()
            for producer in producers:
                producer.terminate()
                producer.wait()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"max {latencies[-1]:.2f} ms, mean {statistics.mean(latencies):.2f} ms")
    print(
        f"control latency: p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(latencies)} switches, "
        f"{args.producers} producers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
