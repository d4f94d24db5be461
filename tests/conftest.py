"""Shared fixtures: real gpuobs-synth processes writing real segments into a temp directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from gpuobs.segment import segment_paths


def synth_binary() -> str:
    """gpuobs-synth as installed beside this Python (the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "gpuobs-synth"
    if beside.exists():
        return str(beside)
    found = shutil.which("gpuobs-synth")
    if not found:
        raise RuntimeError("gpuobs-synth is not installed: run scripts/setup.sh")
    return found


class SynthProcess:
    """A running gpuobs-synth and the segment it created."""

    def __init__(self, process: subprocess.Popen, segment: Path) -> None:
        self.process = process
        self.segment = segment

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


@pytest.fixture
def segment_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "segments"
    directory.mkdir(mode=0o700)
    return directory


@pytest.fixture
def start_synth(segment_dir: Path) -> Iterator[Callable[..., SynthProcess]]:
    started: list[SynthProcess] = []

    def start(*args: str, directory: Path | None = None, timeout: float = 10.0) -> SynthProcess:
        directory = directory or segment_dir
        process = subprocess.Popen(
            [synth_binary(), "--segment-dir", str(directory), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + timeout
        wanted = f"gpuobs-{process.pid}-"
        while time.monotonic() < deadline:
            found = [p for p in segment_paths(directory) if p.name.startswith(wanted)]
            if found:
                synth = SynthProcess(process, found[0])
                started.append(synth)
                return synth
            if process.poll() is not None and not found:
                raise RuntimeError(f"gpuobs-synth exited {process.returncode}: {process.stderr.read()}")
            time.sleep(0.002)
        process.kill()
        raise RuntimeError("gpuobs-synth created no segment in time")

    yield start
    for synth in started:
        if synth.process.poll() is None:
            synth.process.kill()
            synth.process.wait()


def drain_until_exit(segment, *, timeout: float = 60.0, pause: float = 0.0) -> tuple[int, int]:
    """Reads `segment` until its producer has exited and everything is read."""
    events = launches = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = segment.reader.state() == 2 or not segment.reader.producer_alive()
        got_events, got_launches = segment.drain_counts()
        events += got_events
        launches += got_launches
        if exited and got_events == 0 and got_launches == 0:
            return events, launches
        if pause:
            time.sleep(pause)
    raise AssertionError("producer did not finish in time")


def require_env_flag(name: str) -> bool:
    return os.environ.get(name, "0") == "1"
