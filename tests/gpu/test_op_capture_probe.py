"""Which layer runs this kernel, for graph nodes: a label recorded while PyTorch captures a graph
can name the nodes of that op only if the node handles seen at capture are the ones the injector's
node-launch records carry when the graph replays. This records whether they are (the design of
op attribution for graphs depends on it) and asserts what must hold whatever the answer: the
program runs under the injector and every replay's node executions are counted. Findings go to
$GPUOBS_REPORT_DIR/op-capture-probe.json."""

from __future__ import annotations

import collections
import sys

from gpuobs.segment import LAUNCH_KINDS
from harness import WORKLOADS, InjectedRun, keep_report


def test_capture_time_node_handles_against_replay_records(shm_dir) -> None:
    run = InjectedRun([sys.executable, str(WORKLOADS / "capture_ops.py")], shm_dir, mode="counter")
    out = run.finish(timeout=120)
    launches = run.all_launches()
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
    assert len(nodes) > 0  # the first replay is learned node by node
    replayed = set(int(handle) for handle in nodes["graph_node"])
    names = {int(row["slot"]): name for name, row in run.kernel_table().items()}
    per_handle = {int(n["graph_node"]): names.get(int(n["kernel_slot"]), "?") for n in nodes}
    captured = [dict(op, kernels=[per_handle.get(handle) for handle in op["leaves"]],
                     added_kernels=[per_handle.get(handle) for handle in op["added"]]
                     if isinstance(op["added"], list) else op["added"]) for op in out["ops"]]
    leaves = {handle for op in out["ops"] for handle in op["leaves"]}
    findings = {
        "ops": captured, "replayed_node_handles": sorted(replayed), "capture_leaf_handles": sorted(leaves),
        "leaves_found_in_replay_records": len(leaves & replayed), "capture_leaves": len(leaves),
        "replay_node_handles": len(replayed),
        "labels_at_capture_name_replayed_nodes": bool(leaves) and leaves <= replayed,
    }
    keep_report("op-capture-probe.json", findings)
    graph_launches = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    assert len(graph_launches) == out["replays"]
    table = run.kernel_table()
    per_kernel = collections.Counter(int(n["kernel_slot"]) for n in nodes)
    for slot, count in per_kernel.items():  # each node kernel ran in every replay, and in the warm-up
        row = next(r for r in table.values() if int(r["slot"]) == slot)
        assert row["launches"] >= count * out["replays"], row
        assert row["blocks_observed"] == row["blocks_expected"]
