"""bench/overhead.py's tables (CPU only): the rows its target checks read exist under the labels
they read, so a renamed row cannot make a target silently vanish from a GPU run's report."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import overhead  # noqa: E402


def rows_of(workload: str, configs: list, ratio: float = 1.0) -> list[dict]:
    return [{"workload": workload, "config": label, "ratio": ratio} for label, *_ in configs]


def test_the_launch_times_workload_has_a_no_tool_spread_a_floor_and_both_counter_rows() -> None:
    labels = [label for label, *_ in overhead.LAUNCH_TIMES]
    assert labels[:2] == [overhead.BASELINE[0], overhead.NO_TOOL_AGAIN[0]]
    assert overhead.EMPTY_PATCH in labels
    assert {"counter", "counter, launch times (GPUOBS_LAUNCH_TIMES=1)"} <= set(labels)
    environments = {label: extra for label, _, _, _, extra in overhead.LAUNCH_TIMES}
    assert environments["counter, launch times (GPUOBS_LAUNCH_TIMES=1)"] == {"GPUOBS_LAUNCH_TIMES": "1"}
    assert environments["counter"] == {}


def test_the_launch_times_target_is_judged_from_that_workloads_rows() -> None:
    rows = rows_of("decode_graph_launch_times", overhead.LAUNCH_TIMES)
    for row in rows:
        if row["config"].startswith("counter, launch times"):
            row["ratio"] = 1.03
    lines = overhead.check_targets(rows)
    assert "MISSED: (d) counter with launch times / counter <= 1.01: 1.030" in lines
    for row in rows:
        row["ratio"] = 1.0
    assert "met: (d) counter with launch times / counter <= 1.01: 1.000" in overhead.check_targets(rows)


def test_every_decode_graph_target_names_rows_its_table_has() -> None:
    lines = overhead.check_targets(rows_of("decode_graph", overhead.DECODE))
    assert any(line.startswith("met: (c) counter / empty-patch floor") for line in lines)
    assert any(line.startswith("met: (c) block-set sampled 10 / counter") for line in lines)
    silu = overhead.check_targets(rows_of("silu_and_mul", overhead.SILU))
    assert len(silu) == 5  # noop, counter, blocks, sampled/floor, naive/sampled: each found
