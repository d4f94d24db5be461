"""Which layer runs this kernel, for CUDA graph nodes, on the GPU: a small bf16 model captured into
a graph under the op recorder (each op reports the nodes it added, through the injector's
gpuobs_record_capture), then replayed. The daemon's own join (the graph join's census, the op
attribution's labels, fed the drained launch records) must give every kernel node of the exec a
label, the projections' GEMMs their module paths, and each node as many executions as replays,
with no record per replay. The node handles seen while capturing were the Sanitizer's at replay
in a probe that kept the captured graph; here PyTorch destroys it at instantiation, and the
report ($GPUOBS_REPORT_DIR/ops-graph-path.json) says whether they still are, or whether the
labels reached the nodes by position."""

from __future__ import annotations

import sys

from gpuobs.daemon.graph_join import GraphJoin
from gpuobs.daemon.op_attribution import OpAttribution
from gpuobs.segment import LAUNCH_KINDS, OP_NODES_DTYPE
from harness import WORKLOADS, InjectedRun, assert_small_model_labels, keep_report

REPLAYS = 6


def test_graph_nodes_carry_the_labels_recorded_at_capture(shm_dir) -> None:
    run = InjectedRun(
        [sys.executable, str(WORKLOADS / "torch_ops_labelled.py"), "--graph", str(REPLAYS)], shm_dir, mode="counter"
    )
    out = run.finish(timeout=120)
    launches = run.all_launches()
    # each step of the path, so that a failure says where it broke: the injector's answers
    # under capture, the op nodes records, the graph the exec's creation names
    kinds = launches["kind"]
    op_nodes = launches[kinds == LAUNCH_KINDS["op_nodes"]].view(OP_NODES_DTYPE)
    created = launches[kinds == LAUNCH_KINDS["graph_exec_created"]]
    replayed = launches[kinds == LAUNCH_KINDS["graph_node"]]
    path = {
        "captures": out["captures"],
        "op_nodes": [
            (int(r["op"]), int(r["graph"]), [int(n) for n in r["nodes"]["node"][: int(r["count"])]]) for r in op_nodes
        ],
        "exec_created_graphs": [int(g) for g in created["graph_node"]],
        "replayed_nodes": sorted({int(n) for n in replayed["graph_node"]}),
    }
    keep_report("ops-graph-path.json", path)
    assert out["captures"] and set(out["captures"]) == {0}, path  # 0: recorded (2: not capturing; -1: not observing)
    assert len(op_nodes) > 0 and all(op for op, _, _ in path["op_nodes"]), path
    # the probe's finding, now with the captured graph destroyed at instantiation (as PyTorch does
    # by default): reported, since the labels reach the nodes by position if it does not hold
    captured_nodes = {node for _, _, nodes in path["op_nodes"] for node in nodes}
    path["replayed_handles_are_captured_handles"] = set(path["replayed_nodes"]) <= captured_nodes
    join = GraphJoin()
    ops = OpAttribution(join.by_handle.get)
    join.on_launches(launches)
    ops.on_launches(launches)
    names = {int(entry["slot"]): entry["demangled"] for entry in run.segment.kernels()}
    assert int((launches["kind"] == LAUNCH_KINDS["graph_launch"]).sum()) == REPLAYS
    (made,) = join.execs.values()
    assert ops.bound_by_graph + ops.bound_by_order == 1, path
    rows = list(ops.graph_rows())
    path.update(bound_by_graph=ops.bound_by_graph, matched_by_position=ops.matched_by_position)
    keep_report("ops-graph-path.json", path)
    totals = ops.report()
    # every kernel node of the exec took a label, and ran once per replay
    assert sum(row.nodes for _, _, row in rows) == len(made.nodes) > 0, (rows, made.nodes)
    assert all(row.executions == row.nodes * REPLAYS for _, _, row in rows), rows
    assert totals.nodes_without_op == 0 and totals.nodes_captured >= len(made.nodes)
    recorded = set(out["labels"])
    assert {label for label, _, _ in rows} <= recorded
    table = {}
    for label, slot, _row in rows:
        table.setdefault(label, []).append(names.get(slot, "?"))
    assert_small_model_labels(table)
