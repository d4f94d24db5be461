"""gpuobsctl coredump PID --yes: a GPU core dump of a process, through the driver's user-induced
core dump. The process must have been started with CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1 and a
CUDA_COREDUMP_PIPE pattern (deploy/README.md): the driver then holds a named pipe open, and
writing to it makes the driver dump every GPU context of the process. Measured on the H200:
the dump ENDS THE PROGRAM (exit 134), so this asks for --yes.

Local to the host of the process (it writes the pipe found in /proc/PID/fd and reads
/proc/PID/environ): run it as the process's user or root. It needs no daemon.
"""

from __future__ import annotations

import argparse
import os
import stat
import time
from pathlib import Path

from ..arguments import pid
from ..connection import CommandError, UsageError
from ..output import emit

NAME = "coredump"
HELP = "trigger the driver's user-induced GPU core dump of a process (ends it; needs --yes)"
EXAMPLES = """examples:
  gpuobsctl coredump 4242 --yes       # ends the process"""
TRIGGER_BYTES = 1 << 20  # the pipe reacted to 1 MiB on the H200; the driver reads and discards it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pid", type=pid)
    parser.add_argument("--yes", action="store_true", help="confirm: the dump ends the process")


def environment_of(proc: Path, pid: int) -> dict[str, str]:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except FileNotFoundError:
        raise CommandError(f"no process {pid}") from None
    except PermissionError:
        raise CommandError(f"cannot read the environment of {pid}: run as its user or root") from None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def coredump_pipe(proc: Path, pid: int, pattern: str) -> Path:
    """The named pipe the driver holds open: among the process's open files, a FIFO whose path
    has the pattern's fixed prefix (the pattern's %h, %p, %t are host, pid and time)."""
    prefix = pattern.split("%", 1)[0]
    candidates = []
    try:
        descriptors = list((proc / str(pid) / "fd").iterdir())
    except PermissionError:
        raise CommandError(f"cannot list the open files of {pid}: run as its user or root") from None
    for descriptor in descriptors:
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith(prefix) and stat.S_ISFIFO(os.stat(target).st_mode):
            candidates.append(Path(target))
    if not candidates:
        raise CommandError(
            f"process {pid} holds no pipe matching {pattern!r}: the driver has not set one up (no CUDA context yet?)"
        )
    return candidates[0]


def run(args: argparse.Namespace) -> int:
    proc = Path("/proc")
    env = environment_of(proc, args.pid)
    if env.get("CUDA_ENABLE_USER_TRIGGERED_COREDUMP") != "1":
        raise CommandError(f"process {args.pid} was not started with CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1")
    pattern = env.get("CUDA_COREDUMP_PIPE")
    if not pattern:
        raise CommandError(f"process {args.pid} has no CUDA_COREDUMP_PIPE pattern in its environment")
    pipe = coredump_pipe(proc, args.pid, pattern)
    destination = env.get(
        "CUDA_COREDUMP_FILE", "core_%t_%h_%p.nvcudmp (the driver's default, in its working directory)"
    )
    if not args.yes:
        raise UsageError(f"a GPU core dump ends process {args.pid}; run again with --yes (pipe {pipe})")
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        raise CommandError(f"cannot open {pipe}: {error.strerror}") from None
    written = 0
    chunk = b"\0" * 65536
    deadline = time.monotonic() + 10
    try:
        while written < TRIGGER_BYTES and time.monotonic() < deadline:
            try:
                written += os.write(fd, chunk[: TRIGGER_BYTES - written])
            except BlockingIOError:
                time.sleep(0.01)  # the driver reads the pipe at its own pace
            except BrokenPipeError:
                break  # the reader went away: the dump has started (or the process ended)
    finally:
        os.close(fd)
    if args.output == "json":
        emit("json", {"pid": args.pid, "pipe": str(pipe), "bytes_written": written, "dump": destination})
    else:
        print(f"wrote {written} bytes to {pipe}; the driver writes the dump to {destination}")
    return 0
