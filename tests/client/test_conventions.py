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


def answer(line: str, shell: str = "bash") -> str:
    """What gpuobsctl answers a shell asking for the completions of `line` (argcomplete's protocol:
    the code `gpuobsctl completion SHELL` prints runs gpuobsctl with these variables)."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpuobsctl-complete-{os.getpid()}"
    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_SHELL=shell, COMP_LINE=line, COMP_POINT=str(len(line)))
    env["_ARGCOMPLETE_STDOUT_FILENAME"] = str(out)
    if shell != "bash":  # as the zsh and fish code set them
        env["_ARGCOMPLETE_SUPPRESS_SPACE"] = "1"
    if shell == "fish":
        env.update(_ARGCOMPLETE_DFS="\t", _ARGCOMPLETE_IFS="\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpuobs.client.main"], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return out.read_text()
    finally:
        out.unlink(missing_ok=True)


def complete(line: str, shell: str = "bash") -> list[str]:
    """The words alone: bash gets them bare; zsh each with its help after a colon, fish after a tab."""
    words = answer(line, shell).split("\v" if shell != "fish" else "\n")
    return [word.split("\t" if shell == "fish" else ":")[0].strip() for word in words if word]


def test_completion_knows_every_subcommand_flag_and_choice_in_bash_zsh_and_fish() -> None:
    for shell in ("bash", "zsh", "fish"):
        code = gpuobsctl("completion", shell)
        assert code.returncode == 0 and "gpuobsctl" in code.stdout, code.stderr
    assert complete("gpuobsctl ker") == ["kernels"]
    assert set(complete("gpuobsctl ")) >= {"status", "set-mode", "kernels", "trace", "run", "completion", "steps"}
    assert {"--top", "--output", "--wide"} <= set(complete("gpuobsctl kernels --"))
    assert complete("gpuobsctl --output json tr") == ["trace"]  # a global flag's value is not the subcommand
    assert complete("gpuobsctl set-mode --sh") == ["--shift"]
    assert set(complete("gpuobsctl set-mode ")) >= {"off", "counter", "blocks", "sampled"}  # the modes
    assert complete("gpuobsctl completion f", shell="fish") == ["fish"]
    assert "kernels" in complete("gpuobsctl k", shell="zsh")
    # zsh and fish show each word's help beside it
    assert "kernels:per-kernel launches" in answer("gpuobsctl k", shell="zsh")
    assert "--top\tmost launched first" in answer("gpuobsctl kernels --to", shell="fish")


def test_bash_runs_the_completion_code_against_the_installed_gpuobsctl() -> None:
    """The code as a user sources it: bash's completion function calls gpuobsctl on PATH."""
    code = gpuobsctl("completion", "bash").stdout
    script = code + (
        "\nCOMP_LINE='gpuobsctl steps --la'; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(gpuobsctl steps --la); "
        "COMP_CWORD=2; COMP_TYPE=9; complete=$(complete -p gpuobsctl); function=${complete##*-F }; "
        "${function%% *} gpuobsctl; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["--last"], (done.stdout, done.stderr)


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


def test_every_subcommand_has_a_description_and_examples_that_parse() -> None:
    """Each example in a subcommand's --help is a command line its parser takes as written."""
    import argparse
    import shlex

    from gpuobs.client.commands import COMMANDS
    from gpuobs.client.main import build_parser

    parser = build_parser()
    for command in COMMANDS:
        shown = gpuobsctl(command.NAME, "--help")
        assert shown.returncode == 0 and command.HELP.split(" (")[0] in " ".join(shown.stdout.split()), command.NAME
        assert "examples:" in shown.stdout, command.NAME
        for line in command.EXAMPLES.splitlines()[1:]:
            words = shlex.split(line.split(" #")[0].split(" |")[0].split(" >")[0], comments=False)
            words = [w for w in words if not w.startswith("$(")]
            assert words[0] in ("gpuobsctl", "export", "source"), line
            if words[0] == "gpuobsctl":
                try:
                    parser.parse_args(words[1:])
                except SystemExit:
                    raise AssertionError(f"{command.NAME}: the example does not parse: {line}") from None
    assert isinstance(parser, argparse.ArgumentParser)


def test_names_are_whole_when_piped_or_wide_and_cut_on_a_terminal(start_synth, start_daemon) -> None:
    """A name cut to its column would not match a grep of the whole name: only a terminal gets it cut."""
    import pty

    synth = start_synth("--mode", "counter", "--rate", "20000", "--kernels", "8", "--launches", "200")
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone()
    names = [
        k["name"]
        for k in json.loads(gpuobsctl("--address", daemon.address, "--output", "json", "kernels").stdout)["kernels"]
    ]
    longest = max(names, key=len)
    assert len(longest) > 60
    piped = gpuobsctl("--address", daemon.address, "kernels")
    assert piped.returncode == 0 and longest in piped.stdout
    primary, secondary = pty.openpty()
    try:
        for flags, whole in (([], False), (["--wide"], True)):
            on_terminal = subprocess.run(
                [sys.executable, "-m", "gpuobs.client.main", "--address", daemon.address, "kernels", *flags],
                stdout=secondary,
                stderr=subprocess.PIPE,
                timeout=60,
            )
            assert on_terminal.returncode == 0, on_terminal.stderr
            text = b""
            while True:
                import select

                ready, _, _ = select.select([primary], [], [], 0.5)
                if not ready:
                    break
                text += os.read(primary, 65536)
            shown = text.decode().replace("\r\n", "\n")
            assert (longest in shown) is whole, (flags, shown[-500:])
            if not whole:
                assert longest[:57] + "..." in shown
    finally:
        os.close(primary)
        os.close(secondary)


def test_ctrl_c_while_gpuobsctl_starts_is_130_without_a_traceback() -> None:
    """SIGINT while the entry point imports gRPC and protobuf (the first few hundred milliseconds)."""
    script = Path(sys.executable).parent / "gpuobsctl"
    for delay in (0.05, 0.15, 0.3):
        started = subprocess.Popen(
            [str(script), "--address", "unix:///nonexistent/gpuobsd.sock", "status"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        started.send_signal(signal.SIGINT)
        _, stderr = started.communicate(timeout=30)
        assert "Traceback" not in stderr, (delay, stderr)
        # before Python's own handler is in place the signal ends it as a signal does; after, 130
        assert started.returncode in (130, -signal.SIGINT, 1), (delay, started.returncode, stderr)


def test_status_tells_observed_from_exited_and_says_an_idle_injector_once(start_synth, start_daemon) -> None:
    first = start_synth("--mode", "counter", "--rate", "20000", "--kernels", "2", "--launches", "50")
    second = start_synth("--mode", "counter", "--rate", "20000", "--kernels", "2", "--launches", "50")
    daemon = start_daemon("--exited-retention-s", "600")
    assert first.wait() == 0 and second.wait() == 0
    daemon.wait_all_gone()
    shown = gpuobsctl("--address", daemon.address, "status")
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[0]
    assert header.endswith("0 process(es) observed, 2 exited"), header
    assert " up " in header and header.split(" up ")[1].split(",")[0][-1] in "smhd"  # a unit, not bare seconds
    idle = [line for line in shown.stdout.splitlines() if "no CUDA module loaded" in line]
    assert len(idle) <= 1 and not [line for line in shown.stdout.splitlines() if "modules 0 loaded" in line]


def test_long_durations_read_in_their_two_largest_units() -> None:
    from gpuobs.client.output import uptime

    assert [uptime(s) for s in (0, 45, 723, 7500, 3 * 86400 + 4 * 3600 + 59)] == [
        "0s",
        "45s",
        "12m 3s",
        "2h 5m",
        "3d 4h",
    ]
