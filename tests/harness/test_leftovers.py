"""The test run's leftover check: what a run started is named and killed; a gpuobs process that
someone started beside the run (without the run's mark in its environment) is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gpuobs_testing import leftovers


@contextmanager
def pretend_daemon(marked: bool) -> Iterator[subprocess.Popen]:
    """A process whose command line names gpuobsd, as the check looks for one."""
    env = {k: v for k, v in os.environ.items() if k != leftovers.HOLDER}
    if marked:
        env[leftovers.HOLDER] = "1"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpuobsd"], env=env)
    try:
        time.sleep(0.2)  # exec'd: /proc shows its command line and environment
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_process_the_run_started_is_named_and_killed() -> None:
    before = leftovers.snapshot()
    with pretend_daemon(marked=True) as process:
        found = leftovers.left_since(before)
        assert any(line.startswith(f"process {process.pid} ") for line in found)
        assert process.wait(timeout=10) == -9


def test_a_daemon_started_by_hand_beside_the_run_is_left_alone() -> None:
    before = leftovers.snapshot()
    with pretend_daemon(marked=False) as process:
        found = leftovers.left_since(before)
        assert not any(f"process {process.pid} " in line for line in found)
        assert process.poll() is None
