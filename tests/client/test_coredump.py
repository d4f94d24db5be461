"""gpuobsctl coredump against a process that plays the driver's side of the user-induced core
dump: it has the environment, holds the named pipe open and reads what arrives (the driver
starts the dump then). The GPU side was measured on the H200: the driver writes the dump, then ends the program."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpuobs_testing.daemon import gpuobsctl

DRIVER_SIDE = r"""
import os, socket, sys, time
pattern = os.environ["CUDA_COREDUMP_PIPE"]
path = pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid())).replace("%t", str(int(time.time())))
os.mkfifo(path)
fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
print("ready", flush=True)
got = 0
deadline = time.monotonic() + 30
while got < (1 << 20) and time.monotonic() < deadline:
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        data = b""
    if not data:
        time.sleep(0.005)
    got += len(data)
print(got, flush=True)
"""


def start(tmp_path: Path, **extra: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        CUDA_COREDUMP_PIPE=str(tmp_path / "cuda_coredump_pipe_%h.%p.%t"),
        CUDA_COREDUMP_FILE=str(tmp_path / "core_%p.nvcudmp"),
        **extra,
    )
    child = subprocess.Popen([sys.executable, "-c", DRIVER_SIDE], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


def test_the_pipe_is_found_and_fed_only_with_yes(tmp_path: Path) -> None:
    child = start(tmp_path, CUDA_ENABLE_USER_TRIGGERED_COREDUMP="1")
    try:
        refused = gpuobsctl("unix:///nonexistent.sock", "coredump", str(child.pid))
        assert refused.returncode == 2 and "ends process" in refused.stderr and "--yes" in refused.stderr
        time.sleep(0.2)
        assert child.poll() is None  # nothing was written: the process still waits
        done = gpuobsctl("unix:///nonexistent.sock", "coredump", str(child.pid), "--yes")
        assert done.returncode == 0, done.stderr
        assert "core_%p.nvcudmp" in done.stdout and "cuda_coredump_pipe_" in done.stdout
        assert int(child.stdout.readline()) >= 1 << 20
    finally:
        child.kill()
        child.wait()


def test_a_process_without_the_environment_is_refused(tmp_path: Path) -> None:
    child = start(tmp_path)  # no CUDA_ENABLE_USER_TRIGGERED_COREDUMP
    try:
        done = gpuobsctl("unix:///nonexistent.sock", "coredump", str(child.pid), "--yes")
        assert done.returncode == 1 and "CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1" in done.stderr
    finally:
        child.kill()
        child.wait()
    done = gpuobsctl("unix:///nonexistent.sock", "coredump", "999999999", "--yes")
    assert done.returncode == 1 and "no process 999999999" in done.stderr
