"""Event files -> a gpuobs dataset: Hive-partitioned Parquet that DuckDB, Spark, Trino, ClickHouse
and Dask read as it is (docs/parquet.md). An export adds files; it never writes over one:

    DIR/<table>/host=<host>/date=<YYYY-MM-DD>/process=<pid>-<start ticks>/<recording>.parquet

one file per table (gpuobs.dataset_tables.TABLES, every table even where it has no row, so that
each table's schema is always there) per recording. `recording` is a digest of the event file's
bytes: unique across hosts and exports, and the same file exported again is refused by name
rather than counted twice. A second host's recordings are other partitions of the same tables.

All or nothing: every file of an export is written under a hidden temporary name first and put
in place (hard linked: never over a file that appeared meanwhile) only once all are written; a
failure or Ctrl-C leaves neither files nor the folders it made. The folders are walked by file
descriptor and checked (gpuobs.trusted_folder): the dataset may live in a shared place."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
from pathlib import Path
from types import ModuleType

from gpuobs.dataset_tables import TABLES, tables
from gpuobs.recording import Recording, RecordingError, distinct_files
from gpuobs.trusted_folder import FolderWalk, UntrustedFolder

HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")  # a host name as a partition value
DIGEST_HEX = 32  # the recording's name: 128 bits of its file's SHA-256
FILE_MODE = 0o644


class DatasetError(RuntimeError):
    """An export a dataset refuses: nothing was written."""


def _parquet() -> ModuleType:
    import pyarrow.parquet

    return pyarrow.parquet


def recording_name(path: Path) -> str:
    """The recording's name in a dataset: a digest of its file (the same bytes, the same name)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:DIGEST_HEX]


def partition(recording: Recording, path: Path) -> tuple[str, str, str]:
    """(host, date, process) of a recording: its host as the daemon named it, the UTC date it
    began, and its process as the segment names it (pid and start ticks: stable for the
    process's life, unique on its host)."""
    if recording.version < 2 or "host" not in recording.process:
        raise RecordingError(
            f"{path}: the event file does not say its host and process (format {recording.version}, or written"
            " without the daemon): it cannot be placed in a dataset (export-trace reads it)"
        )
    host = recording.process["host"]
    if not HOST_NAME.fullmatch(host):
        raise RecordingError(f"{path}: its host name {host!r} is not one a partition can hold")
    day = datetime.datetime.fromtimestamp(recording.started_realtime_ns / 1e9, tz=datetime.UTC).date()
    return host, day.isoformat(), f"{recording.pid}-{recording.process.get('pid_start_ticks', 0)}"


def check_root(root: Path) -> None:
    """A dataset's folder: its path must not read as a partition itself (DuckDB takes every
    `name=value` folder of a file's path for one)."""
    if "=" in str(Path(os.path.abspath(root))):
        raise DatasetError(f"{root}: a dataset's path may not hold '=' (it would read as a partition column)")


def export(paths: list[Path], out_dir: Path) -> dict[str, int]:
    """Adds these event files to the dataset at out_dir (made if its parent is there), all of
    them or none; returns the rows added per table."""
    check_root(out_dir)
    parquet = _parquet()
    planned: list[tuple[tuple[str, ...], str, object]] = []  # (folder parts, file name, table)
    names: dict[str, Path] = {}
    rows = dict.fromkeys(TABLES, 0)
    for path in distinct_files(paths):
        recording = Recording.open(path)
        host, day, process = partition(recording, path)
        name = recording_name(path)
        if name in names:
            raise RecordingError(f"{path} and {names[name]} are the same recording (the same bytes)")
        names[name] = path
        for table, rows_of in tables(recording, name, path.name).items():
            rows[table] += rows_of.num_rows
            planned.append(((table, f"host={host}", f"date={day}", f"process={process}"), f"{name}.parquet", rows_of))
    with FolderWalk(out_dir) as walk:
        try:
            flat = [n for n in os.listdir(walk.root_fd) if n.endswith(".parquet")]
            if flat:
                raise DatasetError(
                    f"{out_dir} holds {flat[0]}: an export of the flat layout before datasets; choose a new folder"
                )
            _write_all(walk, planned, parquet)
        except BaseException:
            walk.remove_made()
            raise
    return rows


def _write_all(walk: FolderWalk, planned: list[tuple[tuple[str, ...], str, object]], parquet: ModuleType) -> None:
    """Each planned file, whole, or none of them."""
    temps: list[tuple[int, str]] = []
    placed: list[tuple[int, str]] = []
    try:
        for parts, name, table in planned:
            folder = walk.folder(parts)
            if _exists(name, folder):
                raise DatasetError(f"{walk.root.joinpath(*parts, name)} exists: that recording is in the dataset")
            temp = f".{name}.{os.getpid()}.{len(temps)}.part"
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=folder
            )
            temps.append((folder, temp))
            with os.fdopen(fd, "wb") as handle:
                parquet.write_table(table, handle, compression="zstd")
        for (parts, name, _), (folder, temp) in zip(planned, temps):
            try:
                os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            except FileExistsError:
                raise DatasetError(
                    f"{walk.root.joinpath(*parts, name)} exists: that recording is in the dataset"
                ) from None
            except OSError:  # a file system without hard links: checked, then renamed
                if _exists(name, folder):
                    raise DatasetError(f"{walk.root.joinpath(*parts, name)} exists") from None
                os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            placed.append((folder, name))
    except BaseException:
        for folder, name in placed:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
        raise
    finally:
        for folder, temp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=folder)


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


__all__ = ["DatasetError", "UntrustedFolder", "export", "partition", "recording_name"]
