"""A process that exits keeps its final counts for a bounded time, then its
segment is deleted and it is forgotten (series, mapping, descriptor), so a daemon beside a
service that restarts for months does not grow."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import DaemonProcess, free_port


def metrics(daemon: DaemonProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


def open_descriptors(pid: int, directory: Path) -> int:
    return sum(
        os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(directory))
        for fd in os.listdir(f"/proc/{pid}/fd")
        if os.path.exists(f"/proc/{pid}/fd/{fd}")
    )


def test_an_exited_process_is_shown_for_its_retention_then_forgotten(
    start_synth, segment_dir: Path, tmp_path: Path
) -> None:
    # retention long enough for the checks below on a slow machine, short for the test's length
    daemon = DaemonProcess(tmp_path / "run", segment_dir, free_port(), "--exited-retention-s", "6")
    try:
        synth = start_synth("--mode", "counter", "--launches", "200", "--kernels", "4")
        assert synth.wait() == 0
        # retained: the final counts are there, the segment too
        (process,) = daemon.wait_all_gone().processes
        assert not process.alive and process.pid == synth.pid
        assert f'pid="{synth.pid}"' in metrics(daemon)
        assert synth.segment.exists() and open_descriptors(daemon.process.pid, segment_dir) == 1
        deadline = time.monotonic() + 20
        while daemon.status().processes and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(daemon.status().processes) == []
        assert not synth.segment.exists()
        assert f'pid="{synth.pid}"' not in metrics(daemon)
        assert open_descriptors(daemon.process.pid, segment_dir) == 0
        assert '"event": "process_forgotten"' in daemon.log()
    finally:
        daemon.stop()


def test_by_default_an_exited_process_stays_for_minutes(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    synth = start_synth("--mode", "counter", "--launches", "50", "--kernels", "2")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    time.sleep(1.0)
    assert [p.pid for p in daemon.status().processes] == [synth.pid] and synth.segment.exists()


def test_a_segment_shrunk_under_the_daemon_costs_only_that_process(start_synth, start_daemon) -> None:
    """A producer's uid (or a cleanup job) truncates mapped segments; the daemon
    used to die of SIGBUS on the next status or scrape, taking every process's observation with it."""
    daemon = start_daemon()
    victims = [start_synth("--mode", "blocks", "--rate", "200000", "--duration", "30") for _ in range(2)]
    bystander = start_synth("--mode", "counter", "--rate", "100000", "--duration", "30")
    deadline = time.monotonic() + 30
    while len(daemon.status().processes) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.truncate(victims[0].segment, 0)
    os.truncate(victims[1].segment, 4096)
    for _ in range(5):  # every path that reads a mapping: status, kernels, scrape
        status = daemon.status()
        daemon.stub.ListKernels(pb.ListKernelsRequest(top=0), timeout=10)
        metrics(daemon)
        time.sleep(0.1)
    deadline = time.monotonic() + 20  # a drain pass says so: the next one, on a loaded machine
    while daemon.log().count('"event": "segment_shrunk"') < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.process.poll() is None
    views = {p.pid: p for p in daemon.status().processes}
    assert views[bystander.pid].alive and views[bystander.pid].launches > 0
    assert all(not views[v.pid].alive for v in victims if v.pid in views)
    assert daemon.log().count('"event": "segment_shrunk"') == 2
    assert status.processes
