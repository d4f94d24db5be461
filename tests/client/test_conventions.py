"""What a command line is expected to do (clig.dev): global flags before or after the subcommand,
--version on every program, Ctrl-C without a traceback, and a daemon that cannot be reached
named with the next step to take."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gpuobs
from gpuobs._native import LAYOUT_VERSION
from gpuobs_testing.daemon import free_port
from gpuobs_testing.synth import synth_binary
from gpuobs_testing.tls import make_tcp_access


def gpuobsctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", *args], capture_output=True, text=True, timeout=timeout
    )


def test_global_flags_work_after_the_subcommand_too(start_synth, start_daemon) -> None:
    start_synth("--mode", "counter", "--rate", "20000", "--kernels", "3")
    daemon = start_daemon()
    daemon.wait_processes(1)
    before = gpuobsctl("--address", daemon.address, "--output", "json", "kernels")
    after = gpuobsctl("kernels", "--address", daemon.address, "--output", "json")
    mixed = gpuobsctl("--output", "table", "kernels", "--address", daemon.address, "--output", "json")
    for done in (before, after, mixed):
        assert done.returncode == 0, done.stderr
        assert {k["name"] for k in json.loads(done.stdout)["kernels"]} == {
            k["name"] for k in json.loads(before.stdout)["kernels"]
        }
    table = gpuobsctl("status", "--address", daemon.address)  # not given after it: the default stays
    assert table.returncode == 0 and table.stdout.startswith("gpuobsd"), table.stdout[:200]


def test_every_program_says_its_version_and_segment_layout() -> None:
    scripts = Path(sys.executable).parent
    for program in ("gpuobsctl", "gpuobsd"):
        done = subprocess.run([str(scripts / program), "--version"], capture_output=True, text=True, timeout=60)
        assert (
            done.returncode == 0
            and done.stdout.strip() == f"{program} {gpuobs.__version__} (segment layout {LAYOUT_VERSION})"
        ), done
    done = subprocess.run([synth_binary(), "--version"], capture_output=True, text=True, timeout=60)
    assert (
        done.returncode == 0
        and done.stdout.strip() == f"gpuobs-synth {gpuobs.__version__} (segment layout {LAYOUT_VERSION})"
    ), done
    done = subprocess.run([synth_binary(), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: gpuobs-synth") and not done.stderr


def test_ctrl_c_ends_a_command_without_a_traceback(start_synth, start_daemon, tmp_path: Path) -> None:
    start_synth("--mode", "blocks", "--rate", "20000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    window = tmp_path / "window.gpuobs"
    record = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuobs.client.main",
            "--address",
            daemon.address,
            "record",
            str(window),
            "--duration",
            "60",
            "--on-daemon",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not window.exists() and time.monotonic() < deadline:  # the daemon began it: the call is in flight
        time.sleep(0.05)
    record.send_signal(signal.SIGINT)
    out, err = record.communicate(timeout=30)
    assert record.returncode == 128 + signal.SIGINT and err.strip() == "gpuobsctl: interrupted", err
    assert "Traceback" not in err


def test_ctrl_c_ends_a_tail_with_130_after_what_it_printed(start_synth, start_daemon) -> None:
    """Ctrl-C is how a tail usually ends: exit 130 (not 0, which says --count was reached), the
    events printed before it kept, no traceback."""
    start_synth("--mode", "blocks", "--rate", "20000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    tail = subprocess.Popen(
        [sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "tail"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = tail.stdout.readline()  # events flow: the stream is open
    assert first.strip(), tail.stderr.read()
    tail.send_signal(signal.SIGINT)
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 128 + signal.SIGINT and err.strip() == "gpuobsctl: interrupted", err
    assert "Traceback" not in err


def test_an_unreachable_daemon_is_named_with_the_next_step(tmp_path: Path) -> None:
    missing = gpuobsctl("--address", f"unix://{tmp_path}/none.sock", "status")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "gpuobsd is not running: no socket at" in missing.stderr and "systemctl start gpuobsd" in missing.stderr
    stale = tmp_path / "stale.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(stale))
    listener.close()  # the socket file stays, nothing listens: refused
    refused = gpuobsctl("--address", f"unix://{stale}", "status")
    assert refused.returncode == 1 and "nothing answers on" in refused.stderr, refused.stderr
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    closed = port.getsockname()[1]
    port.close()
    bare = gpuobsctl("--address", f"127.0.0.1:{closed}", "status")
    assert bare.returncode == 1 and "--tls-ca CA.pem and --token-file FILE" in bare.stderr, bare.stderr
    access = make_tcp_access(tmp_path / "tls")
    tcp = gpuobsctl("--address", f"127.0.0.1:{closed}", *access.client_flags(), "status")
    assert tcp.returncode == 1 and "--listen" in tcp.stderr, tcp.stderr
    assert not any("Traceback" in done.stderr for done in (missing, refused, bare, tcp))
    assert sorted(os.listdir(tmp_path)) == ["stale.sock", "tls"]


def test_a_runtime_directory_the_user_cannot_enter_is_named_as_such(tmp_path: Path, monkeypatch) -> None:
    """As the unit's 0750 /run/gpuobs looks to a user outside its group (seen on a clean machine:
    the socket exists but cannot be seen, which must not read as "not running")."""
    from gpuobs.client.connection import unreachable

    directory = tmp_path / "run"
    directory.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda path, mode: False if str(path) == str(directory) and mode & os.X_OK else real_access(path, mode),
    )
    said = unreachable(f"unix://{directory}/gpuobsd.sock", "connect failed")
    assert said.startswith(f"permission denied on {directory}: gpuobsd's runtime directory") and "usermod" in said


def test_injector_path_prints_the_library_a_drop_in_needs() -> None:
    done = gpuobsctl("injector-path")
    library = Path(done.stdout.strip())
    if not gpuobs.injector_library().is_file():  # a build without the CUDA toolchain
        assert done.returncode == 1 and "built without the injector" in done.stderr
        return
    assert done.returncode == 0 and library == gpuobs.injector_library() and library.is_file()
    assert library.name == "libgpuobs_injector.so"
    as_json = json.loads(gpuobsctl("injector-path", "--output", "json").stdout)
    assert as_json == {"schema_version": 1, "injector": str(library)}


def test_bash_completion_knows_every_subcommand_and_its_flags() -> None:
    done = gpuobsctl("completion", "bash")
    assert done.returncode == 0, done.stderr
    script = done.stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(("gpuobsctl",) + words)
        run = subprocess.run(
            [
                "bash",
                "-c",
                script + f"\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _gpuobsctl; "
                "printf '%s\\n' \"${COMPREPLY[@]}\"",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert complete("ker") == ["kernels"]
    assert set(complete("")) >= {"status", "set-mode", "kernels", "trace", "export-parquet", "run", "completion"}
    assert "--top" in complete("kernels", "--") and "--output" in complete("kernels", "--")
    assert complete("--output", "json", "tr") == ["trace"]  # a global flag's value is not the subcommand
    assert complete("set-mode", "--sh") == ["--shift"]


def test_the_tcp_port_serves_tls_clients_with_the_token_and_only_them(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    access = make_tcp_access(tmp_path / "tls")
    address = f"127.0.0.1:{free_port()}"
    synth = start_synth("--mode", "counter", "--rate", "20000", "--kernels", "2")
    daemon = start_daemon(*access.daemon_flags(address))
    daemon.wait_processes(1)
    done = gpuobsctl("--address", address, *access.client_flags(), "--output", "json", "status")
    assert done.returncode == 0, done.stderr
    assert [p["pid"] for p in json.loads(done.stdout)["processes"]] == [synth.pid]
    wrong = tmp_path / "wrong-token"
    wrong.write_text("x" * 40)
    refused = gpuobsctl("--address", address, "--tls-ca", str(access.cert), "--token-file", str(wrong), "status")
    assert refused.returncode == 1 and "refused the token" in refused.stderr, refused.stderr
    # in the clear, a client gets nothing through (the handshake fails)
    import grpc
    from gpuobs.api.v1 import observer_pb2 as pb
    from gpuobs.api.v1 import observer_pb2_grpc as pb_grpc

    plain = pb_grpc.ObserverStub(grpc.insecure_channel(address))
    try:
        plain.GetStatus(pb.GetStatusRequest(), timeout=5)
        raise AssertionError("a plaintext call was answered")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE
    # streams are refused without the token too
    no_token = pb_grpc.ObserverStub(
        grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=access.cert.read_bytes()))
    )
    try:
        next(no_token.StreamEvents(pb.StreamEventsRequest()))
        raise AssertionError("a stream without the token was answered")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
