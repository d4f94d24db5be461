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
        for target in panel.get("targets", []):  # a row has none
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
    assert {"instance", "model", "gpu", "rank"} <= set(variables) and "pid" not in variables  # series have no pid
    assert all(variables[v]["includeAll"] for v in ("instance", "model", "gpu", "rank"))
    # the variables narrow each other: a model its GPUs, a GPU its ranks
    assert 'model=~"$model"' in variables["gpu"]["query"]["query"]
    assert 'UUID=~"$gpu"' in variables["rank"]["query"]["query"]
    selection = 'model=~"$model", UUID=~"$gpu", rank=~"$rank"'
    for panel in (p for p in dashboard["panels"] if p["type"] != "row"):
        unit = panel["fieldConfig"]["defaults"]["unit"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert 'instance=~"$instance"' in expr, (panel["title"], expr)
            assert "pid" not in expr, expr
            if "gpuobs_processes" not in expr and "collector_success" not in expr and "drain_lag" not in expr:
                assert selection in expr, (panel["title"], expr)  # every per-process panel follows the variables
            assert "topk" not in expr or "kernel_id" in expr, expr  # kernels apart, not by their short name
            assert "[" not in expr.replace("[$__rate_interval]", ""), (panel["title"], expr)  # no fixed window
            assert "topk" not in expr or 'kernel!="other"' in expr, expr
            if panel["type"] == "table":
                assert target["instant"] and target["format"] == "table", panel["title"]
            if "_seconds{" in expr and "rate(" not in expr:
                assert unit == "s", (panel["title"], unit)  # an age or a lag, in seconds
            if unit == "percentunit":  # a ratio, a share of a core, or DCGM's profiling fields (0..1)
                shares = ("ratio", " / ", "seconds_total", "DCGM_FI_PROF_")
                assert any(share in expr for share in shares), (panel["title"], expr)
    datasource = (DEPLOY / "grafana" / "provisioning" / "datasources" / "gpuobs.yml").read_text()
    assert "isDefault" not in datasource and "uid: gpuobs-prometheus" in datasource


UUID = "GPU-8e8ee9c3-0b5d-4c1f-9a7e-000000000000"


class FakeDcgmExporter:
    """dcgm-exporter's exposition of one GPU on loopback (its labels as it spells them), empty
    until `serving` is set: Prometheus then scrapes a target without DCGM_FI_* series."""

    def __init__(self) -> None:
        import http.server
        import threading

        from gpuobs_testing.daemon import free_port

        self.serving = False
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = b""
                if owner.serving:
                    labels = f'gpu="0",UUID="{UUID}",pci_bus_id="00000000:3B:00.0",device="nvidia0",'
                    labels += 'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu1"'
                    body = "".join(
                        f"# TYPE {name} gauge\n{name}{{{labels}}} {value}\n"
                        for name, value in (
                            ("DCGM_FI_PROF_SM_ACTIVE", 0.75),
                            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.4),
                            ("DCGM_FI_PROF_DRAM_ACTIVE", 0.3),
                        )
                    ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_every_dashboard_query_returns_data(start_synth, start_daemon, tmp_path: Path) -> None:
    """Every panel's query returns data from a real Prometheus scraping a real gpuobsd and a
    dcgm-exporter; the DCGM panels answer empty (not an error) while no DCGM series exists."""
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "gpuobs.json").read_text())
    values = {"instance": ".*", "model": ".*", "gpu": ".*", "rank": ".*", "__rate_interval": "1m"}
    exprs = dashboard_queries(dashboard, **values)
    dcgm = [expr for expr in exprs if "DCGM_FI_" in expr]
    variables = [
        v["query"]["query"].replace("$instance", ".*").replace("$model", ".*").replace("$gpu", ".*")
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]
    assert len(exprs) >= 15 and len(variables) == 4 and len(dcgm) == 3
    # a producer that drops (small ring, fast) so the drop panels have something to show
    start_synth(
        "--mode", "blocks", "--rate", "0", "--kernels", "12", "--ring-records", "1024",
        "--rank", "0", "--world-size", "1", "--model", "Qwen3-8B", "--gpu", f"0,0000:3b:00.0,{UUID}",
    )  # fmt: skip
    # and a rank that counts memory accesses (the memory patch set), for the accesses panel
    start_synth(
        "--mode", "memory", "--patch-set", "memory", "--rate", "20000", "--kernels", "4",
        "--rank", "1", "--world-size", "2", "--model", "Qwen3-8B", "--gpu", "1,0000:5d:00.0,GPU-8e8ee9c3-0001",
    )  # fmt: skip
    daemon = start_daemon("--drain-interval-ms", "20", "--analysis-share", "1")
    daemon.wait_processes(2)
    exporter = FakeDcgmExporter()
    server = PrometheusServer(daemon.metrics_port, tmp_path, {"dcgm": exporter.port})
    try:
        server.wait_all(['up{job="dcgm"} == 1', "gpuobs_process_info"])
        for expr in dcgm:  # no DCGM series yet: an empty answer, not a failed query
            assert server.query(expr) == [], expr
        exporter.serving = True
        # label_values(METRIC, LABEL): the metric has series carrying that label
        server.wait_all(exprs + [query[len("label_values(") : query.rindex(",")] for query in variables], timeout=90)
    finally:
        server.stop()
        exporter.stop()
