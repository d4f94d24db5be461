"""The daemon's soak for a long while (the CI test runs the same for minutes): producers that
come and go (some crash), hostile files in the segment directory, fuzzed requests to every
method, scrapes and streams at once. Prints and writes what it saw: lifetimes, requests,
scrapes, peak RSS and its trend, series, descriptors, accounting errors.

    python bench/soak.py --minutes 30 --out bench/results/soak-DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from gpuobs_testing.scratch import scratch_folder, unwind_on_signals
from gpuobs_testing.soak import Soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    unwind_on_signals()
    # the code that runs: read now, not when the report is written (a commit during a 30-minute soak)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    with scratch_folder("soak", shm=False) as tmp:
        segments = Path(tmp) / "segments"
        segments.mkdir(mode=0o700)
        figures = Soak(segments, Path(tmp) / "run", seconds=args.minutes * 60, lifetimes=1 << 62).run()
    rss = figures.pop("rss_mib")
    quarter = max(1, len(rss) // 4)
    figures["rss_mib_summary"] = {
        "samples": len(rss),
        "first_quarter_max": max(rss[:quarter]),
        "last_quarter_max": max(rss[-quarter:]),
        "peak": max(rss),
        "last": rss[-1],
    }
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "command": " ".join(sys.argv),
        "figures": figures,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    ok = (
        figures["daemon_alive"]
        and not figures["crashes_in_log"]
        and figures["accounting_errors"] == 0
        and not figures["unbalanced_retained"]
        and not figures["fuzz_failures"]
        and not figures["stream_failures"]
        and figures["victim_untouched"]
        and not figures["recording_failures"]
        and figures["spool_left"] == 0
    )
    print(
        f"soak: {figures['lifetimes']} lifetimes, {figures['fuzzed_requests']} fuzzed requests, "
        f"{figures['scrapes']} scrapes, RSS peak {max(rss):.0f} MiB (first quarter {max(rss[:quarter]):.0f}, "
        f"last {max(rss[-quarter:]):.0f}), series max {figures['series_max']}, accounting errors "
        f"{figures['accounting_errors']}: {'ok' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
