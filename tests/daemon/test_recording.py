"""Record: event files readable without the daemon, and their export to a Perfetto trace."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.recording import Recording, RecordingError
from gpuobs.segment import LAUNCH_KINDS
from gpuobs.trace_export import export
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.perfetto_trace import read_trace


def test_record_writes_a_readable_event_file_and_a_trace(start_synth, start_daemon, tmp_path: Path) -> None:
    synth = start_synth(
        "--mode", "blocks", "--rate", "300000", "--kernels", "10", "--label", "rank0", "--launch-trace"
    )  # host launch records too (opt-in): the recording keeps them
    daemon = start_daemon()
    daemon.wait_processes(1)
    path = tmp_path / "run.gpuobs"
    done = gpuobsctl(daemon.address, "--output", "json", "record", str(path), "--count", "100000", "--duration", "20")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)["files"]
    assert len(files) == 1 and files[0]["path"] == str(path) and files[0]["events"] == 100000
    recording = Recording.open(path)
    assert recording.pid == synth.pid and len(recording.events) == 100000
    assert files[0]["dropped"] == 0
    seq = recording.events["seq"]
    assert np.all(np.diff(seq) == 1)  # one contiguous stretch of the ring, nothing skipped
    assert set(np.unique(recording.events["kind"])) == {1, 2, 5}  # block enters, exits, launches
    assert set(np.unique(recording.events["kernel_slot"])) <= set(recording.kernels)
    assert len(recording.launches) > 0
    assert set(np.unique(recording.events["grid_id"])) & set(recording.launches["grid_id"].tolist())
    assert any("flash_fwd_kernel" in k["name"] for k in recording.kernels.values())

    trace_path = tmp_path / "trace.pftrace"
    done = gpuobsctl(daemon.address, "export-trace", str(path), "--out", str(trace_path))
    assert done.returncode == 0, done.stderr
    trace = read_trace(trace_path)  # every slice ends, and slices of one track never overlap
    assert list(trace.processes.values()) == [synth.pid]
    blocks = [s for s in trace.slices if s.track.startswith("SM ") and s.end is not None]
    kernels = [s for s in trace.slices if s.track.startswith("stream ") and s.end is not None]
    assert blocks and kernels
    assert {s.name for s in kernels} <= {k["name"] for k in recording.kernels.values()}
    # absolute device times: the events' own
    assert min(s.start for s in blocks) == int(recording.events["globaltimer_ns"][recording.events["kind"] == 1].min())
    # every launch with events is one kernel slice, under the stream its launch record names (a
    # launch that began before the recording did has no record in it: under "stream not traced")
    untraced = [s for s in trace.slices if s.track.startswith("eager kernels") and s.end is not None]
    assert len(kernels) + len(untraced) == len(np.unique(recording.events["grid_id"]))
    # exactly the launches whose record the recording lacks (began before it, or their record came
    # after its end: the drain reads launch records in batches of its own) are there
    recorded = set(recording.launches["grid_id"].tolist())
    assert all(s.args["grid_id"] not in recorded for s in untraced)
    assert all(s.args["grid_id"] in recorded for s in kernels)
    streams = dict(zip(recording.launches["grid_id"].tolist(), recording.launches["stream"].tolist()))
    assert all(s.track.split(" ")[1] == f"{streams[s.args['grid_id']]:#x}" for s in kernels)
    # the launch trace gives host/device clock pairs: one snapshot, the device clock as the trace's
    assert len(trace.clock_snapshots) == 1 and set(trace.clock_snapshots[0]) == {3, 6}
    again = tmp_path / "again.pftrace"
    assert gpuobsctl(daemon.address, "export-trace", str(path), "--out", str(again)).returncode == 0
    assert again.read_bytes() == trace_path.read_bytes()


def test_record_refuses_bad_requests(start_synth, start_daemon, tmp_path: Path) -> None:
    start_synth("--mode", "blocks", "--rate", "10000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    existing = tmp_path / "exists.gpuobs"
    existing.write_bytes(b"keep me")
    for request in [
        pb.RecordRequest(path="relative.gpuobs", max_events=10),
        pb.RecordRequest(path=str(tmp_path / "x.gpuobs")),
        pb.RecordRequest(path=str(existing), max_events=10),
        pb.RecordRequest(path=str(tmp_path / "missing" / "x.gpuobs"), max_events=10),
    ]:
        with pytest.raises(grpc.RpcError) as caught:
            daemon.stub.Record(request, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert existing.read_bytes() == b"keep me"
    with pytest.raises(grpc.RpcError) as caught:
        daemon.stub.Record(pb.RecordRequest(path=str(tmp_path / "y.gpuobs"), max_events=5, pids=[1]), timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_record_whose_client_goes_away_stops_and_keeps_what_it_recorded(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    """Ctrl-C of `gpuobsctl record`: the daemon stops recording at once (not at the end of the
    duration asked for) and leaves a finished, readable file of what it had."""
    start_synth("--mode", "blocks", "--rate", "200000", "--kernels", "10", "--launch-trace")
    daemon = start_daemon()
    daemon.wait_processes(1)
    path = tmp_path / "cancelled.gpuobs"
    call = daemon.stub.Record.future(pb.RecordRequest(path=str(path), duration_ms=60_000), timeout=120)
    deadline = time.monotonic() + 20
    while (not path.exists() or path.stat().st_size < (1 << 20)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists() and path.stat().st_size >= (1 << 20), "the recording never started"
    assert call.cancel()
    cancelled = time.monotonic()
    recording, why = None, ""
    while recording is None and time.monotonic() - cancelled < 30:  # the duration asked was 60 s
        try:
            recording = Recording.open(path)
        except RecordingError as error:
            why = str(error)
            time.sleep(0.05)
    assert recording is not None, f"the cancelled recording was not finished: {why}"
    size = path.stat().st_size
    time.sleep(1.0)
    assert path.stat().st_size == size  # nothing written after the client left
    assert len(recording.events) > 0 and len(recording.launches) > 0
    assert daemon.status().processes  # and the daemon goes on


def test_a_record_that_cannot_be_written_fails_clearly_and_leaves_no_file(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    """The daemon may not grow a file past 1 MiB (RLIMIT_FSIZE, as a full disk or quota would
    stop it): the recording fails with INTERNAL naming the file, its partial file is removed, and
    the daemon goes on serving."""
    start_synth("--mode", "blocks", "--rate", "200000", "--kernels", "10")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))  # inherited by the daemon only
    try:
        daemon = start_daemon()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    daemon.wait_processes(1)
    path = tmp_path / "too-big.gpuobs"
    with pytest.raises(grpc.RpcError) as caught:
        daemon.stub.Record(pb.RecordRequest(path=str(path), max_events=1_000_000, duration_ms=60_000), timeout=120)
    assert caught.value.code() == grpc.StatusCode.INTERNAL, caught.value
    assert str(path) in caught.value.details() and "failed" in caught.value.details()
    assert not path.exists() and list(tmp_path.glob("too-big*")) == []
    assert daemon.status().processes


def test_damaged_event_files_are_rejected(tmp_path: Path) -> None:
    for name, data in [("short", b"GPUOBSRC"), ("foreign", b"\0" * 200), ("unfinished", b"\0" * 64 + b"x" * 64)]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(RecordingError):
            Recording.open(path)


def test_huge_inputs_are_refused_without_being_echoed(start_synth, start_daemon, tmp_path: Path) -> None:
    """An error message must not send a megabyte of input back."""
    start_synth("--mode", "counter", "--rate", "1000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    for call in (
        lambda: daemon.stub.SetMode(pb.SetModeRequest(mode="m" * (1 << 20)), timeout=10),
        lambda: daemon.stub.Record(pb.RecordRequest(path="/" + "p" * (1 << 20), max_events=5), timeout=10),
        lambda: daemon.stub.Record(pb.RecordRequest(path=str(tmp_path / ("n" * 300) / "x"), max_events=5), timeout=10),
        lambda: daemon.stub.Record(pb.RecordRequest(path=str(tmp_path / ("n" * 300)), max_events=5), timeout=10),
        lambda: daemon.stub.Record(pb.RecordRequest(path=str(tmp_path / "nul\0.gpuobs"), max_events=5), timeout=10),
        lambda: daemon.stub.ListKernels(pb.ListKernelsRequest(page_token="k1.\u00b2.1.1"), timeout=10),
        lambda: daemon.stub.ListSteps(pb.ListStepsRequest(page_token="s1.1.1.\u00b9.2"), timeout=10),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value
        assert len(caught.value.details()) < 1000


def test_a_graph_recording_exports_each_node_execution_and_each_block_to_its_exit(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    """A graph of 4 nodes replayed, recorded after the replay that taught its nodes: every node
    keeps its grid id in every replay, so the trace has a kernel slice per node execution
    (grid id, replay), and each block slice ends at its own exit, inside its execution's slice
    (grouped by grid id alone, 31 node executions were 4 slices, and a block slice reached the
    exit of the same block in the last replay)."""
    daemon = start_daemon()
    start_synth("--mode", "blocks", "--graph-nodes", "4", "--kernels", "4", "--rate", "20000", "--duration", "30")
    daemon.wait_processes(1)
    time.sleep(0.5)  # the first replay, recorded node by node, is drained before the recording
    path = tmp_path / "graph.gpuobs"
    done = gpuobsctl(daemon.address, "record", str(path), "--count", "4000", "--duration", "20")
    assert done.returncode == 0, done.stderr
    recording = Recording.open(path)
    nodes = recording.launches[recording.launches["kind"] == LAUNCH_KINDS["graph_node"]]
    grid_ids = set(np.unique(recording.events["grid_id"]).tolist())
    assert len(grid_ids) == 4 and grid_ids <= set(nodes["grid_id"].tolist())  # learned before it began
    executions = set(zip(recording.events["grid_id"].tolist(), recording.events["replay"].tolist()))
    assert len(executions) > 8

    trace_path = tmp_path / "graph.pftrace"
    export([path], trace_path)
    trace = read_trace(trace_path)
    kernels = [s for s in trace.slices if s.track.startswith("graph exec ") and s.end is not None]
    assert sorted((k.args["grid_id"], k.args["replay"]) for k in kernels) == sorted(executions)
    span = {(k.args["grid_id"], k.args["replay"]): (k.start, k.end) for k in kernels}
    blocks = [s for s in trace.slices if s.track.startswith("SM ") and s.end is not None]
    assert blocks
    for block in blocks:
        first, last = span[(block.args["grid_id"], block.args["replay"])]
        assert first <= block.start and block.end <= last + 1, (block, first, last)


def test_trace_records_a_window_into_one_perfetto_trace_with_graphs_and_steps(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    """`gpuobsctl trace`: a window of a graph replayed step by step (the vLLM plugin's step records
    before each replay), in one step: node executions on their graph exec's track, blocks on SM
    tracks, each engine step a slice on the device clock that begins before its replay's first
    block and covers it (placed through the least launch-to-block gap); the event files go."""
    daemon = start_daemon()
    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", "3", "--steps", "--kernels", "3", "--rate", "20000", "--duration", "30"
    )
    daemon.wait_processes(1)
    time.sleep(0.5)  # the first replay, recorded node by node, is drained before the window
    folder = tmp_path / "traces"
    folder.mkdir()
    out = folder / "window.pftrace"
    done = gpuobsctl(daemon.address, "--output", "json", "trace", "--duration", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["trace"] == str(out) and answer["slices"] > 0 and answer["processes"][0]["pid"] == synth.pid
    assert sorted(p.name for p in folder.iterdir()) == ["window.pftrace"]  # the event files are gone
    trace = read_trace(out)
    executions = [s for s in trace.slices if s.track.startswith("graph exec ") and s.end is not None]
    steps = [s for s in trace.slices if s.track == "engine steps"]
    assert len({s.args["replay"] for s in executions}) > 10 and len(steps) > 10
    assert len(trace.clock_snapshots) == 1
    # gpuobs-synth's step number is its replay number: each step begins no later than its replay's
    # first execution, and the next step no earlier than that replay's last
    step_start = {int(s.name.split()[1]): s.start for s in steps}
    by_replay: dict[int, list] = {}
    for execution in executions:
        by_replay.setdefault(execution.args["replay"], []).append(execution)
    checked = 0
    for replay, runs in by_replay.items():
        if replay in step_start and replay + 1 in step_start:
            assert step_start[replay] <= min(r.start for r in runs), replay
            assert step_start[replay + 1] >= max(r.end for r in runs) - 1, replay
            checked += 1
    assert checked > 5


def test_trace_refuses_what_it_cannot_do(start_daemon, tmp_path: Path) -> None:
    daemon = start_daemon()
    folder = tmp_path / "traces"
    folder.mkdir()
    for args, message, code in (
        (["--duration", "0", "--out", str(folder / "t.pftrace")], "not within", 2),  # usage: found locally
        (["--duration", "1", "--out", str(folder / "no" / "t.pftrace")], "no such folder", 1),
        (["--duration", "0.2", "--out", str(folder / "t.pftrace")], "no live process", 1),
    ):
        done = gpuobsctl(daemon.address, "trace", *args)
        assert done.returncode == code and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert list(folder.iterdir()) == []


def test_a_recording_is_streamed_back_and_written_by_the_client(start_synth, start_daemon, tmp_path: Path) -> None:
    """By default the daemon streams the event files back (RecordStream) and gpuobsctl writes them
    with its own permissions, one per process; the daemon keeps nothing. --on-daemon has the daemon
    write them; both give the same kind of file."""
    import tempfile

    daemon = start_daemon()
    first = start_synth("--mode", "blocks", "--rate", "20000", "--kernels", "3", "--duration", "30")
    second = start_synth("--mode", "blocks", "--rate", "20000", "--kernels", "2", "--duration", "30")
    daemon.wait_processes(2)
    kept = set(Path(tempfile.gettempdir()).glob("gpuobs-record-*"))
    here = tmp_path / "here"
    here.mkdir()
    done = gpuobsctl(
        daemon.address, "--output", "json", "record", str(here / "w.gpuobs"), "--count", "2000", "--duration", "20"
    )
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)["files"]
    assert sorted(f["pid"] for f in files) == sorted([first.pid, second.pid])
    assert sorted(p.name for p in here.iterdir()) == sorted(f"w-{f['pid']}.gpuobs" for f in files)
    for file in files:
        recording = Recording.open(file["path"])
        assert recording.pid == file["pid"] and len(recording.events) == file["events"] == 2000
        assert len(recording.launches) == file["launches"] and recording.kernels
    assert set(Path(tempfile.gettempdir()).glob("gpuobs-record-*")) == kept  # the daemon kept nothing
    again = gpuobsctl(daemon.address, "record", str(here / "w.gpuobs"), "--count", "10", "--pid", str(first.pid))
    assert again.returncode == 0  # one process: PATH itself
    refused = gpuobsctl(daemon.address, "record", str(here / "w.gpuobs"), "--count", "10", "--pid", str(first.pid))
    assert refused.returncode == 1 and "exists: not written over" in refused.stderr
    on_daemon = gpuobsctl(
        daemon.address,
        "--output",
        "json",
        "record",
        str(tmp_path / "d.gpuobs"),
        "--count",
        "10",
        "--pid",
        str(second.pid),
        "--on-daemon",
    )
    assert on_daemon.returncode == 0, on_daemon.stderr
    assert Recording.open(tmp_path / "d.gpuobs").pid == second.pid
