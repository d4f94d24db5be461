"""Event files: what `gpuobsctl record` writes, readable without the daemon.

Layout (little endian), one file per process:

    offset 0     64-byte header (RECORDING_HEADER below)
    offset 64    event_count x 64-byte events   (gpuobs.segment.EVENT_DTYPE)
    then         launch_count x 128-byte launch records (gpuobs.segment.LAUNCH_DTYPE)
    then         kernel table, UTF-8 JSON: [{"slot", "name", "mangled"}, ...]

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
import stat
import tempfile
from pathlib import Path

import numpy as np

from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE

MAGIC = b"GPUOBSRC"
VERSION = 1
RECORDING_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("event_bytes", "<u4"),
        ("pid", "<u4"),
        ("launch_bytes", "<u4"),
        ("event_count", "<u8"),
        ("launch_count", "<u8"),
        ("kernel_table_bytes", "<u8"),
        ("started_realtime_ns", "<u8"),
        ("dropped", "<u8"),
    ]
)
HEADER_BYTES = 64
assert RECORDING_HEADER.itemsize <= HEADER_BYTES


class RecordingError(ValueError):
    """Not a gpuobs event file, or a damaged one."""


class RecordingWriter:
    """Streams batches to disk; the header is written last, so a crash leaves a file that
    `Recording.open` rejects rather than misreads. Launch records go to an unlinked spool file
    beside it until the end (their section follows the events'): a recording of an hour holds
    nothing in memory. `abort` removes what was written."""

    def __init__(self, path: Path, pid: int, started_realtime_ns: int) -> None:
        self.path = Path(path)
        self.pid = pid
        self.started_realtime_ns = started_realtime_ns
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
        table = json.dumps([{"slot": k["slot"], "name": k["demangled"], "mangled": k["mangled"]} for k in kernels])
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
        header["kernel_table_bytes"] = len(table.encode())
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
            header["version"] != VERSION
            or header["event_bytes"] != EVENT_DTYPE.itemsize
            or header["launch_bytes"] != LAUNCH_DTYPE.itemsize
        ):
            raise RecordingError(f"{path}: version {header['version']} or record sizes not understood")
        events_end = HEADER_BYTES + int(header["event_count"]) * EVENT_DTYPE.itemsize
        launches_end = events_end + int(header["launch_count"]) * LAUNCH_DTYPE.itemsize
        table_end = launches_end + int(header["kernel_table_bytes"])
        if table_end != len(data):
            raise RecordingError(f"{path}: sections add up to {table_end} bytes, the file has {len(data)}")
        events = np.frombuffer(data[HEADER_BYTES:events_end], dtype=EVENT_DTYPE)
        launches = np.frombuffer(data[events_end:launches_end], dtype=LAUNCH_DTYPE)
        kernels = _kernel_table(path, data[launches_end:table_end])
        return cls(
            int(header["pid"]), events, launches, kernels, int(header["dropped"]), int(header["started_realtime_ns"])
        )


def _kernel_table(path: str | os.PathLike[str], text: bytes) -> dict[int, dict]:
    """slot -> {"slot", "name", "mangled"}: the table a recording ends with, checked entry by
    entry, since an exporter trusts its types."""
    try:
        entries = json.loads(text or b"[]")
    except ValueError as error:  # not JSON, or not UTF-8
        raise RecordingError(f"{path}: the kernel table is not JSON ({error})") from None

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
