"""deploy/: the systemd units pass systemd-analyze, the vLLM drop-in injects the library we
ship, and every query of the Grafana dashboard returns data from a real Prometheus that
scraped a real gpuobsd."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpuobs_testing.daemon import gpuobsd_refuses
from gpuobs_testing.prometheus import PrometheusServer

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def verify(unit: Path, unit_path: Path) -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    done = subprocess.run(
        [tool, "verify", str(unit)],
        capture_output=True,
        text=True,
        env={"SYSTEMD_UNIT_PATH": f"{unit_path}:", "PATH": "/usr/bin:/bin"},
    )
    return (done.stdout + done.stderr).strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"


def test_daemon_unit_verifies(tmp_path: Path) -> None:
    gpuobsd = Path(sys.executable).parent / "gpuobsd"
    text = (DEPLOY / "systemd" / "gpuobsd.service").read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "RuntimeDirectory=gpuobs" in text
    assert "DynamicUser" not in text.split("#", 1)[0] and "\nDynamicUser" not in text
    unit = tmp_path / "gpuobsd.service"
    unit.write_text(text.replace("/opt/gpuobs/venv/bin/gpuobsd", str(gpuobsd)))
    assert verify(unit, tmp_path) == ""


def test_daemon_unit_exposure_is_at_most_two_and_its_flags_are_gpuobsds() -> None:
    """`systemd-analyze security` scores what the unit leaves open (0 none, 10 all); the unit's
    command line is one gpuobsd takes."""
    text = (DEPLOY / "systemd" / "gpuobsd.service").read_text()
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert gpuobsd_refuses(shlex.split(exec_start)[1:]) == ""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    done = subprocess.run(
        [tool, "security", "--offline=yes", str(DEPLOY / "systemd" / "gpuobsd.service")], capture_output=True, text=True
    )
    found = re.search(r"Overall exposure level for gpuobsd.service: ([\d.]+)", done.stdout)
    if found is None and "offline" in done.stderr:
        pytest.skip("this systemd-analyze has no --offline")
    assert found is not None, done.stdout + done.stderr
    assert float(found.group(1)) <= 2.0, done.stdout


MDWE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN: no memory both written and run
    sys.exit(77)
os.umask(0o027)
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_the_daemon_serves_under_the_units_memory_restriction(tmp_path: Path, segment_dir: Path) -> None:
    """MemoryDenyWriteExecute=yes is prctl(PR_SET_MDWE) (Linux 6.3 and later); with the unit's
    UMask too, gpuobsd starts, drains a producer and answers. (The system call filter needs
    systemd to apply it: not here.)"""
    gpuobsd = Path(sys.executable).parent / "gpuobsd"
    address = f"unix://{tmp_path}/run/gpuobsd.sock"
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-c",
            MDWE,
            str(gpuobsd),
            "--runtime-dir",
            str(tmp_path / "run"),
            "--segment-dir",
            str(segment_dir),
            "--metrics-address",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            not (tmp_path / "run" / "gpuobsd.sock").exists() and daemon.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        if daemon.poll() == 77:
            pytest.skip("this kernel has no PR_SET_MDWE")
        assert daemon.poll() is None, daemon.stderr.read()
        status = subprocess.run(
            [sys.executable, "-m", "gpuobs.client.main", "--address", address, "status"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert status.returncode == 0 and status.stdout.startswith("gpuobsd"), status.stderr
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


def test_vllm_drop_in_verifies_and_points_at_the_injector(tmp_path: Path) -> None:
    text = (DEPLOY / "systemd" / "vllm-gpuobs.conf").read_text()
    line = next(entry for entry in text.splitlines() if entry.startswith("Environment=CUDA_INJECTION64_PATH="))
    assert line.endswith("/gpuobs/lib/libgpuobs_injector.so")
    (tmp_path / "vllm.service").write_text("[Unit]\nDescription=vLLM\n[Service]\nExecStart=/bin/true\n")
    (tmp_path / "vllm.service.d").mkdir()
    (tmp_path / "vllm.service.d" / "gpuobs.conf").write_text(text)
    assert verify(tmp_path / "vllm.service", tmp_path) == ""


def dashboard_queries(dashboard: dict, **values: str) -> list[str]:
    """Every panel's query, with the dashboard's variables as Grafana would fill them."""
    exprs = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(f"${name}", value)
            exprs.append(expr)
    return exprs


def test_the_dashboard_follows_its_conventions() -> None:
    """Units that fit what is shown, rate windows that follow the scrape interval, host and
    process variables in every per-process query, instant queries for tables, topk without the
    "other" bucket; a datasource file Grafana accepts beside another default."""
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "gpuobs.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert {"instance", "gpu", "rank", "pid"} <= set(variables)
    assert all(variables[v]["includeAll"] for v in ("instance", "gpu", "rank", "pid"))
    # a GPU or a rank narrows the processes, and so every panel, which selects by pid
    assert all(
        f'{label}=~"${name}"' in variables["pid"]["query"]["query"]
        for name, label in (("instance", "instance"), ("rank", "rank"), ("gpu", "gpu_uuid"))
    )
    for panel in dashboard["panels"]:
        unit = panel["fieldConfig"]["defaults"]["unit"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert 'instance=~"$instance"' in expr, (panel["title"], expr)
            assert "[" not in expr.replace("[$__rate_interval]", ""), (panel["title"], expr)  # no fixed window
            assert "topk" not in expr or 'kernel!="other"' in expr, expr
            if panel["type"] == "table":
                assert target["instant"] and target["format"] == "table", panel["title"]
            if "_seconds{" in expr and "rate(" not in expr:
                assert unit == "s", (panel["title"], unit)  # an age or a lag, in seconds
            if unit == "percentunit":
                assert "ratio" in expr or " / " in expr or "seconds_total" in expr, (panel["title"], expr)
    datasource = (DEPLOY / "grafana" / "provisioning" / "datasources" / "gpuobs.yml").read_text()
    assert "isDefault" not in datasource and "uid: gpuobs-prometheus" in datasource


def test_every_dashboard_query_returns_data(start_synth, start_daemon, tmp_path: Path) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "gpuobs.json").read_text())
    exprs = dashboard_queries(dashboard, instance=".*", pid=".*", __rate_interval="1m")
    variables = [
        v["query"]["query"].replace("$instance", ".*").replace("$rank", ".*").replace("$gpu", ".*")
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]
    assert len(exprs) >= 15 and len(variables) == 4
    # a producer that drops (small ring, fast) so the drop panels have something to show
    start_synth("--mode", "blocks", "--rate", "0", "--kernels", "12", "--ring-records", "1024")
    daemon = start_daemon("--drain-interval-ms", "20")
    daemon.wait_processes(1)
    server = PrometheusServer(daemon.metrics_port, tmp_path)
    try:
        # label_values(METRIC, LABEL): the metric has series carrying that label
        server.wait_all(exprs + [query[len("label_values(") : query.rindex(",")] for query in variables], timeout=90)
    finally:
        server.stop()
