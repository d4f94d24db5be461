"""The series budget on a real daemon: how many series a process costs in `counter` and in
`blocks` with 100 kernels (the numbers docs/metrics.md states), counts that stay exact (the
kernels' series sum to what ListKernels counts), and a restart of the same rank that continues
its series in a real Prometheus instead of minting a new set."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from gpuobs_testing.prometheus import PrometheusServer

# docs/metrics.md, "The series budget": per identity with the default limits (20 kernels with
# counter series, 8 with histograms): 20 process series + 2 x 21 kernel series in counter; blocks
# with exits adds 3 process series and 9 x 14 histogram series
COUNTER_SERIES = 62
BLOCKS_SERIES = 191
RANK = ["--rank", "0", "--world-size", "1", "--model", "Qwen3-8B", "--gpu", "0,0000:3b:00.0,GPU-8e8ee9c3-0000"]


def scrape(daemon) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


def process_series(text: str) -> list[str]:
    """The samples of per-process families (those with the identity's labels)."""
    return [line for line in text.splitlines() if line.startswith("gpuobs_") and 'Hostname="' in line]


def test_a_process_with_100_kernels_costs_the_stated_series_and_its_counts_stay_exact(start_synth, start_daemon):
    from gpuobs.api.v1 import observer_pb2 as pb

    counter = start_synth("--mode", "counter", "--kernels", "100", "--launches", "20000", "--rate", "0", *RANK)
    daemon = start_daemon()
    assert counter.wait(timeout=60) == 0
    daemon.wait_all_gone(20)
    text = scrape(daemon)
    series = process_series(text)
    assert len(series) <= COUNTER_SERIES <= 100, "\n".join(series)
    assert not [line for line in series if line.startswith("gpuobs_memory_accesses")]  # the block set counts none
    assert len([line for line in series if line.startswith("gpuobs_kernel_launches_total")]) == 21
    launches = sum(float(v) for v in re.findall(r"^gpuobs_kernel_launches_total\{.*\} (\S+)$", text, re.M))
    listed = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels
    assert launches == sum(k.launches for k in listed) == 20000
    blocks = sum(float(v) for v in re.findall(r"^gpuobs_blocks_total\{.*\} (\S+)$", text, re.M))
    assert blocks == sum(k.blocks_observed for k in listed)
    # the named kernels are the ones with the most blocks (no re-rank yet: the first ranking)
    named = set(re.findall(r'^gpuobs_blocks_total\{.*kernel_id="([0-9a-f]+)".*\}', text, re.M))
    top = sorted(listed, key=lambda k: -k.blocks_observed)
    assert {k.kernel_id for k in top[:20]} == named or top[19].blocks_observed == top[20].blocks_observed


def test_blocks_mode_with_exits_stays_within_its_stated_bound(start_synth, start_daemon) -> None:
    blocks = start_synth("--mode", "blocks", "--kernels", "100", "--launches", "5000", "--rate", "200000", *RANK)
    daemon = start_daemon("--analysis-share", "1")
    assert blocks.wait(timeout=120) == 0
    daemon.wait_all_gone(30)
    series = process_series(scrape(daemon))
    histograms = {line.split("le=")[0] for line in series if line.startswith("gpuobs_block_duration_seconds_bucket")}
    assert len(histograms) == 9  # 8 kernels and other
    assert COUNTER_SERIES < len(series) <= BLOCKS_SERIES, len(series)


def query_value(server: PrometheusServer, expr: str) -> float:
    return float(server.wait_all([expr])[expr][0]["value"][1])


def test_a_restart_of_the_same_rank_continues_its_series(start_synth, start_daemon, tmp_path: Path) -> None:
    """The first process of rank 0 runs and exits, and the daemon forgets it 3 s later; a second
    one of the same rank, model and GPU (a new pid) runs: Prometheus has one set of kernel
    series, which never reset, and they sum to both processes' launches; two pids are on the
    info series."""
    daemon = start_daemon("--exited-retention-s", "3")
    server = PrometheusServer(daemon.metrics_port, tmp_path)
    try:
        server.wait_all(['up{job="gpuobsd"} == 1'])  # scraping (every second) before the first process comes
        pids = []
        for run in range(2):
            synth = start_synth("--mode", "counter", "--kernels", "10", "--launches", "3000", "--rate", "0", *RANK)
            pids.append(synth.pid)
            assert synth.wait(timeout=60) == 0
            deadline = time.monotonic() + 30
            while daemon.status().processes and time.monotonic() < deadline:  # forgotten
                time.sleep(0.1)
            expected = 3000.0 * (run + 1)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # Prometheus has scraped the sum of both
                found = server.query('sum(gpuobs_kernel_launches_total{rank="0"})')
                if found and float(found[0]["value"][1]) == expected:
                    break
                time.sleep(0.5)
            assert found and float(found[0]["value"][1]) == expected, found
        assert query_value(server, 'count(last_over_time(gpuobs_kernel_launches_total{rank="0"}[5m]))') == 11
        assert query_value(server, 'sum(resets(gpuobs_kernel_launches_total{rank="0"}[5m]))') == 0
        assert query_value(server, 'sum(resets(gpuobs_events_total{rank="0"}[5m]))') == 0
        assert query_value(server, 'count(count by (__name__, mode, callback) (last_over_time({rank="0"}[5m])))') > 0
        info = server.wait_all(['last_over_time(gpuobs_process_info{rank="0"}[5m])'])
        assert {int(r["metric"]["pid"]) for r in info['last_over_time(gpuobs_process_info{rank="0"}[5m])']} == set(pids)
        # no per-process series carries a pid
        assert not server.query('count({__name__=~"gpuobs_.*", __name__!="gpuobs_process_info", pid!=""})')
    finally:
        server.stop()
