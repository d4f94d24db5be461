"""A real Prometheus server (Debian's package) scraping a daemon on loopback, for tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from gpuobs_testing.daemon import free_port


def require(tool: str) -> str:
    """The tool's path; a test without it is skipped, or fails in CI (which installs it)."""
    import pytest

    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required in CI (.ci/run installs Debian's prometheus package)")
        pytest.skip(f"{tool} not installed")
    return path


class PrometheusServer:
    def __init__(self, target_port: int, workdir: Path, others: dict[str, int] | None = None) -> None:
        """Scrapes gpuobsd on target_port, and each of `others` (job name: port), all on loopback."""
        self.port = free_port()
        config = workdir / "prometheus.yml"
        jobs = {"gpuobsd": target_port, **(others or {})}
        config.write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n"
            + "".join(
                f'  - job_name: {job}\n    static_configs:\n      - targets: ["127.0.0.1:{port}"]\n'
                for job, port in jobs.items()
            )
        )
        self.process = subprocess.Popen(
            [
                require("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def query(self, expr: str) -> list | None:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.load(response)["data"]["result"]
        except OSError:
            return None

    def wait_all(self, exprs: list[str], timeout: float = 60.0) -> dict[str, list]:
        """Results of every query, once each returns data; the missing ones fail the test."""
        results: dict[str, list] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(results) < len(exprs):
            for expr in exprs:
                if expr not in results:
                    answer = self.query(expr)
                    if answer:
                        results[expr] = answer
            time.sleep(0.5)
        missing = [e for e in exprs if e not in results]
        assert not missing, f"queries without data: {missing}"
        return results

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)
