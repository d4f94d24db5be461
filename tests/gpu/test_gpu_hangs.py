"""A kernel that hangs, seen live through gpuobsd: within 2 s
gpuobsctl hangs names it with exactly its blocks, the daemon warns once, and releasing the flag
lets the program finish."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from gpuobs_testing.daemon import DaemonProcess, free_port, gpuobsctl
from harness import WORKLOADS, InjectedRun

GRID = 6


def test_a_spinning_triton_kernel_is_named_with_exactly_its_blocks(shm_dir: Path, tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port(), "--hang-threshold-ms", "1000")
    try:
        run = InjectedRun(
            [sys.executable, str(WORKLOADS / "spin_flag.py"), "--grid", str(GRID)],
            shm_dir,
            mode="blocks",
            drain=False,
            env={"GPUOBS_BLOCK_EXIT": "1"},
        )
        assert run.read_json_line() == {"spinning": True, "grid": GRID}
        spinning_since = time.monotonic()
        found: dict = {"launches": []}
        while time.monotonic() - spinning_since < 2.0 and not found["launches"]:
            done = gpuobsctl(daemon.address, "--output", "json", "hangs", "--min-age-ms", "200")
            assert done.returncode == 0, done.stderr
            found = json.loads(done.stdout)
        seen_after = time.monotonic() - spinning_since
        table = gpuobsctl(daemon.address, "hangs", "--min-age-ms", "200").stdout
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "kernel_hang_suspected" not in daemon.log():
            time.sleep(0.1)
        warnings = [json.loads(line) for line in daemon.log().splitlines() if "kernel_hang_suspected" in line]
        run.send_line()
        out = run.finish(timeout=60)
        time.sleep(0.5)
        after = json.loads(gpuobsctl(daemon.address, "--output", "json", "hangs", "--min-age-ms", "0").stdout)
    finally:
        daemon.stop()
    print(table)
    assert found["launches"], f"nothing in flight after {seen_after:.2f} s"
    assert len(found["launches"]) == 1, found
    hung = found["launches"][0]
    assert "spin_while_flag_kernel" in hung["kernel"]
    assert sorted(b["x"] for b in hung["blocks"]) == list(range(GRID)) and all(
        b["y"] == 0 and b["z"] == 0 for b in hung["blocks"]
    )
    assert 1 <= len(hung["sms"]) <= GRID
    assert len(warnings) == 1 and "spin_while_flag_kernel" in warnings[0]["kernel"], warnings
    assert out["was_running"] and out["blocks_done"] == GRID  # the tool never made the hang permanent
    assert after["launches"] == []
