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
                "sum by (kernel) (gpuobs_blocks_total)",
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
    assert len(results["sum by (kernel) (gpuobs_blocks_total)"]) == 12


def test_kernel_series_are_sticky_and_sum_exactly() -> None:
    """Which kernels get a series of their own must not follow the ranking of
    the moment (series flapped, and a kernel entering the top N lost its history). Scrapes of
    one process whose hottest kernels change: the labelled set never changes once full, new
    kernels go to "other", "other" never falls, and labels plus "other" sum to the totals, in
    integers (a float sum is off past 2^53)."""
    import numpy as np
    from gpuobs.daemon.metrics import OTHER, StickyLabels

    labels = StickyLabels(limit=3)
    launches = np.array([0, 0, 0, 0], dtype=np.uint64)
    names = [f"kernel_{slot}" for slot in range(100)]
    previous_other, named_after_first = 0, None
    for scrape in range(12):
        if scrape % 3 == 0:  # a new kernel registers every third scrape
            launches = np.append(launches, np.uint64(0))
        hot = scrape % len(launches)  # the hottest kernel changes every scrape
        launches = launches + np.arange(1, len(launches) + 1, dtype=np.uint64)
        launches[hot] += np.uint64(1000)
        labels.assign(launches, lambda first, count: names[first : first + count])
        series = dict(labels.sums(launches))
        named = set(series) - {OTHER}
        named_after_first = named_after_first or named
        assert named == named_after_first and len(named) == 3
        assert series.get(OTHER, 0) >= previous_other
        previous_other = series.get(OTHER, 0)
        assert sum(series.values()) == int(launches.sum())
    assert previous_other > 0
    big = StickyLabels(limit=1)
    huge = np.array([(1 << 62) + 1, (1 << 62) + 3], dtype=np.uint64)
    big.assign(huge, lambda first, count: ["a", "b"][first : first + count])
    assert dict(big.sums(huge)) == {"b": (1 << 62) + 3, OTHER: (1 << 62) + 1}  # the most launched


def test_a_scrape_without_a_copy_of_the_counters_shows_the_last_sums() -> None:
    """A producer may keep publishing through every try of a copy: that scrape shows the last
    sums (not nothing, and not labels rebuilt from scratch, which made a counter fall)."""
    import numpy as np
    from gpuobs.daemon.metrics import GpuobsCollector
    from gpuobs.segment import KERNEL_COUNTERS_DTYPE

    class Process:
        pid, path = 42, Path("/segments/gpuobs-42.seg")

    class Service:
        def __init__(self) -> None:
            self.counters = np.zeros(3, dtype=KERNEL_COUNTERS_DTYPE)

        def kernel_counters(self):
            return [(Process, self.counters)]

        def kernel_names(self, process, first: int, count: int) -> list[str]:
            return ["a", "b", "c"][first : first + count]

        def block_duration_histograms(self, process) -> dict:
            return {}

    service = Service()
    collector = GpuobsCollector(service, kernel_label_limit=2)
    service.counters["launches"] = [5, 3, 1]
    first = collector._kernel_series()[0]["launches"]
    assert first == {(42, "a"): 5, (42, "b"): 3, (42, "other"): 1}
    service.counters = None  # this scrape gets no copy
    assert collector._kernel_series()[0]["launches"] == first
    service.counters = np.zeros(3, dtype=KERNEL_COUNTERS_DTYPE)
    service.counters["launches"] = [6, 3, 900]  # c is now the hottest: it stays "other"
    assert collector._kernel_series()[0]["launches"] == {(42, "a"): 6, (42, "b"): 3, (42, "other"): 900}


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


def test_every_metric_the_rules_use_is_one_the_daemon_exports(finished_run) -> None:
    """A rule over a metric the daemon never exports would never fire: each name in the rules'
    expressions is a family of a real scrape (counters by their _total samples)."""
    exported = set(re.findall(r"^# TYPE (\w+) ", scrape(finished_run), re.M))
    exported |= {f"{name}_total" for name in exported}
    used = set(re.findall(r"\bgpuobs_\w+", (RULES / "gpuobs-rules.yml").read_text()))
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
    """gpuobs-synth records an exit for every enter: each kernel's histogram counts its blocks'
    durations, cumulative and monotonic, as many as ListKernels reports, with the same mean."""
    from gpuobs.api.v1 import observer_pb2 as pb

    synth = start_synth("--mode", "blocks", "--kernels", "3", "--launches", "300", "--rate", "100000")
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait(timeout=60) == 0
    daemon.wait_all_gone(20)
    text = scrape(daemon)
    # (a kernel label is its name cut to 200 characters)
    kernels = {k.name[:200]: k for k in daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels}
    series: dict[str, dict[str, float]] = {}
    for name, le, value in re.findall(
        r'^gpuobs_block_duration_seconds_bucket\{kernel="([^"]*)",le="([^"]+)",pid="\d+"\} (\S+)$', text, re.M
    ):
        series.setdefault(name, {})[le] = float(value)
    assert series and set(series) <= set(kernels)
    for name, buckets in series.items():
        counts = list(buckets.values())
        assert counts == sorted(counts) and len(counts) == 12, buckets  # 11 edges and +Inf, cumulative
        durations = kernels[name].block_durations
        assert buckets["+Inf"] == durations.count > 0, name
        total = float(
            re.search(
                rf'^gpuobs_block_duration_seconds_sum\{{kernel="{re.escape(name)}",pid="\d+"\}} (\S+)$', text, re.M
            ).group(1)
        )
        assert abs(total / durations.count - durations.mean_ns * 1e-9) < 1e-12, name
