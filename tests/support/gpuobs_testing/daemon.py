"""A real gpuobsd (subprocess, unprivileged temp runtime dir) for tests that need one."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.api.v1 import observer_pb2_grpc as pb_grpc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def quiet_port_base() -> int:
    """A free port below the kernel's ephemeral range, for a program that starts servers on ports
    of its own choosing one after another: a port in that range can be taken meanwhile by any
    client's outgoing connection, one below it only by another listener."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(10000, max(10001, low - 64))
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def gpuobsd_argv(runtime_dir: Path, segment_dir: Path, metrics_address: str, *extra: str) -> list[str]:
    """The command line of a gpuobsd for tests: this interpreter's package, these folders."""
    return [
        sys.executable,
        "-m",
        "gpuobs.daemon.main",
        "--runtime-dir",
        str(runtime_dir),
        "--segment-dir",
        str(segment_dir),
        "--metrics-address",
        metrics_address,
        *extra,
    ]


def run_gpuobsd(runtime_dir: Path, segment_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """A gpuobsd that is expected to end by itself (a refused setting or folder, a second daemon),
    without metrics; its output captured."""
    return subprocess.run(
        gpuobsd_argv(runtime_dir, segment_dir, "", *extra), capture_output=True, text=True, timeout=30
    )


class DaemonProcess:
    def __init__(self, runtime_dir: Path, segment_dir: Path, metrics_port: int, *extra: str) -> None:
        self.runtime_dir = runtime_dir
        self.segment_dir = segment_dir
        self.metrics_port = metrics_port
        self.address = f"unix://{runtime_dir}/gpuobsd.sock"
        runtime_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = runtime_dir.parent / f"gpuobsd-{time.monotonic_ns()}.log"
        self.log_file = open(self.log_path, "w")  # a file, not a pipe: a full pipe would block the daemon
        self.process = subprocess.Popen(
            gpuobsd_argv(
                runtime_dir,
                segment_dir,
                f"127.0.0.1:{metrics_port}",
                "--log-format",
                "json",
                "--discovery-interval-ms",
                "50",
                *extra,
            ),
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.stub = pb_grpc.ObserverStub(grpc.insecure_channel(self.address))
        deadline = time.monotonic() + 60  # a loaded 2-core machine starts Python slowly
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpuobsd exited {self.process.returncode}: {self.log()}")
            try:
                self.stub.GetStatus(pb.GetStatusRequest(), timeout=1)
                return
            except grpc.RpcError:
                time.sleep(0.05)
        self.stop(signal.SIGKILL)  # not left running behind the caller's back
        raise RuntimeError("gpuobsd did not come up")

    def log(self) -> str:
        return self.log_path.read_text()

    def status(self) -> pb.GetStatusResponse:
        return self.stub.GetStatus(pb.GetStatusRequest(), timeout=10)

    def wait_processes(self, count: int, timeout: float = 10.0) -> pb.GetStatusResponse:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if sum(p.alive for p in status.processes) >= count:
                return status
            time.sleep(0.05)
        raise AssertionError(f"daemon sees {len(self.status().processes)} processes, wanted {count}")

    def wait_all_gone(self, timeout: float = 30.0) -> pb.GetStatusResponse:
        """Waits until the daemon sees processes and has finished the final drain of every one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.processes and not any(p.alive for p in status.processes):
                return status
            time.sleep(0.05)
        raise AssertionError(f"after {timeout} s the daemon still sees a live process, or none")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def gpuobsctl(address: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs the real CLI against a daemon address and captures what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def device_stage(process: pb.Process) -> pb.StageCounts:
    return next(s for s in process.stages if s.stage == "device")


def rss_mib(pid: int) -> float:
    """A process's resident memory (what the growth checks measure)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def gpuobsd_refuses(args: list[str]) -> str:
    """Why gpuobsd would refuse these flags (its own parser and settings, in a process of its
    own), or "": a deployment's flags checked without starting a daemon."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from gpuobs.daemon.main import configured; configured(sys.argv[1:])",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if done.returncode == 0 else done.stderr.strip().splitlines()[-1]
