"""deploy/: the systemd units pass systemd-analyze, the vLLM drop-in injects the library we
ship, and every query of the Grafana dashboard returns data from a real Prometheus that
scraped a real gpuobsd."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuobs_testing.prometheus import PrometheusServer

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def verify(unit: Path, unit_path: Path) -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          env={"SYSTEMD_UNIT_PATH": f"{unit_path}:", "PATH": "/usr/bin:/bin"})
    return (done.stdout + done.stderr).strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"


def test_daemon_unit_verifies(tmp_path: Path) -> None:
    gpuobsd = Path(sys.executable).parent / "gpuobsd"
    text = (DEPLOY / "systemd" / "gpuobsd.service").read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "RuntimeDirectory=gpuobs" in text
    assert "DynamicUser" not in text.split("#", 1)[0] and "\nDynamicUser" not in text
    unit = tmp_path / "gpuobsd.service"
    unit.write_text(text.replace("/opt/gpuobs/venv/bin/gpuobsd", str(gpuobsd)))
    assert verify(unit, tmp_path) == ""


def test_vllm_drop_in_verifies_and_points_at_the_injector(tmp_path: Path) -> None:
    text = (DEPLOY / "systemd" / "vllm-gpuobs.conf").read_text()
    line = next(l for l in text.splitlines() if l.startswith("Environment=CUDA_INJECTION64_PATH="))
    assert line.endswith("/gpuobs/lib/libgpuobs_injector.so")
    (tmp_path / "vllm.service").write_text("[Unit]\nDescription=vLLM\n[Service]\nExecStart=/bin/true\n")
    (tmp_path / "vllm.service.d").mkdir()
    (tmp_path / "vllm.service.d" / "gpuobs.conf").write_text(text)
    assert verify(tmp_path / "vllm.service", tmp_path) == ""


def test_every_dashboard_query_returns_data(start_synth, start_daemon, tmp_path: Path) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "gpuobs.json").read_text())
    assert any(v["type"] == "datasource" for v in dashboard["templating"]["list"])
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 10
    # a producer that drops (small ring, fast) so the drop panels have something to show
    start_synth("--mode", "blocks", "--rate", "0", "--kernels", "12", "--ring-records", "1024")
    daemon = start_daemon("--drain-interval-ms", "20")
    daemon.wait_processes(1)
    server = PrometheusServer(daemon.metrics_port, tmp_path)
    try:
        server.wait_all(exprs, timeout=90)
    finally:
        server.stop()
