"""A profiler started in an observed process (the vLLM plugin or gpuobs.profiler_notice tells the
injector) reaches the operator in the three places the notice promises: the status (the count,
and a line that says what it means), the JSON view, and a metric. gpuobs-synth notes them with
the injector's writer code."""

from __future__ import annotations

import json
import re
import urllib.request

from gpuobs_testing.daemon import gpuobsctl


def test_profiler_starts_reach_status_json_and_metrics(start_synth, start_daemon) -> None:
    # two ranks: processes that say nothing of themselves on one host would share one identity's series
    rank = ["--world-size", "2", "--model", "m", "--rank"]
    noted = start_synth("--mode", "counter", "--launches", "50", "--profiler-starts", "2", "--label", "p", *rank, "0")
    plain = start_synth("--mode", "counter", "--launches", "50", "--label", "plain", *rank, "1")
    daemon = start_daemon()
    assert noted.wait() == 0 and plain.wait() == 0
    daemon.wait_all_gone(10)
    starts = {p.pid: p.injector.profiler_starts for p in daemon.status().processes}
    assert starts == {noted.pid: 2, plain.pid: 0}

    text = gpuobsctl(daemon.address, "status")
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if "profiler start" in line]
    assert len(lines) == 1 and lines[0].startswith(f"pid {noted.pid}: 2 profiler start(s)"), text.stdout
    assert "no GPU activity" in lines[0] and "gpuobsctl trace" in lines[0]

    done = gpuobsctl(daemon.address, "status", "--output", "json")
    assert done.returncode == 0, done.stderr
    by_pid = {p["pid"]: p["injector"]["profiler_starts"] for p in json.loads(done.stdout)["processes"]}
    assert by_pid == {noted.pid: 2, plain.pid: 0}  # numbers, and 0 shown, not left out

    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    assert re.search(r'^gpuobs_profiler_starts_total\{[^}]*rank="0"[^}]*\} 2\.0$', exposition, re.M), exposition
    assert re.search(r'^gpuobs_profiler_starts_total\{[^}]*rank="1"[^}]*\} 0\.0$', exposition, re.M), exposition
