"""A recording that gpuobsd streams back (RecordStream) written where gpuobsctl runs, with the
caller's permissions: one file per process, PATH for one, PATH-<pid> for several (as the
daemon names them), each written beside as PATH.part-<pid> and renamed only once complete."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.output_files import OutputExists, refuse_existing

from .connection import CommandError, each_reply


@dataclasses.dataclass
class LocalFile:
    pid: int
    path: Path
    events: int
    launches: int
    dropped: int
    stopped: str = ""  # why the recording ended early (a disk cap of gpuobsd's), "" when it ran its course


def refuse_existing_output(*paths: Path) -> None:
    """gpuobs.output_files.refuse_existing, said as the CLI says a reason."""
    try:
        refuse_existing(*paths)
    except OutputExists as error:
        raise CommandError(str(error)) from None


def check_target(path: Path) -> None:
    """Said before anything is recorded: a folder this user cannot write, a file there already,
    a name (with the part suffix it is written under) longer than the file system takes."""
    try:
        if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
            raise CommandError(f"{path.parent}: not a folder this user can write to")
        refuse_existing_output(path)
        longest = os.pathconf(path.parent, "PC_NAME_MAX")
    except OSError as error:
        raise CommandError(f"{path}: {error.strerror}") from None
    if len(path.name.encode()) + len(".part-4294967295") > longest:
        raise CommandError(f"{path}: a file name longer than the file system takes ({longest} bytes)")


def record_here(address: str, path: Path, request: pb.RecordRequest, timeout: float) -> list[LocalFile]:
    check_target(path)
    parts: dict[int, Path] = {}
    figures: dict[int, pb.RecordedFile] = {}
    handles = {}
    try:
        for chunk in each_reply(address, "RecordStream", request, timeout):
            if chunk.pid not in handles and chunk.pid not in figures:
                part = path.with_name(f"{path.name}.part-{chunk.pid}")
                handles[chunk.pid] = open(part, "xb")
                parts[chunk.pid] = part  # ours to remove only once we made it
            if chunk.data:
                handles[chunk.pid].write(chunk.data)
            if chunk.HasField("file"):
                handles.pop(chunk.pid).close()
                figures[chunk.pid] = chunk.file
        if handles or set(figures) != set(parts):
            raise CommandError("the recording stream ended before every file was complete")
        finals = {pid: path if len(parts) == 1 else path.with_name(f"{path.stem}-{pid}{path.suffix}") for pid in parts}
        refuse_existing_output(*finals.values())
        for pid, final in finals.items():
            parts[pid].rename(final)
        return [LocalFile(pid, finals[pid], f.events, f.launches, f.dropped, f.stopped) for pid, f in figures.items()]
    except OSError as error:
        raise CommandError(f"writing the recording: {error}") from None
    finally:
        for handle in handles.values():
            handle.close()
        for part in parts.values():
            part.unlink(missing_ok=True)  # gone where renamed; what is left was not complete
