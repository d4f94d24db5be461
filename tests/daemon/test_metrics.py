"""The Prometheus exposition: promtool accepts it, a golden file pins it, and a real Prometheus
server scrapes it and answers queries over it."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from gpuobs_testing.prometheus import PrometheusServer, require

GOLDEN = Path(__file__).parent / "golden" / "metrics.txt"


def scrape(daemon) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


@pytest.fixture
def finished_run(start_synth, start_daemon):
    """A deterministic producer (fixed seed and launch count, counter mode) that has exited."""
    start_synth("--mode", "counter", "--launches", "400", "--seed", "5", "--kernels", "10", "--label", "golden")
    daemon = start_daemon()
    daemon.wait_all_gone(10)
    return daemon


def test_exposition_passes_promtool(finished_run) -> None:
    promtool = require("promtool")
    text = scrape(finished_run)
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", checked.stdout + checked.stderr


def test_exposition_matches_the_golden_file(finished_run) -> None:
    text = re.sub(r'pid="\d+"', 'pid="PID"', scrape(finished_run))
    text = re.sub(r'Hostname="[^"]*"', 'Hostname="HOST"', text)
    # times of this scrape and of the last drain pass: there, but never the same twice
    text = re.sub(r"^(gpuobs_(?:drain_lag|scrape_duration)_seconds) \S+$", r"\1 SECONDS", text, flags=re.M)
    lines = [line for line in text.splitlines() if line.startswith("gpuobs_") or line.startswith("# HELP gpuobs")]
    normalized = "\n".join(lines) + "\n"
    if os.environ.get("GPUOBS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(normalized)
    assert normalized == GOLDEN.read_text()


def test_a_real_prometheus_scrapes_the_daemon(start_synth, start_daemon, tmp_path: Path) -> None:
    start_synth("--mode", "blocks", "--rate", "200000", "--kernels", "12")
    daemon = start_daemon()
    daemon.wait_processes(1)
    server = PrometheusServer(daemon.metrics_port, tmp_path)
    try:
        results = server.wait_all(
            [
                "gpuobs_processes",
                "sum by (kernel_id) (gpuobs_blocks_total)",
                "rate(gpuobs_events_total[5s])",
                "gpuobs_events_dropped_total",
                "gpuobs_mode",
                "gpuobs_accounting_errors_total",
            ]
        )
    finally:
        server.stop()
    assert float(results["gpuobs_processes"][0]["value"][1]) == 1.0
    assert all(float(r["value"][1]) == 0.0 for r in results["gpuobs_accounting_errors_total"]), daemon.log()
    by_id = results["sum by (kernel_id) (gpuobs_blocks_total)"]
    assert len(by_id) == 12 + 1  # every kernel named (12 within the budget), and other (no kernel_id)


RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def test_the_shipped_rules_pass_promtool_and_their_unit_tests() -> None:
    promtool = require("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES / "gpuobs-rules.yml")], capture_output=True, text=True
    )
    shipped = sum(len(group["rules"]) for group in yaml.safe_load((RULES / "gpuobs-rules.yml").read_text())["groups"])
    assert checked.returncode == 0 and f"SUCCESS: {shipped} rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    tested = subprocess.run(
        [promtool, "test", "rules", "gpuobs-rules.test.yml"], cwd=RULES, capture_output=True, text=True
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_alert_links_its_section_of_the_metrics_reference() -> None:
    """runbook_url points at a heading of docs/metrics.md (GitHub's anchor of it), and each alert
    says what to run next; no alert keeps the old `runbook` annotation."""
    reference = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 _-]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in reference.splitlines()
        if line.startswith("#")
    }
    groups = yaml.safe_load((RULES / "gpuobs-rules.yml").read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert len(alerts) >= 8
    for alert in alerts:
        annotations = alert["annotations"]
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "docs/metrics.md" and anchor in anchors, (alert["alert"], anchor)
        assert anchor == alert["alert"].lower() and annotations["command"] and "runbook" not in annotations


def test_every_metric_the_rules_use_is_one_the_daemon_exports(finished_run) -> None:
    """A rule over a metric the daemon never exports would never fire: each name in the rules'
    expressions is a family of a real scrape (counters by their _total samples)."""
    exported = set(re.findall(r"^# TYPE (\w+) ", scrape(finished_run), re.M))
    exported |= {f"{name}{suffix}" for name in exported for suffix in ("_total", "_sum", "_count", "_bucket")}
    # (a recorded series, level:gpuobs_...:operation, is the rules' own)
    used = set(re.findall(r"(?<![:\w])gpuobs_\w+", (RULES / "gpuobs-rules.yml").read_text()))
    assert used and used <= exported, used - exported


def test_the_daemon_exports_its_build_and_its_own_process(finished_run) -> None:
    import gpuobs
    from gpuobs._native import LAYOUT_VERSION

    text = scrape(finished_run)
    assert f'gpuobs_build_info{{layout_version="{LAYOUT_VERSION}",version="{gpuobs.__version__}"}} 1.0' in text
    for family in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "python_info",
        "python_gc_collections_total",
    ):
        assert re.search(rf"^{family}(\{{[^}}]*\}})? \d", text, re.M), family
    lag = float(re.search(r"^gpuobs_drain_lag_seconds (\S+)$", text, re.M).group(1))
    assert 0 <= lag < 5  # the drain goes over the segments every few milliseconds
    assert 0 < float(re.search(r"^gpuobs_scrape_duration_seconds (\S+)$", text, re.M).group(1)) < 5


def test_the_metrics_reference_names_every_gpuobs_metric(finished_run) -> None:
    """docs/metrics.md is the reference: every family a scrape has is in it, and it lists none
    that does not exist."""

    def family(name: str) -> str:
        return name.removesuffix("_total").removesuffix("_info")

    exported = {family(name) for name in re.findall(r"^# TYPE (gpuobs_\w+) ", scrape(finished_run), re.M)}
    reference = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    documented = {family(name) for name in re.findall(r"`(gpuobs_\w+)`", reference)}
    assert exported == documented, (exported - documented, documented - exported)


def test_block_durations_are_a_histogram_per_kernel_that_agrees_with_the_api(start_synth, start_daemon) -> None:
    """gpuobs-synth records an exit for every enter: each named kernel's histogram counts its
    blocks' durations, cumulative and monotonic, as many as ListKernels reports for its
    kernel_id, with the same mean; with `other`, they count every block."""
    from gpuobs.api.v1 import observer_pb2 as pb

    synth = start_synth("--mode", "blocks", "--kernels", "3", "--launches", "300", "--rate", "100000")
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait(timeout=60) == 0
    daemon.wait_all_gone(20)
    text = scrape(daemon)
    kernels = {k.kernel_id: k for k in daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels}
    series: dict[str, dict[str, float]] = {}
    for kid, le, value in re.findall(
        r'^gpuobs_block_duration_seconds_bucket\{[^}]*kernel_id="([0-9a-f]+)",le="([^"]+)"[^}]*\} (\S+)$', text, re.M
    ):
        series.setdefault(kid, {})[le] = float(value)
    other = re.findall(r'^gpuobs_block_duration_seconds_count\{[^}]*kernel="other"[^}]*\} (\S+)$', text, re.M)
    assert series and set(series) <= set(kernels) and len(other) == 1
    for kid, buckets in series.items():
        counts = list(buckets.values())
        assert counts == sorted(counts) and len(counts) == 12, buckets  # 11 edges and +Inf, cumulative
        durations = kernels[kid].block_durations
        assert buckets["+Inf"] == durations.count > 0, kid
        found = re.search(rf'^gpuobs_block_duration_seconds_sum\{{[^}}]*kernel_id="{kid}"[^}}]*\}} (\S+)$', text, re.M)
        total = float(found.group(1))
        assert abs(total / durations.count - durations.mean_ns * 1e-9) < 1e-12, kid
    every = sum(k.block_durations.count for k in kernels.values())
    assert sum(b["+Inf"] for b in series.values()) + float(other[0]) == every


def test_request_and_step_histograms_agree_with_the_api_and_name_no_request(start_synth, start_daemon) -> None:
    """A served model's steps (gpuobs-synth plays a vLLM engine): device time per request and busy
    ratio per step are histograms keyed by the identity (model, rank among it), no request id;
    their counts are the API's requests and timed steps, the sum the requests' device time."""
    from gpuobs.api.v1 import observer_pb2 as pb

    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", "5", "--steps", "--launches", "150", "--rate", "100000",
        "--kernels", "8", "--rank", "0", "--world-size", "1", "--model", "synth/model",
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait(timeout=60) == 0
    daemon.wait_all_gone(20)
    text = scrape(daemon)
    requests = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1000), timeout=10)
    steps = daemon.stub.ListSteps(pb.ListStepsRequest(last=1000), timeout=10).steps
    for family, count, total in [
        ("gpuobs_request_device_seconds", len(requests.requests), requests.steps_device_ns / 1e9),
        ("gpuobs_step_busy_ratio", sum(s.HasField("busy_ratio") for s in steps), sum(s.busy_ratio for s in steps)),
    ]:
        buckets = re.findall(rf"^{family}_bucket\{{([^}}]*)\}} (\S+)$", text, re.M)
        assert buckets and all('model="synth/model"' in labels and 'rank="0"' in labels for labels, _ in buckets)
        assert not any("request" in name for labels, _ in buckets for name in re.findall(r"(\w+)=", labels))
        values = [float(value) for _, value in buckets]
        assert values == sorted(values) and values[-1] == count > 0, family
        found = re.search(rf"^{family}_sum\{{[^}}]*\}} (\S+)$", text, re.M)
        assert float(found.group(1)) == pytest.approx(total, rel=1e-9), family
