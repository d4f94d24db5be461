"""gpuobsd's own footprint on a serving host, in one run: it shares the host's CPUs with vLLM, whose
single-stream decode is host-bound, so every core-percent it burns is the service's.

  idle       CPU of a daemon beside N producers in `counter` (the default deployment: no events),
             N = 1, 8, 32: share of a core in all and per process, and its growth exponent
  trickle    CPU seconds per million events at 20,000 block events/s from each of 8 producers
  delivery   events/s the whole daemon delivers from 8 full-speed producers against what the bare
             reader (gpuobs-drain, no analyses) reads from such producers: their ratio (medians
             of 3 interleaved rounds, each round's figures beside them)
  drops      the share of events dropped at full speed with the default analysis share and with 0
  queries    a scrape and `kernels --top 50` with 4 processes of 100 / 1,000 / 10,000 kernels:
             wall time, and its growth exponent in kernels per process
  control    set-mode to 32 processes, 4 of them at full speed: p50 and p99

Each figure is measured on this machine as it is: the lines say what it resolves (repeats, the
spread). Targets (issue 30): idle <= 2% of a core at 32 processes (<= 0.1% per process); <= 0.2
CPU-seconds per million events at 20,000 events/s per process; delivered >= 0.5 x the bare reader
at 8 producers; the same drop share with and without analyses; query cost independent of kernels
per process; control p99 <= 50 ms.

    python bench/daemon_footprint.py --out bench/results/daemon-footprint-DATE.json [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import DaemonProcess, device_stage, free_port
from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.synth import synth_binary

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process used over `seconds` from now."""
    before, began = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - began)


def exponent(xs: list[float], ys: list[float]) -> float:
    """The growth exponent of y in x (least squares on logs)."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


class Producers:
    """gpuobs-synth processes in one folder, stopped at the end whatever happens."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen] = []

    def start(self, count: int, *args: str) -> None:
        for index in range(count):
            self.processes.append(
                subprocess.Popen(
                    [synth_binary(), "--segment-dir", str(self.folder), "--seed", str(index + 1), *args],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes = []


def with_daemon(tmp: Path, name: str, producers: int, producer_args: list[str], measure, *daemon_args: str):
    """Runs `measure(daemon, segments)` beside `producers` producers in a fresh folder."""
    segments = tmp / f"{name}-segments"
    segments.mkdir()
    fleet = Producers(segments)
    # the daemon's own discovery interval (the tests' helper asks for 50 ms)
    daemon = DaemonProcess(tmp / f"{name}-run", segments, free_port(), "--discovery-interval-ms", "200", *daemon_args)
    try:
        fleet.start(producers, *producer_args)
        deadline = time.monotonic() + 60  # seen, alive or already done (the queries' producers end)
        while len(daemon.status().processes) < producers:
            assert time.monotonic() < deadline, "the producers were not seen"
            time.sleep(0.05)
        return measure(daemon, segments)
    finally:
        fleet.stop()
        daemon.stop()


def idle(tmp: Path, counts: list[int], seconds: float) -> dict:
    rows = []
    for count in counts:

        def measure(daemon: DaemonProcess, _segments: Path) -> float:
            time.sleep(2)  # discovered, counters read once
            return cpu_share(daemon.process.pid, seconds)

        share = with_daemon(
            tmp, f"idle{count}", count, ["--mode", "counter", "--kernels", "16", "--rate", "2000"], measure
        )
        rows.append({"processes": count, "core_share": round(share, 4), "per_process": round(share / count, 5)})
    return {
        "rows": rows,
        "growth_exponent": round(exponent([r["processes"] for r in rows], [r["core_share"] for r in rows]), 2),
    }


def trickle(tmp: Path, producers: int, rate: int, seconds: float) -> dict:
    def measure(daemon: DaemonProcess, _segments: Path) -> dict:
        time.sleep(1)
        events_before = sum(device_stage(p).delivered for p in daemon.status().processes)
        cpu_before, began = cpu_seconds(daemon.process.pid), time.monotonic()
        time.sleep(seconds)
        cpu = cpu_seconds(daemon.process.pid) - cpu_before
        events = sum(device_stage(p).delivered for p in daemon.status().processes) - events_before
        return {
            "events_per_s": round(events / (time.monotonic() - began)),
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_million_events": round(cpu / max(events, 1) * 1e6, 3),
        }

    # blocks mode: an enter and an exit per block, so --rate (units: block entries+exits) is events/s
    return with_daemon(tmp, "trickle", producers, ["--mode", "blocks", "--kernels", "16", "--rate", str(rate)], measure)


def full_speed(tmp: Path, producers: int, seconds: float, tag: str, *daemon_args: str) -> dict:
    def measure(daemon: DaemonProcess, _segments: Path) -> dict:
        time.sleep(1)
        before = [device_stage(p) for p in daemon.status().processes]
        began = time.monotonic()
        time.sleep(seconds)
        after = [device_stage(p) for p in daemon.status().processes]
        elapsed = time.monotonic() - began
        delivered = sum(a.delivered for a in after) - sum(b.delivered for b in before)
        dropped = sum(a.dropped for a in after) - sum(b.dropped for b in before)
        return {
            "delivered_per_s": round(delivered / elapsed),
            "drop_share": round(dropped / max(1, delivered + dropped), 4),
        }

    return with_daemon(
        tmp,
        f"full{len(daemon_args)}{tag}",
        producers,
        ["--mode", "blocks", "--kernels", "16", "--rate", "0", "--ring-records", str(1 << 18)],
        measure,
        *daemon_args,
    )


def bare_reader(tmp: Path, producers: int, seconds: float, tag: str) -> dict:
    """The same producers read by gpuobs-drain (native reads and the per-kernel aggregates, no
    analyses, no API), started together; its report's device stages summed."""
    segments = tmp / f"bare-segments{tag}"
    segments.mkdir()
    fleet = Producers(segments)
    try:
        drain = subprocess.Popen(
            [sys.executable, "-m", "gpuobs.drain_cli", "--segment-dir", str(segments), "--duration", str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        fleet.start(producers, "--mode", "blocks", "--kernels", "16", "--rate", "0", "--ring-records", str(1 << 18))
        out, _ = drain.communicate(timeout=seconds + 120)
    finally:
        fleet.stop()
    stages = [(int(p), int(d)) for p, d in re.findall(r"stage device: produced (\d+).*? delivered (\d+)", out)]
    delivered, produced = sum(d for _, d in stages), sum(p for p, _ in stages)
    return {
        "delivered_per_s": round(delivered / seconds),
        "drop_share": round(1 - delivered / max(1, produced), 4),
        "processes_reported": len(stages),
    }


def delivery(tmp: Path, producers: int, window: float, rounds: int) -> dict:
    """The daemon with analyses, without, and the bare reader, each with fresh producers,
    interleaved over rounds (the host drifts; producers and reader share its CPUs): the median
    of each and every round's figure, so a reader sees the spread."""
    runs: dict[str, list[dict]] = {"delivery_daemon": [], "delivery_no_analyses": [], "delivery_bare_reader": []}
    for round_ in range(rounds):
        runs["delivery_daemon"].append(full_speed(tmp, producers, window, f"r{round_}"))
        runs["delivery_no_analyses"].append(full_speed(tmp, producers, window, f"r{round_}", "--analysis-share", "0"))
        runs["delivery_bare_reader"].append(bare_reader(tmp, producers, window, f"r{round_}"))
    out = {}
    for name, rows in runs.items():
        out[name] = {
            "delivered_per_s": round(statistics.median(r["delivered_per_s"] for r in rows)),
            "drop_share": round(statistics.median(r["drop_share"] for r in rows), 4),
            "rounds": rows,
        }
    return out


def queries(tmp: Path, kernel_counts: list[int]) -> dict:
    rows = []
    for kernels in kernel_counts:

        def measure(daemon: DaemonProcess, _segments: Path) -> dict:
            time.sleep(2)
            timings = {"scrape": [], "top50": []}
            for _ in range(5):
                began = time.monotonic()
                with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=120) as reply:
                    reply.read()
                timings["scrape"].append(time.monotonic() - began)
                time.sleep(1.1)  # past the collection's reuse
                began = time.monotonic()
                daemon.stub.ListKernels(pb.ListKernelsRequest(top=50), timeout=120)
                timings["top50"].append(time.monotonic() - began)
            return {name: round(statistics.median(values) * 1000, 1) for name, values in timings.items()}

        timed = with_daemon(
            tmp,
            f"queries{kernels}",
            4,
            ["--mode", "counter", "--kernels", str(kernels), "--launches", str(kernels * 3), "--rate", "0"],
            measure,
        )
        rows.append({"kernels_per_process": kernels, "scrape_ms": timed["scrape"], "top50_ms": timed["top50"]})
    ks = [r["kernels_per_process"] for r in rows]
    return {
        "rows": rows,
        "scrape_exponent": round(exponent(ks, [r["scrape_ms"] for r in rows]), 2),
        "top50_exponent": round(exponent(ks, [r["top50_ms"] for r in rows]), 2),
    }


def control(tmp: Path, quiet: int, hot: int, rounds: int) -> dict:
    segments = tmp / "control-segments"
    segments.mkdir()
    fleet = Producers(segments)
    daemon = DaemonProcess(tmp / "control-run", segments, free_port())
    try:
        fleet.start(quiet, "--mode", "counter", "--kernels", "8", "--rate", "2000")
        fleet.start(hot, "--mode", "blocks", "--kernels", "8", "--rate", "0", "--ring-records", str(1 << 18))
        daemon.wait_processes(quiet + hot, timeout=60)
        time.sleep(1)
        took = []
        for index in range(rounds):
            began = time.monotonic()
            reply = daemon.stub.SetMode(
                pb.SetModeRequest(mode=["counter", "noop"][index % 2], timeout_ms=10000), timeout=30
            )
            took.append(time.monotonic() - began)
            assert all(r.status == "ok" for r in reply.results), reply
    finally:
        fleet.stop()
        daemon.stop()
    took.sort()
    return {
        "processes": quiet + hot,
        "hot": hot,
        "rounds": rounds,
        "p50_ms": round(took[len(took) // 2] * 1000, 1),
        "p99_ms": round(took[min(len(took) - 1, int(len(took) * 0.99))] * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer sizes (a smoke run)")
    args = parser.parse_args()
    unwind_on_signals()
    window = 3.0 if args.quick else 8.0
    report: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip(),
        "load_average_at_start": os.getloadavg()[0],
    }
    with scratch_folder("footprint") as tmp:
        report["idle"] = idle(tmp, [1, 8] if args.quick else [1, 8, 32], window)
        report["trickle"] = trickle(tmp, 8, 20000, window)
        report.update(delivery(tmp, 8, window, 1 if args.quick else 3))
        report["queries"] = queries(tmp, [100, 1000] if args.quick else [100, 1000, 10000])
        report["control"] = control(tmp, 28 if not args.quick else 8, 4, 20 if args.quick else 60)
    bare = report["delivery_bare_reader"]["delivered_per_s"]
    report["delivery_ratio_to_bare_reader"] = round(report["delivery_daemon"]["delivered_per_s"] / max(1, bare), 3)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    idle32 = report["idle"]["rows"][-1]
    print(
        f"footprint: idle {idle32['core_share'] * 100:.2f}% of a core at {idle32['processes']} processes; "
        f"{report['trickle']['cpu_seconds_per_million_events']} CPU-s per million events at 20k/s x 8; delivery "
        f"{report['delivery_ratio_to_bare_reader']} x the bare reader; drops {report['delivery_daemon']['drop_share']} "
        f"with analyses, {report['delivery_no_analyses']['drop_share']} without; top-50 exponent "
        f"{report['queries']['top50_exponent']}, scrape exponent {report['queries']['scrape_exponent']}; control p99 "
        f"{report['control']['p99_ms']} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
