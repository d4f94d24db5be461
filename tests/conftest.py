"""Shared fixtures: real gpuobs-synth processes writing real segments into a temp directory; and
the check that the run leaves the machine as it found it (gpuobs_testing.leftovers)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from gpuobs.segment import segment_paths
from gpuobs_testing.daemon import DaemonProcess, free_port
from gpuobs_testing.synth import SynthProcess, synth_binary

if TYPE_CHECKING:
    from gpuobs_testing.written import WrittenProcess


@pytest.fixture
def segment_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "segments"
    directory.mkdir(mode=0o700)
    return directory


@pytest.fixture
def cache_home(tmp_path: Path) -> Path:
    """The XDG cache folder the producers of a test see: their default cubin folder
    (gpuobs/cubins) is under it, never under the machine's own home."""
    return tmp_path / "cache"


@pytest.fixture
def start_synth(segment_dir: Path, cache_home: Path) -> Iterator[Callable[..., SynthProcess]]:
    started: list[SynthProcess] = []

    def start(
        *args: str, directory: Path | None = None, timeout: float = 10.0, env: dict[str, str] | None = None
    ) -> SynthProcess:
        directory = directory or segment_dir
        process = subprocess.Popen(
            [synth_binary(), "--segment-dir", str(directory), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "XDG_CACHE_HOME": str(cache_home), **(env or {})},
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


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def start_daemon(runtime_dir: Path, segment_dir: Path) -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(*extra: str) -> DaemonProcess:
        daemon = DaemonProcess(runtime_dir, segment_dir, free_port(), *extra)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop(signal.SIGKILL)


@pytest.fixture
def written(tmp_path: Path) -> Iterator[WrittenProcess]:
    """A segment this process writes, drained and queried in-process (gpuobs_testing.written)."""
    from gpuobs_testing.written import WrittenProcess

    directory = tmp_path / "written"
    directory.mkdir(mode=0o700)
    process = WrittenProcess(directory)
    yield process
    process.close()


def pytest_sessionstart(session: pytest.Session) -> None:
    from gpuobs_testing import leftovers

    turn = leftovers.take_turn(session.config.get_terminal_writer().line)
    if turn is not None:
        session.config.stash[leftovers.TURN_KEY] = turn
    session.config.stash[leftovers.KEY] = leftovers.snapshot()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the run when it left a segment folder, a shared folder or a gpuobs process behind
    (they are removed or killed then, and named)."""
    from gpuobs_testing import leftovers

    before = session.config.stash.get(leftovers.KEY, None)
    if before is None:
        return
    found = leftovers.left_since(before)
    if found:
        session.config.get_terminal_writer().line(
            "left behind by the tests (now removed): " + "; ".join(found), red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
