"""Event files for the dataset tests: made without a daemon (gpuobs.recording's writer) as a
daemon on some host would write them, recorded by a real daemon from a job of gpuobs-synth
processes, and moved to another host (the trailer's host rewritten): a fleet's files, on one
machine."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gpuobs.recording import RECORDING_HEADER, RecordingWriter

from gpuobs_testing.daemon import DaemonProcess, gpuobsctl
from gpuobs_testing.synth import SynthProcess


@dataclasses.dataclass
class Job:
    daemon: DaemonProcess
    ranks: list[SynthProcess]
    eager: SynthProcess


def process_record(host: str = "host-a", **fields: object) -> dict:
    """A trailer's "process" as the daemon writes it (gpuobs.recording.process_of), no identity set."""
    return {
        "host": host,
        "pid_start_ticks": 4242,
        "process_started_realtime_ns": 1_700_000_000_000_000_000,
        "started_monotonic_ns": 5_000_000_000,
        "identity_set": False,
        "role": "unknown",
        "rank": 0,
        "world_size": 0,
        "local_rank": 0,
        "model": "",
        "label": "",
        "gpu_uuids": [],
        **fields,
    }


def write_event_file(
    path: Path,
    events: np.ndarray,
    launches: np.ndarray,
    *,
    pid: int = 7,
    process: dict | None = None,
    kernels: list[dict] | None = None,
    started_realtime_ns: int = 1_700_000_100_000_000_000,
    dropped: int = 0,
) -> Path:
    writer = RecordingWriter(path, pid, started_realtime_ns, process_record() if process is None else process)
    writer.add_events(events.tobytes(), len(events))
    writer.add_launches(launches.tobytes(), len(launches))
    return writer.finish(kernels or [{"slot": 0, "demangled": "k", "mangled": "_Z1kv"}], dropped=dropped)


def replace_trailer(path: Path, trailer: bytes) -> None:
    """The file with its trailer (kernel table and process) replaced by these bytes."""
    data = bytearray(path.read_bytes())
    header = np.frombuffer(bytes(data[: RECORDING_HEADER.itemsize]), dtype=RECORDING_HEADER).copy()
    body_end = len(data) - int(header["trailer_bytes"][0])
    header["trailer_bytes"] = len(trailer)
    data[: RECORDING_HEADER.itemsize] = header.tobytes()
    path.write_bytes(bytes(data[:body_end]) + trailer)


def moved_to_host(source: Path, target: Path, host: str) -> Path:
    """A copy of an event file as if recorded on another host (the same process numbers)."""
    target.write_bytes(source.read_bytes())
    data = source.read_bytes()
    header = np.frombuffer(data[: RECORDING_HEADER.itemsize], dtype=RECORDING_HEADER)[0]
    trailer = json.loads(data[len(data) - int(header["trailer_bytes"]) :])
    trailer["process"]["host"] = host
    replace_trailer(target, json.dumps(trailer).encode())
    return target


def start_job(start_synth: Callable[..., SynthProcess], start_daemon: Callable[..., DaemonProcess]) -> Job:
    """A daemon watching two ranks of a job (graph replays, engine steps; model "llama", world
    size 2) and an eager process with ops (the launch trace on, no identity)."""
    daemon = start_daemon()
    paced = ["--mode", "blocks", "--rate", "20000", "--duration", "30"]
    graphs = [*paced, "--graph-nodes", "3", "--steps", "--kernels", "3", "--world-size", "2", "--model", "llama"]
    ranks = [start_synth(*graphs, "--rank", str(rank)) for rank in (0, 1)]
    eager = start_synth(*paced, "--kernels", "4", "--launch-trace", "--ops", "3")
    daemon.wait_processes(3)
    time.sleep(0.5)
    return Job(daemon, ranks, eager)


def record_job(job: Job, folder: Path, events: int = 20000) -> list[Path]:
    """`gpuobsctl record` of every process of the job: its event files."""
    done = gpuobsctl(
        job.daemon.address,
        "--output",
        "json",
        "record",
        str(folder / "run.gpuobs"),
        "--count",
        str(events),
        "--duration",
        "20",
    )
    assert done.returncode == 0, done.stderr
    return [Path(f["path"]) for f in json.loads(done.stdout)["files"]]
