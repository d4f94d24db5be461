"""PyTorch under the injector: cuBLAS, elementwise and Triton kernels, eager and replayed from
a CUDA graph, counted exactly; torch.profiler is the independent oracle in eager mode."""

from __future__ import annotations

import collections
import math
import sys

import numpy as np
import pytest

from gpuobs.segment import MODES
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
    launches = run.all_launches()
    for name, (count, blocks) in census.items():
        assert name in table, (name, list(table))
        row = table[name]
        # the profiled run covers the 3 iterations; ours also saw the warm-up step
        assert row["launches"] == count * 4 // 3, name
        assert row["blocks_expected"] == blocks * 4 // 3, name
        assert row["blocks_observed"] == row["blocks_expected"], name
        mine = launches[launches["kernel_slot"] == row["slot"]]
        assert len(mine) == row["launches"]
    for name, row in table.items():
        assert row["blocks_observed"] == row["blocks_expected"], name
    # launch by launch: the same (kernel, grid) pairs as the profiler's, 4/3 as many of each
    names = {row["slot"]: name for name, row in table.items()}
    ours = collections.Counter((names[int(l["kernel_slot"])], (int(l["grid_x"]), int(l["grid_y"]), int(l["grid_z"])))
                               for l in launches if int(l["kernel_slot"]) in names)
    theirs = collections.Counter((k["name"], tuple(k["grid"])) for k in profiled)
    assert {key: count * 4 // 3 for key, count in theirs.items()} == {key: ours[key] for key in theirs}


def test_graph_replays_are_counted_exactly(shm_dir) -> None:
    run = InjectedRun(TORCH_OPS + ["--graph", "--replays", "5"], shm_dir, mode="counter")
    out = run.finish()
    launches = run.all_launches()
    nodes = launches[launches["kind"] == 2]
    assert len(nodes) > 0
    replays = np.unique(nodes["graph_launch_id"])
    assert len(replays) == out["replays"]
    per_replay = collections.Counter(nodes["graph_launch_id"].tolist())
    assert len(set(per_replay.values())) == 1  # every replay runs the same nodes
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
        run = InjectedRun(TORCH_OPS + (graph or ["--iters", "2"]), shm_dir, mode=mode, patch_set=patch_set,
                          shift=10, env={"GPUOBS_BLOCK_EXIT": "1" if mode == "blocks" else "0"})
        assert run.finish()["checksum"] == reference, (mode, graph)
    assert MODES[mode] >= 0
