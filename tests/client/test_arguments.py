"""A bad number, duration or command is a usage error: a one-line reason and exit 2 before any
call, never a traceback from building the request; an argument of 100 kB is not echoed back
whole."""

from __future__ import annotations

import subprocess
import sys

import pytest

NOWHERE = "unix:///nonexistent/gpuobsd.sock"


def gpuobsctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "--address", NOWHERE, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args, reason",
    [
        (["set-mode", "counter", "--shift", "99999999999"], "99999999999 is not within 0..31"),
        (["set-mode", "sampled", "--shift", "32"], "32 is not within 0..31"),
        (["set-mode", "counter", "--pid", "-5"], "-5 is not within 1..2147483647"),
        (["graphs", "--replays", "-1"], "-1 is not within"),
        (["kernels", "--top", "many"], "not a whole number"),
        (["steps", "--replay", str(1 << 64)], "is not within 0..18446744073709551615"),
        (["no-such-command"], "invalid choice"),
        (["set-mode", "off", "--timeout", "-1"], "-1 is not within (0, 60] seconds"),
        (["ops", "--record-steps", "2", "--timeout", "soon"], "not a duration (500ms, 30s, 2m, 1h)"),
        (["ops", "--record-steps", "2", "--timeout", "0.0001"], "at least 0.001"),
        (["set-mode", "off", "--timeout", "2m"], "120 is not within (0, 60] seconds"),
        (["trace", "--duration", "2h"], "7200 is not within 0.001..3600 seconds"),
        (["trace", "--duration", "5 minutes"], "not a duration"),
        (["completion", "bash", "--output", "json"], "completion has no JSON output"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], reason: str) -> None:
    """Usage errors, found before any call (no daemon runs here): exit 2, one line."""
    done = gpuobsctl(*args)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    (line,) = [text for text in done.stderr.splitlines() if text.startswith("gpuobsctl:")]
    assert reason in line


@pytest.mark.parametrize(
    "args", [[b"set-mode", b"off", b"--kernel", b"\xff\xfe"], [b"record", b"/tmp/\xff.gpuobs", b"--count", b"5"]]
)
def test_an_argument_that_is_not_utf8_is_refused_by_name(args: list[bytes]) -> None:
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"gpuobs.client.main", b"--address", NOWHERE.encode(), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr  # a usage error
    assert "not valid UTF-8" in done.stderr


def test_a_huge_argument_is_not_echoed_back_whole() -> None:
    done = gpuobsctl("kernels", "--top", "9" * 100_000 + "x")
    assert done.returncode == 2 and len(done.stderr) < 4000


@pytest.mark.slow
def test_a_reply_over_four_mebibytes_arrives(start_synth, start_daemon) -> None:
    """Every kernel of a process with tens of thousands of them."""
    import json

    synth = start_synth("--mode", "counter", "--kernels", "40000", "--launches", "100", timeout=60)
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuobs.client.main",
            "--address",
            daemon.address,
            "--output",
            "json",
            "kernels",
            "--top",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert len(json.loads(done.stdout)["kernels"]) == 40000  # ~10 MB of protobuf: over gRPC's default 4 MiB
    # `gpuobsctl kernels | head`: the reader leaves early; no traceback, exit 0
    reader = subprocess.Popen(
        [sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "kernels", "--top", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.read(200)
    reader.stdout.close()
    assert reader.wait(timeout=120) == 0
    assert b"Traceback" not in reader.stderr.read()


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["stauts"], "did you mean 'status'?"),
        (["kernles"], "did you mean 'kernels'?"),
        (["set-mode", "countr"], "did you mean 'counter'?"),
        (["set-mode", "fast"], "invalid choice: 'fast'"),  # nothing near: no guess, still refused locally
        (["--output", "jsno", "status"], "did you mean 'json'?"),
    ],
)
def test_a_mistyped_subcommand_or_mode_is_refused_locally_with_the_nearest(args: list[str], suggestion: str) -> None:
    done = gpuobsctl(*args)  # no daemon: a usage error is found before any call
    assert done.returncode == 2 and "not running" not in done.stderr, done
    (line,) = [text for text in done.stderr.splitlines() if text.startswith("gpuobsctl:")]
    assert suggestion in line, line
    if "fast" in args:
        assert "did you mean" not in line


@pytest.mark.parametrize(
    "args, reason",
    [
        (["source", "--pid", "1", "--top", "0"], "--top must be positive"),
        (["source", "--pid", "1", "--top", "5", "--kernel", "("], "bad --kernel regex"),
        (["source"], "give --cubin FILE OFFSET, or --pid PID PC, or --pid PID --top N"),
        (["source", "--pid", "1", "pc?"], "PC 'pc?' is not a number"),
        (["query", "dataset"], "give either SQL or --canonical NAME"),
        (["ops", "--rank", "0"], "--rank and --gpu select where --record-steps opens a window"),
        (["run"], "nothing to run"),
    ],
)
def test_usage_a_command_checks_itself_is_exit_2_before_any_call(args: list[str], reason: str) -> None:
    """Arguments argparse cannot judge alone, judged by the command before it calls anything
    (no daemon here: a call would fail with 1 and another message)."""
    done = gpuobsctl(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done
    lines = done.stderr.strip().splitlines()
    usage, reason_line = lines[0], lines[-1]
    assert usage.startswith(f"usage: gpuobsctl {args[0]}") and reason_line.startswith(f"gpuobsctl: {reason}"), (
        done.stderr
    )


def test_durations_take_their_units() -> None:
    from gpuobs.client.arguments import record_seconds, window_seconds

    assert [window_seconds(text) for text in ("500ms", "30s", "2m", "1h", "1.5", ".25s")] == [
        0.5,
        30.0,
        120.0,
        3600.0,
        1.5,
        0.25,
    ]
    assert record_seconds("0") == 0.0 and record_seconds("0s") == 0.0  # until --count
