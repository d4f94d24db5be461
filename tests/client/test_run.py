"""gpuobsctl run: the embedded default, with a private daemon, on gpuobs-synth (which reads the
same GPUOBS_* variables as the injector)."""

from __future__ import annotations

import pytest

from gpuobs_testing.daemon import gpuobsctl as run_gpuobsctl
from gpuobs_testing.synth import synth_binary

NO_DAEMON = "unix:///nonexistent/gpuobsd.sock"


def gpuobsctl(*args: str):
    return run_gpuobsctl(NO_DAEMON, *args)


def test_run_starts_a_private_daemon_and_summarises(tmp_path) -> None:
    done = gpuobsctl("run", "--mode", "counter", "--", synth_binary(), "--launches", "300", "--rate", "300000",
                     "--kernels", "6")
    assert done.returncode == 0, done.stderr
    assert "gpuobs summary: 1 process(es)" in done.stderr
    assert "mode counter: 300 launches, 6 kernels" in done.stderr
    assert "accounting errors 0" in done.stderr
    rows = [line.split() for line in done.stderr.splitlines() if line[:1].isdigit()]
    assert len(rows) == 6
    assert all(row[2] == row[3] for row in rows)  # counter mode: blocks counted = geometry
    assert sum(int(row[1]) for row in rows) == 300


@pytest.mark.slow
def test_run_passes_the_exit_status_through() -> None:
    done = gpuobsctl("run", "--", "sh", "-c", "exit 3")
    assert done.returncode == 3
    assert "created no segment" in done.stderr


def test_run_without_a_command_is_a_one_line_error() -> None:
    done = gpuobsctl("run")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "nothing to run" in done.stderr
