"""Event files: what `gpuobsctl record` writes, readable without the daemon.

Layout (little endian), one file per process:

    offset 0     64-byte header (RECORDING_HEADER below)
    offset 64    event_count x 64-byte events   (gpuobs.segment.EVENT_DTYPE)
    then         launch_count x 128-byte launch records (gpuobs.segment.LAUNCH_DTYPE)
    then         the trailer, UTF-8 JSON (`trailer_bytes` of the header):
                 format 2: {"kernels": [{"slot", "name", "mangled"}, ...], "process": {...}}
                 format 1: the kernel list alone

The trailer's "process" says where and what the recorded process was, as the daemon knew it when
the recording began (PROCESS_FIELDS): the host, the process's start (its segment's name: pid and
start ticks), its identity as the framework plugin set it (model, rank, world size...), and the
daemon's CLOCK_MONOTONIC at the instant of `started_realtime_ns` (a host clock pair). A format 1
file says none of it; it is still read (the trace export needs nothing of it).

The launch records begin with what the daemon writes when the recording begins
(gpuobs.op_labels.recording_prelude): op records with their labels, of the last ops it read (an
op open then may launch in the recording) and of the graph nodes' ops, then one graph node record
(replay 0, host time 0) per node grid id it had learned. A replay not recorded node by node has no
node records of its own, and its nodes' events are told from eager launches' by their grid ids
(gpuobs.launch_key). A node whose op the daemon knows (captured under an op the plugin recorded)
names it in its record's `op`, numbered from gpuobs.op_labels.RECORDING_OP_BASE up.

Reading: `Recording.open(path)` gives numpy arrays (`events`, `launches`) and the kernel names.
Device times (`globaltimer_ns`) and host times (`host_time_ns`, CLOCK_MONOTONIC) are separate
clocks and are never mixed here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import numpy as np

from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE

MAGIC = b"GPUOBSRC"
VERSION = 2  # what this writer writes
VERSIONS = (1, 2)  # what the reader reads
RECORDING_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("event_bytes", "<u4"),
        ("pid", "<u4"),
        ("launch_bytes", "<u4"),
        ("event_count", "<u8"),
        ("launch_count", "<u8"),
        ("trailer_bytes", "<u8"),
        ("started_realtime_ns", "<u8"),
        ("dropped", "<u8"),
    ]
)
HEADER_BYTES = 64
assert RECORDING_HEADER.itemsize <= HEADER_BYTES


class RecordingError(ValueError):
    """Not a gpuobs event file, or a damaged one."""


# The trailer's "process": each key with the type its value must have (a reader trusts them).
PROCESS_FIELDS: dict[str, type] = {
    "host": str,  # the host name of the daemon that recorded (the process's host)
    "pid_start_ticks": int,  # /proc/PID/stat field 22: with the pid, names the process on its host
    "process_started_realtime_ns": int,  # CLOCK_REALTIME when the process made its segment
    "started_monotonic_ns": int,  # the daemon's CLOCK_MONOTONIC at the recording's started_realtime_ns
    "identity_set": bool,  # whether a framework plugin set what follows (else it is unknown)
    "role": str,
    "rank": int,
    "world_size": int,
    "local_rank": int,
    "model": str,
    "label": str,
    "gpu_uuids": list,  # of str: the GPUs of its contexts that its segment names
}


def process_of(header: dict, identity: dict, started_monotonic_ns: int) -> dict:
    """The trailer's "process" of a recorded process, from its segment's header and its identity
    (as daemon/identity.py reads it): what a dataset of many hosts partitions and groups by."""
    return {
        "host": socket.gethostname(),
        "pid_start_ticks": int(header.get("pid_start_ticks", 0)),
        "process_started_realtime_ns": int(header.get("start_realtime_ns", 0)),
        "started_monotonic_ns": started_monotonic_ns,
        "identity_set": bool(identity["identity_set"]),
        "role": str(identity["role"]),
        "rank": int(identity["rank"]),
        "world_size": int(identity["world_size"]),
        "local_rank": int(identity["local_rank"]),
        "model": str(identity["model"]),
        "label": str(header.get("label", "")),
        "gpu_uuids": [str(gpu.uuid) for gpu in identity["gpus"]],
    }


class RecordingWriter:
    """Streams batches to disk; the header is written last, so a crash leaves a file that
    `Recording.open` rejects rather than misreads. Launch records go to an unlinked spool file
    beside it until the end (their section follows the events'): a recording of an hour holds
    nothing in memory. `abort` removes what was written."""

    def __init__(self, path: Path, pid: int, started_realtime_ns: int, process: dict | None = None) -> None:
        self.path = Path(path)
        self.pid = pid
        self.started_realtime_ns = started_realtime_ns
        self.process = process or {}  # the trailer's "process" (PROCESS_FIELDS; {}: nothing known)
        self.events = open(self.path, "xb")  # never over a file that appeared since it was checked
        try:
            self.launches = tempfile.TemporaryFile(dir=self.path.parent)
            self.events.write(b"\0" * HEADER_BYTES)
        except BaseException:
            self.abort()
            raise
        self.event_count = 0
        self.launch_count = 0
        self.dropped = 0

    def add_events(self, payload: bytes, count: int) -> None:
        self.events.write(payload[: count * EVENT_DTYPE.itemsize])
        self.event_count += count

    def add_launches(self, payload: bytes, count: int) -> None:
        self.launches.write(payload[: count * LAUNCH_DTYPE.itemsize])
        self.launch_count += count

    def abort(self) -> None:
        """Closes and removes the file (a recording that failed leaves nothing behind)."""
        for handle in (self.events, getattr(self, "launches", None)):
            try:
                if handle is not None:
                    handle.close()
            except OSError:
                pass
        try:
            self.path.unlink()
        except OSError:
            pass

    def finish(self, kernels: list[dict], dropped: int = 0) -> Path:
        table = json.dumps(
            {
                "kernels": [{"slot": k["slot"], "name": k["demangled"], "mangled": k["mangled"]} for k in kernels],
                "process": self.process,
            }
        )
        self.launches.seek(0)
        shutil.copyfileobj(self.launches, self.events)
        self.launches.close()
        self.events.write(table.encode())
        header = np.zeros(1, dtype=RECORDING_HEADER)
        header["magic"] = MAGIC
        header["version"] = VERSION
        header["event_bytes"] = EVENT_DTYPE.itemsize
        header["launch_bytes"] = LAUNCH_DTYPE.itemsize
        header["pid"] = self.pid
        header["event_count"] = self.event_count
        header["launch_count"] = self.launch_count
        header["trailer_bytes"] = len(table.encode())
        header["started_realtime_ns"] = self.started_realtime_ns
        header["dropped"] = dropped
        self.events.seek(0)
        self.events.write(header.tobytes().ljust(HEADER_BYTES, b"\0"))
        self.events.close()
        return self.path


@dataclasses.dataclass
class Recording:
    pid: int
    events: np.ndarray
    launches: np.ndarray
    kernels: dict[int, dict]
    dropped: int
    started_realtime_ns: int
    process: dict = dataclasses.field(default_factory=dict)  # the trailer's "process" ({}: not said)
    version: int = VERSION

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Recording:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would be read until someone writes
            raise RecordingError(f"{path}: not a regular file")
        data = Path(path).read_bytes()
        if len(data) < HEADER_BYTES:
            raise RecordingError(f"{path}: {len(data)} bytes, shorter than the header")
        header = np.frombuffer(data[: RECORDING_HEADER.itemsize], dtype=RECORDING_HEADER)[0]
        if header["magic"] != MAGIC:
            raise RecordingError(f"{path}: not a gpuobs event file (or never finished)")
        if (
            header["version"] not in VERSIONS
            or header["event_bytes"] != EVENT_DTYPE.itemsize
            or header["launch_bytes"] != LAUNCH_DTYPE.itemsize
        ):
            raise RecordingError(f"{path}: version {header['version']} or record sizes not understood")
        events_end = HEADER_BYTES + int(header["event_count"]) * EVENT_DTYPE.itemsize
        launches_end = events_end + int(header["launch_count"]) * LAUNCH_DTYPE.itemsize
        table_end = launches_end + int(header["trailer_bytes"])
        if table_end != len(data):
            raise RecordingError(f"{path}: sections add up to {table_end} bytes, the file has {len(data)}")
        events = np.frombuffer(data[HEADER_BYTES:events_end], dtype=EVENT_DTYPE)
        launches = np.frombuffer(data[events_end:launches_end], dtype=LAUNCH_DTYPE)
        version = int(header["version"])
        kernels, process = _trailer(path, data[launches_end:table_end], version)
        return cls(
            int(header["pid"]),
            events,
            launches,
            kernels,
            int(header["dropped"]),
            int(header["started_realtime_ns"]),
            process,
            version,
        )


def _trailer(path: str | os.PathLike[str], text: bytes, version: int) -> tuple[dict[int, dict], dict]:
    """The kernel table (slot -> {"slot", "name", "mangled"}) and the process ({} in format 1,
    or where the daemon knew nothing) a recording ends with, checked entry by entry, since an
    exporter trusts their types."""
    try:
        trailer = json.loads(text or (b"[]" if version == 1 else b"{}"))
    except ValueError as error:  # not JSON, or not UTF-8
        raise RecordingError(f"{path}: the kernel table is not JSON ({error})") from None
    if version == 1:
        return _kernel_table(path, trailer), {}
    if not isinstance(trailer, dict):
        raise RecordingError(f"{path}: the trailer is not a JSON object of kernels and process")
    process = trailer.get("process", {})
    if not isinstance(process, dict) or not all(
        _valid(process[key], kind) for key, kind in PROCESS_FIELDS.items() if key in process
    ):
        raise RecordingError(f"{path}: the process record is not one of {sorted(PROCESS_FIELDS)} with their types")
    return _kernel_table(path, trailer.get("kernels", [])), process


def _valid(value: object, kind: type) -> bool:
    """A process field's value: of its type, an int one that fits a uint64 column, a list one
    of strings."""
    if kind is int:
        return type(value) is int and 0 <= value < 1 << 64
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return type(value) is kind


def _kernel_table(path: str | os.PathLike[str], entries: object) -> dict[int, dict]:
    """slot -> {"slot", "name", "mangled"}: the kernel list of a trailer, checked entry by entry."""

    def valid(entry: object) -> bool:
        return (
            isinstance(entry, dict)
            and type(entry.get("slot")) is int
            and 0 <= entry["slot"] < 1 << 32
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("mangled", ""), str)
        )

    if not isinstance(entries, list) or not all(valid(entry) for entry in entries):
        raise RecordingError(f"{path}: the kernel table is not a list of {{slot, name, mangled}}")
    return {entry["slot"]: entry for entry in entries}


def distinct_files(paths: list[Path], by_name: bool = False) -> list[Path]:
    """The event files an export reads, each once: a file given twice would count twice, and
    where a table names a recording by its file's name (`by_name`), two files of one name
    could not be told apart."""
    seen: dict[object, Path] = {}
    for path in paths:
        key = path.name if by_name else Path(os.path.realpath(path))
        if key in seen:
            what = f"two event files named {path.name}" if by_name else f"{path} given twice"
            raise RecordingError(f"{what}: each recording must be told apart from the others ({seen[key]}, {path})")
        seen[key] = path
    return paths
