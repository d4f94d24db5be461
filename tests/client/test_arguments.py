"""Issue 13, item 17: a bad number or command is a one-line reason and exit 1 (as the README says
of every failure), never a traceback from building the request; an argument of 100 kB is not
echoed back whole."""

from __future__ import annotations

import subprocess
import sys

import pytest

NOWHERE = "unix:///nonexistent/gpuobsd.sock"


def gpuobsctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuobs.client.main", "--address", NOWHERE, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, reason", [
    (["set-mode", "counter", "--shift", "99999999999"], "99999999999 is not within 0..4294967295"),
    (["set-mode", "counter", "--pid", "-5"], "-5 is not within 1..2147483647"),
    (["graphs", "--replays", "-1"], "-1 is not within"),
    (["kernels", "--top", "many"], "not a whole number"),
    (["steps", "--replay", str(1 << 64)], "is not within 0..18446744073709551615"),
    (["no-such-command"], "invalid choice"),
])
def test_bad_arguments_are_one_line_and_exit_1(args: list[str], reason: str) -> None:
    done = gpuobsctl(*args)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    (line,) = [l for l in done.stderr.splitlines() if l.startswith("gpuobsctl:")]
    assert reason in line


def test_a_huge_argument_is_not_echoed_back_whole() -> None:
    done = gpuobsctl("kernels", "--top", "9" * 100_000 + "x")
    assert done.returncode == 1 and len(done.stderr) < 4000
