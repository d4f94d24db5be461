"""How long gpuobsd takes to answer while it drains producers at full speed: GetStatus latency
(p50, p99, max) beside the gRPC health check served by the same loop, which is the floor this
method can resolve on the machine (both pay the client's and the loop's scheduling under load).
Phase 2 repeats it while another thread keeps asking for every kernel of a 120,000-kernel process.

With --paced-rate, a last phase runs the producers at that rate (one the daemon keeps up with)
with and without the heavy queries: the producers' drops must not grow with the queries.

Last line: `api latency: status p99 <S> ms (health p99 <H> ms), with long queries <Q> ms; drops paced <A> /
with queries <B>`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.api.v1 import observer_pb2_grpc as pb_grpc
from gpuobs_testing.daemon import DaemonProcess, device_stage, free_port
from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.synth import synth_binary
from grpc_health.v1 import health_pb2, health_pb2_grpc


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000 if ordered else float("nan")


def summary(values: list[float]) -> dict:
    return {
        "calls": len(values),
        "p50_ms": round(percentile(values, 0.5), 1),
        "p99_ms": round(percentile(values, 0.99), 1),
        "max_ms": round(max(values) * 1000, 1) if values else None,
    }


def sample(stub, health, seconds: float) -> tuple[list[float], list[float]]:
    """Alternates status and health calls, 50 ms apart."""
    status, checks = [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        stub.GetStatus(pb.GetStatusRequest(), timeout=60)
        status.append(time.monotonic() - began)
        time.sleep(0.025)
        began = time.monotonic()
        health.Check(health_pb2.HealthCheckRequest(), timeout=60)
        checks.append(time.monotonic() - began)
        time.sleep(0.025)
    return status, checks


class HeavyQueries:
    """Every kernel of one process, page by page, walked again as soon as the last page arrived."""

    def __init__(self, stub, pid: int) -> None:
        self.stub, self.pid, self.done = stub, pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            token = ""
            while True:  # the largest pages the daemon gives: the costliest way to ask
                page = self.stub.ListKernels(
                    pb.ListKernelsRequest(pids=[self.pid], page_size=20000, page_token=token), timeout=300
                )
                token = page.next_page_token
                if not token:
                    break
            self.done += 1

    def __enter__(self) -> HeavyQueries:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=300)


def producers(segments: Path, count: int, rate: int, seconds: float) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [
                synth_binary(),
                "--segment-dir",
                str(segments),
                "--mode",
                "blocks",
                "--rate",
                str(rate),
                "--seed",
                str(i),
                "--kernels",
                "64",
                "--duration",
                str(seconds),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]


def drops(daemon: DaemonProcess, pids: set[int]) -> tuple[int, int]:
    produced = dropped = 0
    for process in daemon.status().processes:
        if process.pid in pids:
            stage = device_stage(process)
            produced += stage.produced
            dropped += stage.dropped
    return produced, dropped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--idle", type=float, default=30.0, help="idle time before the load starts")
    parser.add_argument("--paced-rate", type=int, default=100000, help="events/s per producer in phase 3; 0: skip")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict = {"producers": args.producers, "seconds_per_phase": args.seconds}
    unwind_on_signals()
    with scratch_folder("api") as tmp:
        segments = Path(tmp) / "segments"
        segments.mkdir(mode=0o700)
        daemon = DaemonProcess(Path(tmp) / "run", segments, free_port())
        channel = grpc.insecure_channel(daemon.address, options=[("grpc.max_receive_message_length", 1 << 30)])
        stub, health = pb_grpc.ObserverStub(channel), health_pb2_grpc.HealthStub(channel)
        running: list[subprocess.Popen] = []
        try:
            big = subprocess.run(
                [
                    synth_binary(),
                    "--segment-dir",
                    str(segments),
                    "--mode",
                    "counter",
                    "--kernels",
                    "120000",
                    "--launches",
                    "300",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            big_pid = json.loads(big.stdout.splitlines()[-1])["pid"]
            time.sleep(args.idle)  # a first call after an idle spell once took 20 s
            running = producers(segments, args.producers, 0, args.idle + 3 * args.seconds + 30)
            daemon.wait_processes(args.producers, timeout=60)
            status, checks = sample(stub, health, args.seconds)
            result["full_speed"] = {"status": summary(status), "health": summary(checks)}
            with HeavyQueries(stub, big_pid) as heavy:
                status, checks = sample(stub, health, args.seconds)
            result["full_speed_with_long_queries"] = {
                "status": summary(status),
                "health": summary(checks),
                "long_queries_answered": heavy.done,
            }
            for process in running:
                process.kill()
                process.wait()
            if args.paced_rate:
                for label, with_queries in (("paced", False), ("paced_with_long_queries", True)):
                    running = producers(segments, args.producers, args.paced_rate, args.seconds)
                    pids = {p.pid for p in running}
                    if with_queries:
                        with HeavyQueries(stub, big_pid) as heavy:
                            for process in running:
                                process.wait()
                        answered = heavy.done
                    else:
                        for process in running:
                            process.wait()
                        answered = 0
                    time.sleep(2.0)  # final drains
                    produced, dropped = drops(daemon, pids)
                    result[label] = {
                        "rate_per_producer": args.paced_rate,
                        "produced": produced,
                        "dropped": dropped,
                        "long_queries_answered": answered,
                    }
        finally:
            for process in running:
                if process.poll() is None:
                    process.kill()
            daemon.stop()
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    quiet = result["full_speed"]
    loaded = result["full_speed_with_long_queries"]
    paced = result.get("paced", {}).get("dropped", "-")
    paced_q = result.get("paced_with_long_queries", {}).get("dropped", "-")
    print(
        f"api latency: status p99 {quiet['status']['p99_ms']} ms (health p99 {quiet['health']['p99_ms']} ms), "
        f"with long queries {loaded['status']['p99_ms']} ms; drops paced {paced} / with queries {paced_q}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
