"""What the exporters and the recorders refuse, as one line that names the file, with nothing
written or removed: an output that is there, the same input twice, damaged event files (a
kernel table that is not one, a value no trace can hold, a FIFO), windows out of range. Files
are made here with the recording writer; none of this needs a producer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from gpuobs.recording import Recording
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, LAUNCH_DTYPE
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.event_files import process_record, replace_trailer, write_event_file

NO_DAEMON = "unix:///nonexistent/gpuobsd.sock"


def event_file(path: Path, *, table: bytes | None = None, time_ns: int = 1000, pid: int = 7) -> Path:
    """A recording of two block enters of kernel 0; `table` replaces its kernel table's bytes."""
    events = np.zeros(2, dtype=EVENT_DTYPE)
    events["kind"], events["grid_id"], events["globaltimer_ns"] = EVENT_KINDS["block_enter"], 5, [time_ns, time_ns + 10]
    write_event_file(path, events, np.zeros(0, dtype=LAUNCH_DTYPE), pid=pid)
    if table is not None:
        replace_trailer(path, b'{"kernels": ' + table + b', "process": ' + json.dumps(process_record()).encode() + b"}")
    return path


def refused(*args: str) -> str:
    done = gpuobsctl(NO_DAEMON, *args)
    lines = done.stderr.strip().splitlines()
    usage = bool(lines) and lines[0].startswith("usage:")  # a usage error exits 2, a failure 1
    assert done.returncode == (2 if usage else 1) and "Traceback" not in done.stderr, (args, done.stderr)
    assert len(lines) == 1 or lines[0].startswith("usage:"), done.stderr  # the reason, after the usage if a usage error
    return lines[-1]


def test_an_output_that_is_there_is_not_written_over(tmp_path: Path) -> None:
    good = event_file(tmp_path / "good.gpuobs")
    before = good.read_bytes()
    assert "exists: not written over" in refused("export-trace", str(good), "--out", str(good))
    assert good.read_bytes() == before
    out = tmp_path / "tables"
    out.mkdir()
    (out / "ops.parquet").write_bytes(b"mine")  # an export of the flat layout before datasets
    assert "holds ops.parquet" in refused("export-parquet", str(good), "--out", str(out))
    assert sorted(p.name for p in out.iterdir()) == ["ops.parquet"] and (out / "ops.parquet").read_bytes() == b"mine"
    assert "no such folder" in refused("trace", "--duration", "1", "--out", str(tmp_path / "no" / "t.pftrace"))
    assert "exists: not written over" in refused("trace", "--duration", "1", "--out", str(good))


def test_each_input_once_and_each_recording_told_apart(tmp_path: Path) -> None:
    good = event_file(tmp_path / "good.gpuobs")
    (tmp_path / "other").mkdir()
    namesake = event_file(tmp_path / "other" / "good.gpuobs", pid=8)
    assert "given twice" in refused("export-trace", str(good), str(good), "--out", str(tmp_path / "t.pftrace"))
    copy = tmp_path / "other" / "copy.gpuobs"
    copy.write_bytes(good.read_bytes())
    assert "are the same recording" in refused(
        "export-parquet", str(good), str(copy), "--out", str(tmp_path / "tables")
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.gpuobs", "other"]
    # two files of one name are two recordings (a dataset names a recording by its bytes)
    done = gpuobsctl(NO_DAEMON, "export-parquet", str(good), str(namesake), "--out", str(tmp_path / "tables"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "table, why",
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"null", "not a list"),
        (b'[{"name": "x"}]', "not a list"),
        (b'[{"slot": 0}]', "not a list"),
        (b'[{"slot": 0, "name": 5}]', "not a list"),
        (b'[{"slot": -1, "name": "k"}]', "not a list"),
        (b'[{"slot": "a", "name": "k"}]', "not a list"),
    ],
)
def test_a_kernel_table_that_is_not_one_is_refused_by_both_exporters(tmp_path: Path, table: bytes, why: str) -> None:
    bad = event_file(tmp_path / "bad.gpuobs", table=table)
    for command, out in (("export-trace", tmp_path / "t.pftrace"), ("export-parquet", tmp_path / "tables")):
        message = refused(command, str(bad), "--out", str(out))
        assert "bad.gpuobs" in message and why in message
        assert not out.exists()


def test_a_value_no_trace_can_hold_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    bad = event_file(tmp_path / "bad.gpuobs", time_ns=(1 << 64) - 100)
    assert len(Recording.open(bad).events) == 2  # a readable file, but its times are not a trace's
    assert "a value a trace cannot" in refused("export-trace", str(bad), "--out", str(tmp_path / "t.pftrace"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gpuobs"]


def test_a_fifo_is_refused_rather_than_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gpuobs"
    os.mkfifo(fifo)
    assert "not a regular file" in refused("export-trace", str(fifo), "--out", str(tmp_path / "t.pftrace"))


@pytest.mark.parametrize("duration", ["-1", "nan", "inf", "1e12", "0.0001", "3601"])
def test_a_window_out_of_range_is_a_usage_error(tmp_path: Path, duration: str) -> None:
    for command in (["record", str(tmp_path / "r.gpuobs")], ["trace", "--out", str(tmp_path / "t.pftrace")]):
        reason = refused(*command, "--duration", duration)
        assert "seconds" in reason or "not a duration (500ms, 30s, 2m, 1h)" in reason, reason
    assert "seconds" in refused("trace", "--duration", "0", "--out", str(tmp_path / "t.pftrace"))
    assert list(tmp_path.iterdir()) == []


def test_a_recording_never_removes_a_file_it_did_not_make(start_synth, start_daemon, tmp_path: Path) -> None:
    synth = start_synth("--mode", "blocks", "--rate", "20000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    folder = tmp_path / "out"
    folder.mkdir()
    mine = folder / f"r.gpuobs.part-{synth.pid}"
    mine.write_bytes(b"data")
    done = gpuobsctl(daemon.address, "record", str(folder / "r.gpuobs"), "--duration", "0.5")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert mine.read_bytes() == b"data" and sorted(p.name for p in folder.iterdir()) == [mine.name]
    long = folder / ("x" * 250)
    done = gpuobsctl(daemon.address, "record", str(long), "--duration", "0.5")
    assert done.returncode == 1 and "longer than the file system takes" in done.stderr, done.stderr


def test_new_files_are_all_written_or_none(tmp_path: Path) -> None:
    from gpuobs.output_files import OutputExists, new_files

    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    with pytest.raises(KeyboardInterrupt):
        with new_files(paths) as handles:
            handles[0].write(b"half")
            raise KeyboardInterrupt  # Ctrl-C half way
    assert list(tmp_path.iterdir()) == []
    with new_files(paths) as handles:
        for handle, text in zip(handles, (b"a", b"b")):
            handle.write(text)
    assert [p.read_bytes() for p in paths] == [b"a", b"b"] and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.parquet",
        "b.parquet",
    ]
    umask = os.umask(0o022)
    os.umask(umask)
    assert paths[0].stat().st_mode & 0o777 == 0o666 & ~umask  # as an ordinary new file
    with pytest.raises(OutputExists):
        with new_files([tmp_path / "c.parquet", paths[1]]):
            pass
    assert not (tmp_path / "c.parquet").exists() and paths[1].read_bytes() == b"b"
