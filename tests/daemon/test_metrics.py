"""The Prometheus exposition: promtool accepts it, a golden file pins it, and a real Prometheus
server scrapes it and answers queries over it."""

from __future__ import annotations

import json
import urllib.parse
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port

GOLDEN = Path(__file__).parent / "golden" / "metrics.txt"


def scrape(daemon) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


def wait_gone(daemon, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes = daemon.status().processes
        if processes and not any(p.alive for p in processes):
            return
        time.sleep(0.05)
    raise AssertionError("producer not seen to finish")


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required in CI (.ci/run installs Debian's prometheus package)")
        pytest.skip(f"{tool} not installed")
    return path


@pytest.fixture
def finished_run(start_synth, start_daemon):
    """A deterministic producer (fixed seed and launch count, counter mode) that has exited."""
    start_synth("--mode", "counter", "--launches", "400", "--seed", "5", "--kernels", "10", "--label", "golden")
    daemon = start_daemon()
    wait_gone(daemon)
    return daemon


def test_exposition_passes_promtool(finished_run) -> None:
    promtool = require("promtool")
    text = scrape(finished_run)
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", checked.stdout + checked.stderr


def test_exposition_matches_the_golden_file(finished_run) -> None:
    text = re.sub(r'pid="\d+"', 'pid="PID"', scrape(finished_run))
    lines = [line for line in text.splitlines() if line.startswith("gpuobs_") or line.startswith("# HELP gpuobs")]
    normalized = "\n".join(lines) + "\n"
    if os.environ.get("GPUOBS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(normalized)
    assert normalized == GOLDEN.read_text()


def test_a_real_prometheus_scrapes_the_daemon(start_synth, start_daemon, tmp_path: Path) -> None:
    prometheus = require("prometheus")
    start_synth("--mode", "blocks", "--rate", "200000", "--kernels", "12")
    daemon = start_daemon()
    daemon.wait_processes(1)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gpuobsd
    static_configs:
      - targets: ["127.0.0.1:{daemon.metrics_port}"]
""")
    server = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        queries = {
            "gpuobs_processes": None,
            "sum by (kernel) (gpuobs_blocks_total)": None,
            "rate(gpuobs_events_total[5s])": None,
            "gpuobs_events_dropped_total": None,
            "gpuobs_mode": None,
            "gpuobs_accounting_errors_total": None,
        }
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(v is None for v in queries.values()):
            for query in [q for q, v in queries.items() if v is None]:
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        result = json.load(response)["data"]["result"]
                except OSError:
                    continue
                if result:
                    queries[query] = result
            time.sleep(0.5)
        missing = [q for q, v in queries.items() if v is None]
        assert not missing, missing
        assert float(queries["gpuobs_processes"][0]["value"][1]) == 1.0
        assert all(float(r["value"][1]) == 0.0 for r in queries["gpuobs_accounting_errors_total"]), daemon.log()
        assert len(queries["sum by (kernel) (gpuobs_blocks_total)"]) == 12
    finally:
        server.terminate()
        server.wait(timeout=20)
