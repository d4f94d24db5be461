"""Events per second through the whole daemon (discovery, drain loop, accounting, API) with 8
gpuobs-synth producers at full speed, beside bench/drain.py's raw reader figure measured in the
same run. On a 2-core machine the 8 producers and the daemon share the cores: the figure is what
the daemon delivers under that contention, and the dropped count says what it could not take.

Last line: `daemon drain: <X> Mevents/s delivered (<D> dropped), raw reader <R> Mevents/s, ratio <Z>`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from drain import measure_drain
from gpuobs_testing.daemon import DaemonProcess, free_port
from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.synth import synth_binary


def totals(daemon: DaemonProcess) -> tuple[int, int]:
    delivered = dropped = 0
    for process in daemon.status().processes:
        stage = next(s for s in process.stages if s.stage == "device")
        delivered += stage.delivered
        dropped += stage.dropped
    return delivered, dropped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=8)
    args = parser.parse_args()
    unwind_on_signals()
    with scratch_folder("drain") as tmp:
        segments = Path(tmp) / "segments"
        segments.mkdir()
        # the daemon first: full-speed producers on a small machine would starve its start-up
        daemon = DaemonProcess(Path(tmp) / "run", segments, free_port())
        producers: list[subprocess.Popen] = []
        try:
            producers = [
                subprocess.Popen(
                    [
                        synth_binary(),
                        "--segment-dir",
                        str(segments),
                        "--mode",
                        "blocks",
                        "--rate",
                        "0",
                        "--seed",
                        str(i),
                        "--kernels",
                        "16",
                        "--ring-records",
                        str(1 << 17),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for i in range(args.producers)
            ]
            daemon.wait_processes(args.producers, timeout=30)
            time.sleep(1.0)
            delivered0, dropped0 = totals(daemon)
            started = time.monotonic()
            time.sleep(args.seconds)
            delivered1, dropped1 = totals(daemon)
            elapsed = time.monotonic() - started
        finally:
            daemon.stop()
            for producer in producers:
                producer.terminate()
                producer.wait()
    rate = (delivered1 - delivered0) / elapsed / 1e6
    raw = measure_drain(3.0, 1 << 18, 1 << 14)["reader_events_per_s"] / 1e6
    print(
        f"window {elapsed:.1f} s, {args.producers} producers, delivered {delivered1 - delivered0}, "
        f"dropped {dropped1 - dropped0}"
    )
    print(
        f"daemon drain: {rate:.1f} Mevents/s delivered ({dropped1 - dropped0} dropped), raw reader {raw:.1f} "
        f"Mevents/s, ratio {rate / raw:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
