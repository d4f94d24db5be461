"""What a test run must not leave on the machine: folders in /dev/shm (segments are memory), gpuobs
folders in /tmp, and gpuobs processes (a producer or a daemon that outlived its test). The run's
start is snapshotted; at its end what is new is named, removed or killed, and the run fails.
Two runs on one machine take turns (`take_turn`): a folder is new whoever made it. A process is
the run's own only where its environment carries the turn's mark (every process a test starts
inherits it), so a daemon someone started by hand beside the run is neither killed nor named."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

KEY = pytest.StashKey[dict]()
TURN_KEY = pytest.StashKey[int]()
# set in the environment of a run that holds the turn: a run it starts (a test that runs pytest in
# a fresh environment) is part of it and must not wait for it
HOLDER = "GPUOBS_TESTS_HOLD_THE_TURN"
PLACES = {Path("/dev/shm"): ("",), Path("/tmp"): ("gpuobs-", "gpuobs_")}
PROGRAMS = ("gpuobs-synth", "gpuobs.daemon.main", "gpuobsd")


def _entries() -> set[Path]:
    found: set[Path] = set()
    for place, prefixes in PLACES.items():
        try:
            found.update(p for p in place.iterdir() if p.name.startswith(prefixes))
        except OSError:
            continue
    return found


MARK = f"{HOLDER}=1".encode()


def _processes() -> dict[int, str]:
    """gpuobs processes of this machine started under a test run's turn: pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace")
            if not any(program in command for program in PROGRAMS):
                continue
            marked = MARK in (entry / "environ").read_bytes().split(b"\x00")
        except OSError:  # gone, or another user's: not this run's
            continue
        if marked:
            out[int(entry.name)] = command.strip()
    return out


def snapshot() -> dict:
    return {"entries": _entries(), "processes": set(_processes())}


def left_since(before: dict) -> list[str]:
    """What is new since `before`, after it was removed or killed: a line each."""
    found = []
    for pid, command in _processes().items():
        if pid in before["processes"]:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        found.append(f"process {pid} ({command[:120]})")
    for path in sorted(_entries() - before["entries"]):
        found.append(str(path))
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found


def take_turn(say: Callable[[str], None]) -> int | None:
    """Waits until no other test run of this user is under way, and holds the turn until the
    process exits (the returned descriptor; None inside a run that holds it already)."""
    if os.environ.get(HOLDER) == "1":
        return None
    path = Path("/tmp") / f".gpuobs-tests-{os.getuid()}.lock"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say(f"another gpuobs test run is under way; waiting for it ({path})")
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    os.environ[HOLDER] = "1"
    return descriptor
