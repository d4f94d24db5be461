"""gpuobsctl run [--mode M] [--shift N] [--patch-set S] -- CMD ...

The embedded default: uses the daemon at --address when one answers, else starts a private
gpuobsd in a temporary directory; runs CMD with the injector set (CUDA_INJECTION64_PATH and the
GPUOBS_* settings), and prints what its processes did when it exits: kernels, blocks, events
and drops. Exits with CMD's exit status (128 + N when a signal N ended it). Where no CUDA
program can be observed (no driver, no GPU) it says so and runs nothing, except gpuobs-synth.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpuobs
import grpc
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import ACCESS_MODES, MODES, PATCH_SETS

from ..arguments import sample_shift, uint32
from ..connection import CommandError, UsageError, stub
from ..output import emit, fit, message_dict, table

NAME = "run"
HELP = "run a command under the injector and summarise its kernels at exit"
EXAMPLES = """examples:
  gpuobsctl run -- python train.py
  gpuobsctl run --mode sampled --shift 8 -- python bench.py
  gpuobsctl run -- gpuobs-synth --duration 5     # without a GPU: simulated kernels"""
INJECTOR = gpuobs.injector_library()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", default="counter", choices=list(MODES), help="initial mode (default counter)")
    parser.add_argument("--shift", type=sample_shift, default=10, help="sample shift for sampled (default 10)")
    parser.add_argument(
        "--patch-set",
        choices=list(PATCH_SETS),
        help="default: block, or memory for --mode memory without --memory-kernels",
    )
    parser.add_argument(
        "--memory-kernels",
        metavar="REGEX",
        default="",
        help="in the block set, give the memory access hooks to the modules holding a kernel "
        "whose name matches (GPUOBS_MEMORY_KERNELS)",
    )
    parser.add_argument("--top", type=uint32, default=15, help="kernels in the summary")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def default_patch_set(mode: str, memory_kernels: str) -> str:
    """The block set, unless the mode records nothing but accesses and no kernel is chosen for them."""
    return "memory" if mode in ACCESS_MODES and not memory_kernels else "block"


def reachable(address: str) -> pb.GetStatusResponse | None:
    try:
        return stub(address).GetStatus(pb.GetStatusRequest(), timeout=1)
    except grpc.RpcError:
        return None


def segment_directory(work: Path) -> Path:
    """The segments must live on a tmpfs: CUDA pins the segment (cuMemHostRegister), which fails
    with "invalid argument" for a file on a disk file system such as the /tmp of many hosts."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="gpuobs-run-segments-", dir=shm))
    directory = work / "segments"
    directory.mkdir()
    return directory


def start_private_daemon(work: Path, segments: Path) -> tuple[subprocess.Popen, str, pb.GetStatusResponse]:
    """A gpuobsd of this run's own, once it answers: the process, its address and its first status."""
    log = open(work / "gpuobsd.log", "w")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuobs.daemon.main",
            "--runtime-dir",
            str(work / "run"),
            "--segment-dir",
            str(segments),
            "--metrics-address",
            "",
            "--discovery-interval-ms",
            "50",
            "--log-format",
            "json",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    address = f"unix://{work}/run/gpuobsd.sock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise CommandError(f"the private gpuobsd exited: {(work / 'gpuobsd.log').read_text()[-500:]}")
        status = reachable(address)
        if status is not None:
            return daemon, address, status
        time.sleep(0.05)
    daemon.kill()
    raise CommandError("the private gpuobsd did not come up")


# Asked in a process of its own, without the injector in its environment: cuInit in gpuobsctl
# itself would load an injector the caller had exported into it.
DRIVER_PROBE = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    sys.exit(f"no NVIDIA driver here (libcuda.so.1: {error})")
status = cuda.cuInit(0)
if status:
    sys.exit(f"the NVIDIA driver does not start (cuInit: CUDA error {status})")
count = ctypes.c_int(0)
if cuda.cuDeviceGetCount(ctypes.byref(count)) or count.value == 0:
    sys.exit("no GPU is visible (CUDA_VISIBLE_DEVICES?)")
"""
SYNTH = "gpuobs-synth"  # the simulated producer: writes its segment without a GPU


def no_gpu_reason() -> str | None:
    """Why no CUDA program would be observed here (no driver, no GPU), or None."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    try:
        probe = subprocess.run(
            [sys.executable, "-c", DRIVER_PROBE], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "the NVIDIA driver did not answer within 60 s"
    return probe.stderr.strip().splitlines()[-1] if probe.returncode else None


def exit_status(returncode: int) -> int:
    """A child's status as a shell gives it: its code, or 128 + the signal that ended it."""
    return 128 - returncode if returncode < 0 else returncode


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("nothing to run: gpuobsctl run [options] -- CMD ...")
    if not INJECTOR.exists():
        raise CommandError(f"{INJECTOR} is missing: this gpuobs was built without the injector")
    if os.path.basename(command[0]) != SYNTH:
        reason = no_gpu_reason()
        if reason:
            raise CommandError(
                f"{reason}: nothing would be observed, so {command[0]} was not run "
                f"(without a GPU, `gpuobsctl run -- {SYNTH} --duration 5` shows gpuobs on "
                f"simulated kernels)"
            )
    work = Path(tempfile.mkdtemp(prefix="gpuobs-run-"))
    segments: Path | None = None
    daemon = None
    try:
        status = reachable(args.address)
        address = args.address
        if status is None:
            segments = segment_directory(work)
            daemon, address, status = start_private_daemon(work, segments)
        env = dict(os.environ)
        env.update(
            {
                "CUDA_INJECTION64_PATH": str(INJECTOR),
                "GPUOBS_SEGMENT_DIR": status.segment_dir,
                "GPUOBS_MODE": args.mode,
                "GPUOBS_SHIFT": str(args.shift),
                "GPUOBS_PATCH_SET": args.patch_set or default_patch_set(args.mode, args.memory_kernels),
            }
        )
        if args.memory_kernels:
            env["GPUOBS_MEMORY_KERNELS"] = args.memory_kernels
        # Ctrl-C reaches the command from the terminal: gpuobsctl waits for it to end, then
        # summarises, and exits as it did
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            try:
                child = subprocess.Popen(command, env=env)
            except OSError as error:
                raise CommandError(f"cannot run {command[0]}: {error}") from None
            returncode = child.wait()
        finally:
            signal.signal(signal.SIGINT, interrupt)
        summarise(address, child.pid, private=daemon is not None, top=args.top, as_json=args.output == "json")
        return exit_status(returncode)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)
        if segments is not None:
            shutil.rmtree(segments, ignore_errors=True)


def summarise(address: str, child_pid: int, *, private: bool, top: int, as_json: bool = False) -> None:
    """Waits for the daemon's final drain of the command's processes, then prints them to stderr
    (stdout is the command's): a table, or with --output json one JSON document."""
    observer = stub(address)
    deadline = time.monotonic() + 10
    mine: list[pb.Process] = []
    while time.monotonic() < deadline:
        processes = observer.GetStatus(pb.GetStatusRequest(), timeout=5).processes
        mine = [p for p in processes if private or p.pid == child_pid]
        if mine and not any(p.alive for p in mine):
            break
        time.sleep(0.05)
    if not mine:
        print("gpuobs: the command created no segment (no CUDA context, or injection disabled)", file=sys.stderr)
        return
    pids = [p.pid for p in mine]
    kernels = observer.ListKernels(pb.ListKernelsRequest(pids=pids, top=top), timeout=5).kernels
    if as_json:
        summary = {"processes": [message_dict(p) for p in mine], "kernels": [message_dict(k) for k in kernels]}
        emit("json", summary, to=sys.stderr)
        return
    print(f"\ngpuobs summary: {len(mine)} process(es) {', '.join(map(str, pids))}", file=sys.stderr)
    for process in mine:
        stages = ", ".join(
            f"{s.stage}: {s.produced} produced, {s.delivered} delivered, {s.dropped} dropped"
            + (f", {s.unpublished} beyond the last published count" if s.unpublished else "")
            for s in process.stages
        )
        print(
            f"pid {process.pid} mode {process.mode}: {process.launches} launches, {process.kernels} kernels; "
            f"{stages}; accounting errors {process.accounting_errors}",
            file=sys.stderr,
        )
    rows = [
        {
            "pid": k.pid,
            "launches": k.launches,
            "blocks": k.blocks_observed,
            "expected": k.blocks_expected,
            "events": k.events_delivered,
            "dropped": k.events_dropped,
            "name": fit(k.name, 70),
        }
        for k in kernels
    ]
    stdout = sys.stdout
    sys.stdout = sys.stderr  # the summary goes beside the command's own output, not into it
    try:
        table(
            [
                ("pid", "PID"),
                ("launches", "LAUNCHES"),
                ("blocks", "BLOCKS"),
                ("expected", "EXPECTED"),
                ("events", "EVENTS"),
                ("dropped", "DROPPED"),
                ("name", "KERNEL"),
            ],
            rows,
        )
    finally:
        sys.stdout = stdout
