"""A hostile local user for the tests of shared places: an unprivileged uid that plants links and
directories where gpuobs writes. The tests run as root (CI does), so they can act as another
user; elsewhere they are skipped. Nothing is created that outlives a test: the user is `nobody`,
which every system has, and the shared folders are removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HOSTILE_UID = 65534  # nobody


def as_hostile(*argv: str) -> None:
    """Runs a command as the hostile user; it must succeed (the attack is set up)."""
    done = subprocess.run(
        ["setpriv", f"--reuid={HOSTILE_UID}", f"--regid={HOSTILE_UID}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def needs_root() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("the attacks need root (to act as another user) and setpriv")


def shared_folder() -> Iterator[Path]:
    """A folder like /dev/shm: root's, writable by everyone, sticky; under /tmp so that the
    hostile user can reach it. Removed afterwards."""
    needs_root()
    folder = Path(tempfile.mkdtemp(prefix="gpuobs-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def victim_file(folder: Path, name: str = "victim") -> Path:
    """A root file that nothing may write over: 0600, known content."""
    folder.mkdir(mode=0o700, exist_ok=True)
    victim = folder / name
    victim.write_text("the victim's own bytes\n")
    victim.chmod(0o600)
    return victim
