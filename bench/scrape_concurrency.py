"""Concurrent Prometheus scrapes against one gpuobsd, in one run: the p50 of a lone scraper's
scrapes, then the p99 of 20 scrapers at once. A fleet may point several Prometheus servers (HA
pairs, federation, ad-hoc curls) at one daemon; each scrape used to collect on its own, so 20 at
once queued 20 collections. Target: p99 of 20 concurrent scrapers <= 3 x a lone scrape's p50.

    python bench/scrape_concurrency.py [--processes 4] [--kernels 64] [--scrapers 20] [--out FILE]

Last line: `scrapes: lone p50 <A> ms, 20 concurrent p99 <B> ms, ratio <B/A> (target <= 3)`
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from gpuobs.daemon.metrics_server import REUSE_S
from gpuobs_testing.daemon import DaemonProcess, free_port
from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.synth import synth_binary


def scrape_seconds(port: int) -> float:
    began = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as response:
        response.read()
    return time.monotonic() - began


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--kernels", type=int, default=64)
    parser.add_argument("--scrapers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10, help="scrapes per concurrent scraper")
    parser.add_argument("--lone", type=int, default=30, help="lone scrapes")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    unwind_on_signals()
    with scratch_folder("scrape") as tmp:
        segments = tmp / "segments"
        segments.mkdir()
        producers = [
            subprocess.Popen(
                [
                    synth_binary(),
                    "--segment-dir",
                    str(segments),
                    "--mode",
                    "blocks",
                    "--kernels",
                    str(args.kernels),
                    "--rate",
                    "200000",
                    "--seed",
                    str(seed),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for seed in range(args.processes)
        ]
        port = free_port()
        daemon = DaemonProcess(tmp / "run", segments, port)
        try:
            daemon.wait_processes(args.processes)
            time.sleep(2)  # every kernel launched, labels assigned
            for _ in range(3):
                scrape_seconds(port)  # warm
            lone = []  # spaced past the daemon's reuse window: each makes its own collection
            for _ in range(args.lone):
                lone.append(scrape_seconds(port))
                time.sleep(REUSE_S + 0.1)
            together: list[float] = []
            lock = threading.Lock()

            def scraper() -> None:
                for _ in range(args.rounds):
                    took = scrape_seconds(port)
                    with lock:
                        together.append(took)

            threads = [threading.Thread(target=scraper) for _ in range(args.scrapers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            daemon.stop()
            for producer in producers:
                producer.terminate()
                producer.wait(timeout=20)
    lone_p50, together_p99 = percentile(lone, 0.5), percentile(together, 0.99)
    report = {
        "date": datetime.date.today().isoformat(),
        "processes": args.processes,
        "kernels_per_process": args.kernels,
        "scrapers": args.scrapers,
        "lone_scrapes": len(lone),
        "concurrent_scrapes": len(together),
        "lone_p50_ms": round(lone_p50, 1),
        "lone_p99_ms": round(percentile(lone, 0.99), 1),
        "concurrent_p50_ms": round(percentile(together, 0.5), 1),
        "concurrent_p99_ms": round(together_p99, 1),
        "ratio_concurrent_p99_to_lone_p50": round(together_p99 / lone_p50, 2),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    print(
        f"scrapes: lone p50 {lone_p50:.1f} ms, {args.scrapers} concurrent p99 {together_p99:.1f} ms, "
        f"ratio {together_p99 / lone_p50:.2f} (target <= 3)"
    )


if __name__ == "__main__":
    main()
