"""The framework ops in a Perfetto trace: a track of ops above each stream's and graph exec's
kernels. Eager ops come from the launches that name them (the launch trace on); graph nodes'
ops from their capture, long before the recorded window, which the daemon writes at the
recording's start (gpuobs.op_labels.recording_prelude). gpuobs-synth writes both with the
injector's writer: op k has label (k - 1) % 3 of LABELS."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from gpuobs.op_labels import (
    LABEL_LOST,
    LABEL_NOT_RECORDED,
    MAX_LABEL_BYTES,
    RECORDING_OP_BASE,
    TEXT_BYTES,
    OpLabel,
    OpLabels,
    label_records,
    recording_prelude,
)
from gpuobs.recording import Recording
from gpuobs.segment import EVENT_DTYPE, EVENT_KINDS, LAUNCH_DTYPE, LAUNCH_KINDS, MAX_OP_LABEL_BYTES, STEP_TEXT_DTYPE
from gpuobs.trace_export import _annotate, write_trace
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.perfetto_trace import TraceSlice, read_trace
from gpuobs_testing.synth import SYNTH_OP_LABELS

LABELS = SYNTH_OP_LABELS


def test_label_records_read_back_as_the_labels_they_give() -> None:
    long = "model.layers.31.mlp " + "x" * 300  # six text records
    labels = {RECORDING_OP_BASE: "short", RECORDING_OP_BASE + 1: long, RECORDING_OP_BASE + 2: "é" * 3000}
    read = OpLabels()
    read.read(label_records({op: OpLabel.whole(label) for op, label in labels.items()}), keep=10)
    assert read.label(RECORDING_OP_BASE) == "short" and read.label(RECORDING_OP_BASE + 1) == long
    assert read.label(RECORDING_OP_BASE + 2) == "é" * (MAX_OP_LABEL_BYTES // 2)  # cut where the injector cuts
    assert read.label(7) == LABEL_LOST and MAX_LABEL_BYTES > MAX_OP_LABEL_BYTES


def test_a_label_begun_before_a_recording_is_completed_by_the_pieces_in_it() -> None:
    """The daemon had read the op record and two of the label's six pieces when the recording
    began: the prelude carries them, the rest come in the recording; a piece read twice counts
    once, and a label with a piece missing is lost, not cut."""
    long = "model.layers.31.mlp.down_proj aten::mm " + "x" * 270
    ring = label_records({9: OpLabel.whole(long)})
    assert len(ring) == 7
    live = OpLabels()
    live.read(ring[:3], keep=10)
    assert live.label(9) == LABEL_LOST
    prelude = recording_prelude(np.zeros(0, dtype=LAUNCH_DTYPE), {}, {9: live[9].copy()})
    read = OpLabels()
    read.read(np.concatenate([prelude, ring[3:]]), keep=10)
    assert read.label(9) == long
    torn = OpLabels()
    torn.read(np.concatenate([prelude, ring[3:4], ring[3:4], ring[5:]]), keep=10)  # ring[3] twice, ring[4] never
    assert torn.label(9) == LABEL_LOST
    assert torn.label(10) == LABEL_LOST and torn.label(10, LABEL_NOT_RECORDED) == LABEL_NOT_RECORDED


def test_a_torn_text_record_neither_completes_a_label_nor_undoes_a_piece() -> None:
    ring = label_records({9: OpLabel.whole("a" * (2 * TEXT_BYTES + 5))})
    misaligned, empty, short = ring[1:2].copy(), ring[1:2].copy(), ring[2:3].copy()
    misaligned.view(STEP_TEXT_DTYPE)["offset"] = 1
    empty.view(STEP_TEXT_DTYPE)["length"] = 0
    short.view(STEP_TEXT_DTYPE)["length"] = 5  # a middle piece is whole
    for torn, rest in [(misaligned, [ring[1:2], ring[3:]]), (short, [ring[1:2], ring[3:]])]:
        read = OpLabels()
        read.read(np.concatenate([ring[:1], torn, *rest]), keep=10)  # the torn record stands in for ring[2]
        assert read.label(9) == LABEL_LOST
    read = OpLabels()
    read.read(np.concatenate([ring, empty]), keep=10)
    assert read.label(9) == "a" * (2 * TEXT_BYTES + 5)  # a piece held is not undone


def test_recording_prelude_name_one_op_per_label_and_keep_every_node_record() -> None:
    nodes = np.zeros(4, dtype=LAUNCH_DTYPE)
    nodes["kind"] = LAUNCH_KINDS["graph_node"]
    nodes["graph_exec"], nodes["graph_node"] = [9, 9, 9, 8], [1, 2, 3, 1]
    nodes["grid_id"], nodes["kernel_slot"] = [101, 102, 103, 201], [0, 1, 2, 0]
    out = recording_prelude(nodes, {101: "a", 103: "a", 201: "b", 999: "unused"}, {41: OpLabel.whole("open op")})
    kinds = out["kind"].tolist()
    assert kinds.count(LAUNCH_KINDS["op"]) == 3 and kinds[-4:] == [LAUNCH_KINDS["graph_node"]] * 4
    named = out[-4:]
    assert named["grid_id"].tolist() == [101, 102, 103, 201] and named["kernel_slot"].tolist() == [0, 1, 2, 0]
    ops = named["op"].tolist()
    assert ops[0] == ops[2] >= RECORDING_OP_BASE and ops[1] == 0 and ops[3] not in (0, ops[0])
    read = OpLabels()
    read.read(out, keep=10)
    assert [read.label(op) for op in (ops[0], ops[3], 41)] == ["a", "b", "open op"]
    assert nodes["op"].tolist() == [0, 0, 0, 0]  # the daemon's own records are left as they were


def test_a_trace_names_each_op_by_its_label_or_says_it_is_not_in_the_recording(tmp_path: Path) -> None:
    """A recording of a node whose op the daemon numbered and two eager launches, one of an op
    whose record is in the recording ahead of many others', one of an op whose record is not."""
    labelled, unlabelled = 5, 6
    nodes = np.zeros(1, dtype=LAUNCH_DTYPE)
    nodes["kind"], nodes["graph_exec"], nodes["graph_node"], nodes["grid_id"] = LAUNCH_KINDS["graph_node"], 9, 1, 300
    prelude = recording_prelude(nodes, {300: "layer.0 attention"}, {labelled: OpLabel.whole("layer.0 aten::mm")})
    assert prelude[-1]["op"] >= RECORDING_OP_BASE
    others = label_records({op: OpLabel.whole(f"op {op}") for op in range(100, 3100)})
    eager = np.zeros(2, dtype=LAUNCH_DTYPE)
    eager["kind"], eager["grid_id"], eager["stream"], eager["op"] = (
        LAUNCH_KINDS["eager"],
        [100, 200],
        7,
        [labelled, unlabelled],
    )
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["kind"], events["grid_id"], events["replay"] = EVENT_KINDS["block_enter"], [100, 200, 300], [0, 0, 4]
    events["globaltimer_ns"], events["kernel_slot"] = [1000, 2000, 3000], [0, 1, 2]
    recording = Recording(
        pid=42,
        events=events,
        launches=np.concatenate([prelude, others, eager]),
        kernels={n: {"slot": n, "name": f"k{n}"} for n in range(3)},
        dropped=0,
        started_realtime_ns=0,
    )
    out = tmp_path / "labels.pftrace"
    with out.open("wb") as file:
        write_trace([recording], file)
    ops = {s.name: s.args for s in read_trace(out).slices if s.track.startswith("ops · ")}
    assert ops["layer.0 aten::mm"] == {"op": labelled, "kernels": 1}
    assert ops[LABEL_NOT_RECORDED] == {"op": unlabelled, "kernels": 1}
    assert ops["layer.0 attention"] == {"grid_id": 300, "replay": 4}
    assert set(ops) == {"layer.0 aten::mm", LABEL_NOT_RECORDED, "layer.0 attention"}


def test_trace_arguments_beyond_int64_are_unsigned() -> None:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    event = TrackEvent()
    _annotate(event, {"grid_id": (1 << 64) - 1, "replay": 3, "op": "x"})
    assert [(a.name, a.WhichOneof("value")) for a in event.debug_annotations] == [
        ("grid_id", "uint_value"),
        ("replay", "int_value"),
        ("op", "string_value"),
    ]
    assert event.debug_annotations[0].uint_value == (1 << 64) - 1


def op_tracks(trace_path: Path) -> tuple[list[TraceSlice], list[TraceSlice], dict[str, int]]:
    trace = read_trace(trace_path)
    ops = [s for s in trace.slices if s.track.startswith("ops · ") and s.end is not None]
    kernels = [s for s in trace.slices if s.track.startswith(("stream ", "graph exec ")) and s.end is not None]
    ranks = {trace.tracks[uuid]: rank for uuid, rank in trace.ranks.items()}
    return ops, kernels, ranks


def test_a_trace_puts_each_eager_op_above_the_kernels_it_launched(start_synth, start_daemon, tmp_path: Path) -> None:
    per_op = 4
    start_synth(
        "--mode",
        "blocks",
        "--launch-trace",
        "--ops",
        str(per_op),
        "--kernels",
        "5",
        "--rate",
        "20000",
        "--duration",
        "30",
    )
    daemon = start_daemon()
    daemon.wait_processes(1)
    out = tmp_path / "ops.pftrace"
    done = gpuobsctl(daemon.address, "trace", "--duration", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    ops, kernels, ranks = op_tracks(out)
    assert len(ops) > 20 and kernels
    for op in ops:  # op k: label (k - 1) % 3, and at most its PER_OP launches
        assert op.name == LABELS[(op.args["op"] - 1) % 3] and 1 <= op.args["kernels"] <= per_op, op
        assert ranks[op.track] < ranks[op.track.removeprefix("ops · ")]  # the ops' track above the stream's
    covered = 0
    for kernel in kernels:
        above = [
            op
            for op in ops
            if op.track == "ops · " + kernel.track and op.start <= kernel.start and kernel.end <= op.end
        ]
        assert above, kernel  # every traced launch was made inside an op
        covered += 1
    whole = [op for op in ops if op.args["kernels"] == per_op]
    assert covered == sum(op.args["kernels"] for op in ops) and len(whole) >= len(ops) - 2


def test_a_trace_puts_each_graph_node_execution_under_the_op_that_captured_it(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    """Node i runs kernel i and was captured under op i // 3 + 1; the capture was over long
    before the window was recorded."""
    nodes, per_op = 6, 3
    start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(nodes),
        "--ops",
        str(per_op),
        "--kernels",
        str(nodes),
        "--rate",
        "20000",
        "--duration",
        "30",
    )
    daemon = start_daemon()
    daemon.wait_processes(1)
    time.sleep(0.5)  # the capture and the first replay are drained before the window
    out = tmp_path / "graph.pftrace"
    done = gpuobsctl(daemon.address, "trace", "--duration", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    names = [
        k["name"]
        for k in sorted(
            json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"],
            key=lambda k: k["slot"],
        )
    ]
    ops, kernels, ranks = op_tracks(out)
    executions = [k for k in kernels if k.track.startswith("graph exec ")]
    assert len({k.args["replay"] for k in executions}) > 10
    op_of = {(op.track, op.args["grid_id"], op.args["replay"]): op for op in ops}
    for execution in executions:
        op = op_of.pop(("ops · " + execution.track, execution.args["grid_id"], execution.args["replay"]))
        assert (op.start, op.end) == (execution.start, execution.end)
        assert op.name == LABELS[names.index(execution.name) // per_op % 3], (op, execution)
        assert ranks[op.track] < ranks[execution.track]
    assert op_of == {}  # no op without its execution


def test_names_are_interned_once_per_trace_and_read_back(tmp_path: Path) -> None:
    """Each slice name, category, argument name and string value is written once (Perfetto's
    interned data on the trace's one sequence) however many slices carry it; the reader resolves
    them as the trace processor does, and refuses a number used before it was interned."""
    import pytest
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

    events = np.zeros(100, dtype=EVENT_DTYPE)
    events["kind"] = [EVENT_KINDS["block_enter"], EVENT_KINDS["block_exit"]] * 50
    events["grid_id"], events["block_x"] = 77, np.repeat(np.arange(50), 2)
    events["globaltimer_ns"] = np.arange(100) * 1000
    recording = Recording(
        pid=9,
        events=events,
        launches=np.zeros(0, dtype=LAUNCH_DTYPE),
        kernels={0: {"slot": 0, "name": "gemm_kernel_with_a_long_name"}},
        dropped=0,
        started_realtime_ns=0,
    )
    out = tmp_path / "interned.pftrace"
    with out.open("wb") as file:
        write_trace([recording], file)
    data = out.read_bytes()
    assert data.count(b"gemm_kernel_with_a_long_name") == 1 and data.count(b"grid_id") == 1
    trace = read_trace(out)
    blocks = [s for s in trace.slices if s.track.startswith("SM ")]
    assert len(blocks) == 50 and {(s.name, tuple(s.categories)) for s in blocks} == {
        ("gemm_kernel_with_a_long_name", ("block",))
    }
    assert {s.args["block"] for s in blocks} == {f"({x},0,0)" for x in range(50)}
    kernels = [s for s in trace.slices if s.track.startswith("eager kernels")]
    assert [(s.name, s.categories, s.args["events"]) for s in kernels] == [
        ("gemm_kernel_with_a_long_name", ["kernel"], 100)
    ]
    parsed = Trace.FromString(data)
    for packet in parsed.packet:
        packet.sequence_flags &= ~TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    broken = tmp_path / "never-cleared.pftrace"
    broken.write_bytes(parsed.SerializeToString())
    with pytest.raises(AssertionError, match="before the sequence cleared its state"):
        read_trace(broken)
