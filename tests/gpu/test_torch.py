"""PyTorch under the injector: cuBLAS, elementwise and Triton kernels, eager and replayed from
a CUDA graph, counted exactly; torch.profiler is the independent oracle in eager mode."""

from __future__ import annotations

import collections
import math
import sys

import pytest
from gpuobs.segment import CONTROL_STATUS, GRAPH_NODES_RECORDED, LAUNCH_KINDS, MODES
from harness import WORKLOADS, InjectedRun

TORCH_OPS = [sys.executable, str(WORKLOADS / "torch_ops.py")]


def profiler_kernels(shm_dir) -> list[dict]:
    """Kernel events as torch.profiler records them, in a run without the injector."""
    run = InjectedRun(TORCH_OPS + ["--profile", "--iters", "3"], shm_dir, inject=False)
    return run.finish()["profiler_kernels"]


def census_of(kernels: list[dict]) -> dict[str, tuple[int, int]]:
    """name -> (launches, blocks)."""
    census: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for kernel in kernels:
        census[kernel["name"]][0] += 1
        census[kernel["name"]][1] += math.prod(kernel["grid"])
    return {name: tuple(value) for name, value in census.items()}


def test_eager_counts_equal_the_profilers(shm_dir) -> None:
    profiled = profiler_kernels(shm_dir)
    census = census_of(profiled)
    assert any("nvjet" in name or "gemm" in name.lower() for name in census), census  # cuBLAS
    assert any("scale_add_kernel" in name for name in census), census  # Triton
    assert any("elementwise" in name for name in census), census
    run = InjectedRun(TORCH_OPS + ["--iters", "3"], shm_dir, mode="counter")
    run.finish()
    table = run.kernel_table()
    assert len(run.all_launches()) == 0  # counted on the device: no host record per launch
    for name, (count, blocks) in census.items():
        assert name in table, (name, list(table))
        row = table[name]
        # the profiled run covers the 3 iterations; ours also saw the warm-up step
        assert row["launches"] == count * 4 // 3, name
        assert row["blocks_expected"] == blocks * 4 // 3, name
        assert row["blocks_observed"] == row["blocks_expected"], name
        assert row["other_shapes"] == 0 and sum(row["shapes"].values()) == row["launches"], name
    for name, row in table.items():
        assert row["blocks_observed"] == row["blocks_expected"], name
    # shape by shape: the same (kernel, grid, block) as the profiler's, 4/3 as many of each
    ours = collections.Counter(
        {
            (name, grid, block): launches
            for name, row in table.items()
            for (grid, block), launches in row["shapes"].items()
        }
    )
    theirs = collections.Counter((k["name"], tuple(k["grid"]), tuple(k["block"])) for k in profiled)
    assert {key: count * 4 // 3 for key, count in theirs.items()} == {key: ours[key] for key in theirs}


@pytest.mark.parametrize("trace", [False, True])
def test_graph_replays_are_counted_exactly(shm_dir, trace: bool) -> None:
    """One host record per replay; node records only for the replay that learns the nodes (the
    first), or for every replay with the launch trace. The device counts every node execution."""
    run = InjectedRun(
        TORCH_OPS + ["--graph", "--replays", "5"],
        shm_dir,
        mode="counter",
        env={"GPUOBS_LAUNCH_TRACE": "1" if trace else "0"},
    )
    out = run.finish()
    launches = run.all_launches()
    graph_launches = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    assert len(graph_launches) == out["replays"]
    recorded = (graph_launches["flags"] & GRAPH_NODES_RECORDED) != 0
    assert recorded.sum() == (out["replays"] if trace else 1) and recorded[0]
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
    assert len(nodes) > 0
    per_replay = collections.Counter(nodes["graph_launch_id"].tolist())
    assert len(per_replay) == recorded.sum()
    assert len(set(per_replay.values())) == 1  # every replay runs the same nodes
    # every node execution counted on the device: a node's kernel ran once per replay, plus in
    # the 2 eager steps before the capture (unless cuBLAS picked another kernel under capture)
    table = run.kernel_table()
    slots = {int(row["slot"]): row for row in table.values()}
    first = nodes["graph_launch_id"] == nodes["graph_launch_id"][0]
    for slot, per_graph in collections.Counter(nodes["kernel_slot"][first].tolist()).items():
        eager = slots[slot]["launches"] - out["replays"] * per_graph
        assert eager in (0, 2 * per_graph), (slots[slot], per_graph)
    for name, row in run.kernel_table().items():
        assert row["blocks_observed"] == row["blocks_expected"], name
        assert row["blocks_unpatched"] == 0, name
    # graph nodes keep their grid id across replays
    by_node = collections.defaultdict(set)
    for node in nodes:
        by_node[int(node["graph_node"])].add(int(node["grid_id"]))
    assert all(len(ids) == 1 for ids in by_node.values())


@pytest.mark.parametrize("mode, patch_set", [("counter", "block"), ("blocks", "block"), ("sampled", "memory")])
def test_torch_outputs_unchanged(shm_dir, mode: str, patch_set: str) -> None:
    """Same bytes out with and without the injector (block exits hooked in `blocks`)."""
    reference = InjectedRun(TORCH_OPS + ["--iters", "2"], shm_dir, inject=False).finish()["checksum"]
    for graph in ([], ["--graph", "--replays", "3"]):
        if graph:
            reference = InjectedRun(TORCH_OPS + graph, shm_dir, inject=False).finish()["checksum"]
        run = InjectedRun(
            TORCH_OPS + (graph or ["--iters", "2"]),
            shm_dir,
            mode=mode,
            patch_set=patch_set,
            shift=10,
            env={"GPUOBS_BLOCK_EXIT": "1" if mode == "blocks" else "0"},
        )
        assert run.finish()["checksum"] == reference, (mode, graph)
        # and the outputs were compared in that mode, not in one the injector fell back to
        applied = run.segment.control_state()
        assert (applied["applied_mode"], applied["status"]) == (MODES[mode], CONTROL_STATUS["ok"]), (mode, graph)
