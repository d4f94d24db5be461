"""What export-parquet refuses before it writes a dataset file, as one line that names why, with
nothing written or removed: an event file that does not say its host (format 1), a host name no
partition can hold, a dataset path that reads as a partition, folders that are not this user's
to write in (a link, a folder others may write in), a link planted where a partition folder goes;
and a failure half way through an export, which leaves neither files nor folders behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from gpuobs.recording import RECORDING_HEADER
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, LAUNCH_DTYPE
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.event_files import process_record, replace_trailer, write_event_file

NO_DAEMON = "unix:///nonexistent/gpuobsd.sock"


def event_file(path: Path, **process: object) -> Path:
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["kind"], events["grid_id"], events["globaltimer_ns"] = EVENT_KINDS["block_enter"], 5, [10, 20, 30]
    return write_event_file(path, events, np.zeros(0, dtype=LAUNCH_DTYPE), process=process_record(**process))


def export(*args: str) -> tuple[int, str]:
    done = gpuobsctl(NO_DAEMON, "export-parquet", *args)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr.strip()


def everything(folder: Path) -> dict[str, bytes | None]:
    """Every path below folder (not following links), with a file's bytes."""
    found: dict[str, bytes | None] = {}
    for path in sorted(folder.rglob("*")):
        found[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


def test_a_format_1_file_and_an_odd_host_name_are_refused(tmp_path: Path) -> None:
    old = event_file(tmp_path / "old.gpuobs")
    data = bytearray(old.read_bytes())
    header = np.frombuffer(bytes(data[: RECORDING_HEADER.itemsize]), dtype=RECORDING_HEADER).copy()
    header["version"] = 1
    data[: RECORDING_HEADER.itemsize] = header.tobytes()
    old.write_bytes(bytes(data))
    replace_trailer(old, json.dumps([{"slot": 0, "name": "k"}]).encode())
    code, said = export(str(old), "--out", str(tmp_path / "ds"))
    assert code == 1 and "old.gpuobs" in said and "does not say its host" in said
    odd = event_file(tmp_path / "odd.gpuobs", host="a/../b")
    code, said = export(str(odd), "--out", str(tmp_path / "ds"))
    assert code == 1 and "'a/../b' is not one a partition can hold" in said
    assert not (tmp_path / "ds").exists()
    done = gpuobsctl(NO_DAEMON, "export-trace", str(old), "--out", str(tmp_path / "t.pftrace"))
    assert done.returncode == 0, done.stderr  # the trace needs nothing a format 1 file lacks


def test_folders_not_to_write_in_are_refused_and_nothing_goes_through_a_link(tmp_path: Path) -> None:
    good = event_file(tmp_path / "good.gpuobs")
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "link").symlink_to(victim)
    code, said = export(str(good), "--out", str(tmp_path / "link"))
    assert code == 1 and "link is a symbolic link: not followed" in said
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, said = export(str(good), "--out", str(shared))
    assert code == 1 and "writable by other users" in said
    (tmp_path / "a=b").mkdir()
    code, said = export(str(good), "--out", str(tmp_path / "a=b" / "ds"))
    assert code == 1 and "may not hold '='" in said
    # a link planted where a partition folder goes: refused, nothing written anywhere
    dataset = tmp_path / "ds"
    (dataset / "events").mkdir(parents=True)
    (dataset / "events" / "host=host-a").symlink_to(victim)
    before = everything(dataset)
    code, said = export(str(good), "--out", str(dataset))
    assert code == 1 and "host=host-a is a symbolic link: not followed" in said
    assert everything(dataset) == before and list(victim.iterdir()) == [] and list(shared.iterdir()) == []


def test_a_failure_half_way_leaves_the_dataset_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq
    from gpuobs import dataset_writer

    first = event_file(tmp_path / "first.gpuobs")
    dataset = tmp_path / "ds"
    dataset_writer.export([first], dataset)
    before = everything(dataset)
    assert len([name for name, data in before.items() if data is not None]) == 7  # a file per table
    second = event_file(tmp_path / "second.gpuobs", host="host-b", pid_start_ticks=99)
    written: list[int] = []
    real = pq.write_table

    def fails_on_the_fourth(*args: object, **kwargs: object) -> None:
        written.append(1)
        if len(written) == 4:
            raise KeyboardInterrupt  # Ctrl-C half way
        real(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", fails_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        dataset_writer.export([second], dataset)
    assert everything(dataset) == before  # no file, hidden or not, and no folder it made
    with pytest.raises(KeyboardInterrupt):
        written.clear()
        dataset_writer.export([second], tmp_path / "new")
    assert not (tmp_path / "new").exists()
    monkeypatch.setattr(pq, "write_table", real)
    assert dataset_writer.export([second], dataset)["events"] == 3
    umask = os.umask(0o022)
    os.umask(umask)
    added = [dataset / name for name, data in everything(dataset).items() if name not in before]
    assert {p.stat().st_mode & 0o777 for p in added if p.is_file()} == {0o644 & ~umask}
    assert {p.stat().st_mode & 0o777 for p in added if p.is_dir()} == {0o755 & ~umask}
