"""bench/overhead.py's tables (CPU only): the rows its target checks read exist under the labels
they read, so a renamed row cannot make a target silently vanish from a GPU run's report."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import overhead  # noqa: E402


def rows_of(workload: str, configs: list, ratio: float = 1.0) -> list[dict]:
    return [{"workload": workload, "config": label, "ratio": ratio} for label, *_ in configs]


def test_the_step_spans_workload_has_a_no_tool_spread_a_floor_and_each_span_row() -> None:
    labels = [label for label, *_ in overhead.STEP_SPANS]
    assert labels[:2] == [overhead.BASELINE[0], overhead.NO_TOOL_AGAIN[0]]
    assert overhead.EMPTY_PATCH in labels
    environments = {label: extra for label, _, _, _, extra in overhead.STEP_SPANS}
    assert environments["counter"] == environments["off"] == {}  # replay spans: the default
    assert environments["counter, no replay spans (GPUOBS_REPLAY_SPANS=0)"] == {"GPUOBS_REPLAY_SPANS": "0"}
    assert environments["off, no replay spans (GPUOBS_REPLAY_SPANS=0)"] == {"GPUOBS_REPLAY_SPANS": "0"}
    assert environments["counter, launch times (GPUOBS_LAUNCH_TIMES=1)"] == {
        "GPUOBS_LAUNCH_TIMES": "1",
        "GPUOBS_REPLAY_SPANS": "0",
    }


def test_the_step_span_targets_are_judged_from_that_workloads_rows() -> None:
    rows = rows_of("decode_graph_step_spans", overhead.STEP_SPANS)
    for row in rows:
        if row["config"] == "counter":
            row["ratio"] = 1.03
    lines = overhead.check_targets(rows)
    assert "MISSED: (d) counter with replay spans / counter without <= 1.01: 1.030" in lines
    assert "met: (d) off with replay spans / off without <= 1.01: 1.000" in lines
    for row in rows:
        row["ratio"] = 1.0
    lines = overhead.check_targets(rows)
    assert "met: (d) counter with replay spans / counter without <= 1.01: 1.000" in lines
    assert "met: (d) counter with launch times / counter without spans <= 1.01: 1.000" in lines


def test_every_decode_graph_target_names_rows_its_table_has() -> None:
    lines = overhead.check_targets(rows_of("decode_graph", overhead.DECODE))
    assert any(line.startswith("met: (c) counter / empty-patch floor") for line in lines)
    assert any(line.startswith("met: (c) block-set sampled 10 / counter") for line in lines)
    silu = overhead.check_targets(rows_of("silu_and_mul", overhead.SILU))
    assert len(silu) == 5  # noop, counter, blocks, sampled/floor, naive/sampled: each found
