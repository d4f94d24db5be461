"""gpuobsd's settings: a value from the settings file goes through the parser a
flag goes through, so it meets the same checks; a bad value is refused naming the setting; the
daemon refuses a segment directory that does not exist, survives a stale NOTIFY_SOCKET and names
the address it could not serve metrics on."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from gpuobs.daemon import settings
from gpuobs_testing.daemon import DaemonProcess, free_port


def resolve(tmp_path: Path, toml: str = "", environ: dict[str, str] | None = None, **flags: str) -> settings.Config:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    argv = []
    if toml:
        (tmp_path / "gpuobsd.toml").write_text(toml)
        argv += ["--config", str(tmp_path / "gpuobsd.toml")]
    for name, value in flags.items():
        argv += ["--" + name.replace("_", "-"), value]
    return settings.resolve(parser.parse_args(argv), environ or {})


@pytest.mark.parametrize(
    "toml, named",
    [
        ("analysis_share = 5.0", "analysis_share"),
        ("drain_interval_ms = -3", "drain_interval_ms"),
        ("discovery_interval_ms = 0", "discovery_interval_ms"),
        ('log_format = "xml"', "log_format"),
        ('owners = "abc"', "owners"),
        ('metrics_address = "localhost"', "metrics_address"),
        ("exited_retention_s = -1", "exited_retention_s"),
        ("[section]\nx = 1", "section"),
        ("analysis_share = ", "gpuobsd.toml"),
    ],
)
def test_file_values_meet_the_checks_flags_meet(tmp_path: Path, toml: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        resolve(tmp_path, toml)


def test_good_file_values_are_taken_with_their_types(tmp_path: Path) -> None:
    config = resolve(
        tmp_path, 'exited_retention_s = 60\nanalysis_share = 0.5\ndrain_interval_ms = 7\nowners = "0,1000"'
    )
    assert (config.exited_retention_s, config.analysis_share, config.drain_interval_ms) == (60, 0.5, 7)
    assert config.owner_uids == [0, 1000]


def test_environment_and_flags_are_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="GPUOBS_OWNERS"):
        resolve(tmp_path, environ={"GPUOBS_OWNERS": "abc"})
    with pytest.raises(ValueError, match="--torn-timeout-ms"):
        resolve(tmp_path, torn_timeout_ms="0")


def run_daemon(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuobs.daemon.main", "--runtime-dir", str(tmp_path / "run"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_a_missing_segment_directory_is_refused(tmp_path: Path) -> None:
    done = run_daemon(tmp_path, "--segment-dir", str(tmp_path / "absent"), "--metrics-address", "")
    assert done.returncode == 2 and "segment directory" in done.stderr and "absent" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_metrics_port_is_named(tmp_path: Path, segment_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_daemon(tmp_path, "--segment-dir", str(segment_dir), "--metrics-address", f"127.0.0.1:{port}")
    assert done.returncode == 1 and f"127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_a_taken_listen_port_is_named(tmp_path: Path, segment_dir: Path) -> None:
    from gpuobs_testing.tls import make_tcp_access

    access = make_tcp_access(tmp_path / "tls")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_daemon(
            tmp_path,
            "--segment-dir",
            str(segment_dir),
            "--metrics-address",
            "",
            *access.daemon_flags(f"127.0.0.1:{port}"),
        )
    assert done.returncode == 1 and f"127.0.0.1:{port} (--listen)" in done.stderr and "Traceback" not in done.stderr


def test_a_listen_port_without_tls_and_a_token_is_refused(tmp_path: Path, segment_dir: Path) -> None:
    """A TCP port is reachable by others: the daemon will not serve one in the clear, nor with a
    token too short to guess hard."""
    from gpuobs_testing.tls import make_tcp_access

    access = make_tcp_access(tmp_path / "tls")
    done = run_daemon(
        tmp_path,
        "--segment-dir",
        str(segment_dir),
        "--metrics-address",
        "",
        "--listen",
        "127.0.0.1:1",
        "--tls-cert",
        str(access.cert),
    )
    assert done.returncode == 2 and "--listen needs --tls-key, --token-file" in done.stderr, done.stderr
    short = tmp_path / "short-token"
    short.write_text("guessable\n")
    done = run_daemon(
        tmp_path,
        "--segment-dir",
        str(segment_dir),
        "--metrics-address",
        "",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--tls-cert",
        str(access.cert),
        "--tls-key",
        str(access.key),
        "--token-file",
        str(short),
    )
    assert done.returncode == 1 and "at least 16 characters" in done.stderr and "Traceback" not in done.stderr


def test_a_stale_notify_socket_is_logged_once_and_the_daemon_serves(
    tmp_path: Path, segment_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", "")
    daemon = DaemonProcess(tmp_path / "run", segment_dir, free_port())
    try:
        assert daemon.status() is not None
    finally:
        assert daemon.stop() == 0
    assert daemon.log().count("sd_notify_failed") == 1, daemon.log()[-2000:]
    assert os.environ["NOTIFY_SOCKET"].endswith("gone.sock")


def test_relative_folders_are_taken_from_where_gpuobsd_started(tmp_path, monkeypatch) -> None:
    """`--runtime-dir w/run` crashed binding its socket (unix://w/run/...): folders are made absolute."""
    from gpuobs.daemon.main import configured

    monkeypatch.chdir(tmp_path)
    config = configured(["--runtime-dir", "w/run", "--segment-dir", "w/seg"])
    assert config.runtime_dir == str(tmp_path / "w" / "run") and config.segment_dir == str(tmp_path / "w" / "seg")
