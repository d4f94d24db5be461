"""Never blind without saying so: a hung kernel is named within its threshold whatever the analysis
budget does (from the device's counts of blocks entered and exited), the hang log line fires for
busy kernels too, every view says what the daemon did not analyse; a drain that stalls is said and
the daemon keeps answering (its watchdog fed); concurrent scrapes share one collection."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from pathlib import Path

from gpuobs.segment import Segment
from gpuobs_testing.daemon import gpuobsctl


def test_a_hang_is_named_within_its_threshold_when_the_budget_looks_at_nothing(start_synth, start_daemon) -> None:
    # busy in blocks mode (every block's events, more than 1% of the daemon's time can pair), then
    # kernel 0 hangs: its blocks enter and none exits
    synth = start_synth(
        "--mode",
        "blocks",
        "--rate",
        "4000000",
        "--kernels",
        "6",
        "--duration",
        "2",
        "--hang-seconds",
        "60",
        "--ring-records",
        str(1 << 16),
    )
    daemon = start_daemon("--analysis-share", "0.01", "--hang-threshold-ms", "1000")
    daemon.wait_processes(1)
    kernel0 = Segment(synth.segment, exclusive=False).kernels()[0]["demangled"]
    deadline = time.monotonic() + 20
    stalled = []
    while time.monotonic() < deadline and not stalled:
        done = gpuobsctl(daemon.address, "--output", "json", "hangs", "--min-age-ms", "1000")
        assert done.returncode == 0, done.stderr
        processes = json.loads(done.stdout)["processes"]
        stalled = [k for p in processes for k in p.get("stalled", [])]
        time.sleep(0.2)
    assert stalled, "the hung kernel was not named"
    (hung,) = stalled
    assert hung["kernel"] == kernel0 and int(hung["blocks_in_flight"]) > 0
    # said in the log (kernel 0 dropped events before it hung: it is busy, and warned of anyway)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "kernel_hang_suspected" not in daemon.log():
        time.sleep(0.1)
    warned = [json.loads(line) for line in daemon.log().splitlines() if "kernel_hang_suspected" in line]
    assert warned and warned[0]["kernel"] == kernel0 and warned[0]["blocks_in_flight"] == int(hung["blocks_in_flight"])
    # every view says what it did not look at
    (process,) = json.loads(gpuobsctl(daemon.address, "--output", "json", "status").stdout)["processes"]
    text = gpuobsctl(daemon.address, "hangs").stdout
    assert kernel0[:40] in text and "NO EXIT FOR s" in text
    if int(process.get("block_events_unanalysed", 0)):
        assert "block events not analysed" in text
        assert "block events not analysed" in gpuobsctl(daemon.address, "status").stdout
    metrics = metrics_text(daemon)
    assert re.search(rf"^gpuobs_blocks_in_flight{{[^}}]*}} {float(hung['blocks_in_flight'])}$", metrics, re.M)
    assert "gpuobs_block_events_unanalysed_total" in metrics
    synth.process.terminate()


def metrics_text(daemon) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


def test_a_stalled_drain_is_said_and_the_watchdog_is_fed(tmp_path: Path, segment_dir: Path, monkeypatch) -> None:
    """The watchdog proves the daemon answers, not that its drain moves: a restart would lose every
    analysis (hang evidence, joins, steps). A stall is a log line, systemd's status line, a metric."""
    from gpuobs.daemon import main as daemon_main

    notify_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_path))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    config = daemon_main.configured(
        [
            "--runtime-dir",
            str(tmp_path / "run"),
            "--segment-dir",
            str(segment_dir),
            "--metrics-address",
            "",
            "--watchdog-stall-ms",
            "100",
        ]
    )
    daemon = daemon_main.Daemon(config)
    daemon.service.drain_age_seconds = lambda: 50.0  # the drain has not passed for 50 s

    async def watch_a_while() -> None:
        task = asyncio.create_task(daemon._watch())
        await asyncio.sleep(0.6)
        task.cancel()

    asyncio.run(watch_a_while())
    messages = []
    try:
        while True:
            messages.append(listener.recv(4096).decode())
    except TimeoutError:
        pass
    finally:
        listener.close()
        daemon.service.close()
    assert sum(m == "WATCHDOG=1" for m in messages) >= 2, messages
    assert "STATUS=drain stalled for 50 s" in messages, messages
    from gpuobs.daemon.metrics import GpuobsCollector

    families = {f.name: f for f in GpuobsCollector(daemon.service, 50, 0.1).collect()}
    assert families["gpuobs_drain_stalled"].samples[0].value == 1.0


def test_concurrent_scrapes_share_one_exposition() -> None:
    from gpuobs.daemon.metrics_server import SharedExposition
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    collections = []

    class Slow:
        def collect(self):
            collections.append(time.monotonic())
            time.sleep(0.3)
            family = GaugeMetricFamily("gpuobs_test", "a slow collection")
            family.add_metric([], float(len(collections)))
            yield family

    registry = CollectorRegistry()
    registry.register(Slow())
    collections.clear()  # register() collects once to learn the names
    exposition = SharedExposition(registry)
    answers = []
    scrapers = [threading.Thread(target=lambda: answers.append(exposition.latest())) for _ in range(20)]
    began = time.monotonic()
    for scraper in scrapers:
        scraper.start()
    for scraper in scrapers:
        scraper.join()
    assert len(answers) == 20 and len(set(answers)) == 1 and b"gpuobs_test 1.0" in answers[0]
    assert len(collections) == 1 and time.monotonic() - began < 3 * 0.3  # not 20 collections one after another
    time.sleep(exposition.reuse_s + 0.05)
    assert b"gpuobs_test 2.0" in exposition.latest()  # an old exposition is not served again
