"""Hang evidence from a gpuobs-synth launch whose blocks enter and do not exit: gpuobsctl hangs,
the in-flight metrics, one warning per launch, and nothing left once the blocks exit."""

from __future__ import annotations

import json
import re
import time
import urllib.request

from gpuobs_testing.daemon import gpuobsctl


def hangs(daemon, min_age_ms: int) -> dict:
    done = gpuobsctl(daemon.address, "--output", "json", "hangs", "--min-age-ms", str(min_age_ms))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_hung_launch_is_named_with_exactly_its_blocks(start_synth, start_daemon) -> None:
    daemon = start_daemon("--hang-threshold-ms", "400", "--analysis-share", "1")  # pairing checked, not the budget
    synth = start_synth(
        "--mode", "blocks", "--launches", "200", "--kernels", "4", "--seed", "3", "--hang-seconds", "60"
    )
    deadline = time.monotonic() + 20
    found = {}
    while time.monotonic() < deadline:
        found = hangs(daemon, 300)
        if found["launches"]:
            break
        time.sleep(0.1)
    assert len(found["launches"]) == 1, found
    hung = found["launches"][0]
    kernels = json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"]
    kernel0 = next(k for k in kernels if k["slot"] == 0)
    grid = kernel0["shapes"][0]["grid"]
    expected = sorted((x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0]))
    assert hung["kernel"] == kernel0["name"] and hung["graph_exec"] == 0
    assert sorted((b["x"], b["y"], b["z"]) for b in hung["blocks"]) == expected
    assert hung["sms"] and int(hung["age_ns"]) >= 300_000_000
    assert found["processes"][0]["exits_hooked"] and int(found["processes"][0]["blocks_in_flight"]) == len(
        expected
    ) == int(hung["block_count"])
    # every other launch's blocks exited: nothing else is in flight, even at age 0
    assert len(hangs(daemon, 0)["launches"]) == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    # (the series carry the process's identity, its pid only the info series)
    assert re.search(rf"^gpuobs_blocks_in_flight{{[^}}]*}} {len(expected)}\.0$", metrics, re.M), metrics
    age = re.search(r"^gpuobs_oldest_block_in_flight_age_seconds{[^}]*} (\S+)$", metrics, re.M)
    assert age and float(age.group(1)) >= 0.3
    time.sleep(1.2)  # more hang checks pass: still one warning for this launch
    warnings = [json.loads(line) for line in daemon.log().splitlines() if "kernel_hang_suspected" in line]
    assert len(warnings) == 1 and warnings[0]["kernel"] == kernel0["name"], warnings
    assert warnings[0]["blocks_in_flight"] == len(expected)
    # released: the blocks exit, the evidence goes
    assert synth.stop() == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and hangs(daemon, 0)["launches"]:
        time.sleep(0.1)
    assert hangs(daemon, 0)["launches"] == []


def test_hangs_rejects_a_negative_age_and_an_unknown_pid(start_daemon) -> None:
    daemon = start_daemon()
    done = gpuobsctl(daemon.address, "hangs", "--pid", "999999")
    assert done.returncode != 0 and "no observed process" in done.stderr
    done = gpuobsctl(daemon.address, "hangs")
    assert done.returncode == 0 and "no blocks in flight" in done.stdout
