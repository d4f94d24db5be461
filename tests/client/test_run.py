"""gpuobsctl run: the embedded default, with a private daemon, on gpuobs-synth (which reads the
same GPUOBS_* variables as the injector)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest
from gpuobs_testing.daemon import gpuobsctl as run_gpuobsctl
from gpuobs_testing.synth import synth_binary

NO_DAEMON = "unix:///nonexistent/gpuobsd.sock"


def gpuobsctl(*args: str):
    return run_gpuobsctl(NO_DAEMON, *args)


def test_run_starts_a_private_daemon_and_summarises(tmp_path) -> None:
    done = gpuobsctl(
        "run", "--mode", "counter", "--", synth_binary(), "--launches", "300", "--rate", "300000", "--kernels", "6"
    )
    assert done.returncode == 0, done.stderr
    assert "gpuobs summary: 1 process(es)" in done.stderr
    assert "mode counter: 300 launches, 6 kernels" in done.stderr
    assert "accounting errors 0" in done.stderr
    rows = [line.split() for line in done.stderr.splitlines() if line[:1].isdigit()]
    assert len(rows) == 6
    assert all(row[2] == row[3] for row in rows)  # counter mode: blocks counted = geometry
    assert sum(int(row[1]) for row in rows) == 300


def has_gpu() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_run_passes_the_exit_status_through() -> None:
    done = gpuobsctl("run", "--", synth_binary(), "--no-such-flag")  # gpuobs-synth's usage error: 2
    assert done.returncode == 2, done.stderr
    assert "created no segment" in done.stderr


def read_or_empty(path: str) -> str:
    """A /proc file, or '' when its thread or process ended meanwhile."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    """The child processes of every thread of `pid` (threads come and go while we look)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(c) for t in tasks for c in read_or_empty(f"/proc/{pid}/task/{t}/children").split()]


def test_run_exits_as_a_shell_does_when_a_signal_ends_the_command() -> None:
    """128 + N (143 for SIGTERM), not Python's negative status turned into 241."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuobs.client.main",
            "--address",
            NO_DAEMON,
            "run",
            "--",
            synth_binary(),
            "--duration",
            "60",
            "--rate",
            "1000",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    synth = None
    while synth is None and time.monotonic() < deadline:
        synth = next(
            (c for c in children_of(process.pid) if "gpuobs-synth" in read_or_empty(f"/proc/{c}/cmdline")), None
        )
        time.sleep(0.05)
    assert synth is not None
    time.sleep(0.5)
    os.kill(synth, signal.SIGKILL)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGKILL, err
    assert "Traceback" not in err


@pytest.mark.skipif(has_gpu(), reason="this machine has an NVIDIA driver")
def test_run_says_at_once_that_nothing_can_be_observed_without_a_driver() -> None:
    began = time.monotonic()
    done = gpuobsctl("run", "--", "sh", "-c", "echo ran")
    assert done.returncode == 1 and "ran" not in done.stdout
    assert done.stderr.count("\n") == 1 and "no NVIDIA driver" in done.stderr and "gpuobs-synth" in done.stderr
    assert time.monotonic() - began < 8  # not the 10 s wait for a segment that cannot come


def test_run_without_a_command_is_a_one_line_error() -> None:
    done = gpuobsctl("run")
    assert (
        done.returncode == 2
        and done.stderr.splitlines()[-1] == "gpuobsctl: nothing to run: gpuobsctl run [options] -- CMD ..."
    )
