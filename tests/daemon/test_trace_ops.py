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

from gpuobs.op_labels import (LABEL_LOST, MAX_LABEL_BYTES, RECORDING_OP_BASE, OpLabels, label_records,
                              recording_prelude)
from gpuobs.segment import LAUNCH_DTYPE, LAUNCH_KINDS, MAX_OP_LABEL_BYTES
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.perfetto_trace import TraceSlice, read_trace

LABELS = ["model.layers.0.mlp.down_proj aten::mm bf16[8,6144] bf16[6144,2048]",
          "model.layers.0.self_attn vllm::unified_attention bf16[8,16,128] bf16[8,8,128]",
          "model.layers.1.input_layernorm vllm::rms_norm bf16[8,2048] bf16[2048]"]


def test_label_records_read_back_as_the_labels_they_give() -> None:
    long = "model.layers.31.mlp " + "x" * 300  # six text records
    labels = {RECORDING_OP_BASE: "short", RECORDING_OP_BASE + 1: long, RECORDING_OP_BASE + 2: "é" * 3000}
    read = OpLabels()
    read.read(label_records(labels), keep=10)
    assert read.label(RECORDING_OP_BASE) == "short" and read.label(RECORDING_OP_BASE + 1) == long
    assert read.label(RECORDING_OP_BASE + 2) == "é" * (MAX_OP_LABEL_BYTES // 2)  # cut where the injector cuts
    assert read.label(7) == LABEL_LOST and MAX_LABEL_BYTES > MAX_OP_LABEL_BYTES


def test_recording_prelude_name_one_op_per_label_and_keep_every_node_record() -> None:
    nodes = np.zeros(4, dtype=LAUNCH_DTYPE)
    nodes["kind"] = LAUNCH_KINDS["graph_node"]
    nodes["graph_exec"], nodes["graph_node"] = [9, 9, 9, 8], [1, 2, 3, 1]
    nodes["grid_id"], nodes["kernel_slot"] = [101, 102, 103, 201], [0, 1, 2, 0]
    out = recording_prelude(nodes, {(9, 1): "a", (9, 3): "a", (8, 1): "b", (7, 1): "unused"}, {41: "open op"})
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


def op_tracks(trace_path: Path) -> tuple[list[TraceSlice], list[TraceSlice], dict[str, int]]:
    trace = read_trace(trace_path)
    ops = [s for s in trace.slices if s.track.startswith("ops · ") and s.end is not None]
    kernels = [s for s in trace.slices if s.track.startswith(("stream ", "graph exec ")) and s.end is not None]
    ranks = {trace.tracks[uuid]: rank for uuid, rank in trace.ranks.items()}
    return ops, kernels, ranks


def test_a_trace_puts_each_eager_op_above_the_kernels_it_launched(start_synth, start_daemon, tmp_path: Path) -> None:
    per_op = 4
    start_synth("--mode", "blocks", "--launch-trace", "--ops", str(per_op), "--kernels", "5", "--rate",
                        "20000", "--duration", "30")
    daemon = start_daemon()
    daemon.wait_processes(1)
    out = tmp_path / "ops.pftrace"
    done = gpuobsctl(daemon.address, "trace", "--duration", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    ops, kernels, ranks = op_tracks(out)
    assert len(ops) > 20 and kernels
    for op in ops:  # op k: label (k - 1) % 3, and at most its PER_OP launches
        assert op.name == LABELS[(op.args["op"] - 1) % 3] and 1 <= op.args["kernels"] <= per_op, op
        assert ranks[op.track] < ranks[op.track.removeprefix("ops · ")]  # the ops' track above the stream's
    covered = 0
    for kernel in kernels:
        above = [op for op in ops if op.track == "ops · " + kernel.track and op.start <= kernel.start
                 and kernel.end <= op.end]
        assert above, kernel  # every traced launch was made inside an op
        covered += 1
    whole = [op for op in ops if op.args["kernels"] == per_op]
    assert covered == sum(op.args["kernels"] for op in ops) and len(whole) >= len(ops) - 2


def test_a_trace_puts_each_graph_node_execution_under_the_op_that_captured_it(start_synth, start_daemon,
                                                                             tmp_path: Path) -> None:
    """Node i runs kernel i and was captured under op i // 3 + 1; the capture was over long
    before the window was recorded."""
    nodes, per_op = 6, 3
    start_synth("--mode", "blocks", "--graph-nodes", str(nodes), "--ops", str(per_op), "--kernels", str(nodes),
                "--rate", "20000", "--duration", "30")
    daemon = start_daemon()
    daemon.wait_processes(1)
    time.sleep(0.5)  # the capture and the first replay are drained before the window
    out = tmp_path / "graph.pftrace"
    done = gpuobsctl(daemon.address, "trace", "--duration", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    names = [k["name"] for k in sorted(json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top",
                                                            "0").stdout)["kernels"], key=lambda k: k["slot"])]
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
