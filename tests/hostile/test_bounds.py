"""Every setting of gpuobsd and every flag of gpuobs-synth is bounded: a value out of range is a
one-line error (exit 2) that names it, never a spin, a run without end or an allocation the host
cannot make; a certificate that is not one is named as such, not as a port that cannot be bound."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpuobs_testing.daemon import free_port, gpuobsd_refuses
from gpuobs_testing.synth import synth_binary


@pytest.mark.parametrize(
    "args, named",
    [
        (["--owners", "99999999999999999999"], "GPUOBS_OWNERS|--owners"),
        (["--owners", ",".join(str(uid) for uid in range(100))], "--owners"),
        (["--drain-interval-ms", str(10**9)], "--drain-interval-ms"),
        (["--discovery-interval-ms", str(10**12)], "--discovery-interval-ms"),
        (["--exited-max", str(10**9)], "--exited-max"),
        (["--kernel-label-limit", str(10**9)], "--kernel-label-limit"),
        (["--hang-threshold-ms", str(10**15)], "--hang-threshold-ms"),
        (["--runtime-dir", "/tmp/" + "r" * 120], "--runtime-dir"),
    ],
)
def test_gpuobsd_refuses_settings_out_of_bounds_in_one_line(args: list[str], named: str) -> None:
    reason = gpuobsd_refuses(args)
    assert reason and any(name in reason for name in named.split("|")), reason
    assert "Traceback" not in reason


def test_a_socket_path_too_long_is_a_usage_error_before_anything_starts(tmp_path: Path) -> None:
    runtime = tmp_path / ("r" * 120)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuobs.daemon.main",
            "--runtime-dir",
            str(runtime),
            "--segment-dir",
            str(tmp_path),
            "--metrics-address",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "more than a unix socket takes" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not runtime.exists()


def test_a_certificate_that_is_not_one_is_named(tmp_path: Path) -> None:
    from gpuobs_testing.tls import make_tcp_access

    access = make_tcp_access(tmp_path / "tls")
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuobs.daemon.main",
            "--runtime-dir",
            str(tmp_path / "run"),
            "--segment-dir",
            str(tmp_path),
            "--metrics-address",
            "",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--tls-cert",
            str(bad),
            "--tls-key",
            str(access.key),
            "--token-file",
            str(access.token_file),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "not a PEM certificate" in done.stderr and str(bad) in done.stderr, done.stderr
    assert "cannot listen" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args, named",
    [
        (["--kernels", "99999999"], "--kernels"),
        (["--kernels", str((1 << 19) + 1)], "--kernels"),
        (["--kernels", "99999999999"], "--kernels"),
        (["--duration", "-1"], "--duration"),
        (["--duration", "nan"], "--duration"),
        (["--duration", "inf"], "--duration"),
        (["--shift", str(2**32 + 3)], "--shift"),
        (["--publish-us", "0"], "--publish-us"),
        (["--control-poll-us", "0"], "--control-poll-us"),
        (["--contexts", "100000"], "--contexts"),
        (["--hang-seconds", str(10**12)], "--hang-seconds"),
        (["--device-lag", str(10**12)], "--device-lag"),
        (["--graph-nodes", str(10**9)], "--graph-nodes"),
    ],
)
def test_gpuobs_synth_refuses_flags_out_of_bounds_at_once(tmp_path: Path, args: list[str], named: str) -> None:
    done = subprocess.run(
        [synth_binary(), "--segment-dir", str(tmp_path), *args], capture_output=True, text=True, timeout=10
    )  # at once: a flag it took would have it run on
    assert done.returncode == 2 and named in done.stderr.splitlines()[0], done.stderr
    assert list(tmp_path.iterdir()) == []
