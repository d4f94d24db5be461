"""GPU time per request (#33) in a real vLLM server (CUDA graphs on) under concurrent load of the
drop-in's server in `blocks` mode: bench/vllm_overhead.py saves `gpuobsctl requests` and `steps`
right after that load; the engine is idle then, so both see the same kept steps.

Needs the vLLM payload, as tests/gpu/test_vllm.py (skipped otherwise)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from harness import VLLM_SKIP_REASON, saved_run, vllm_bench

PAYLOAD = os.environ.get("GPUOBS_VLLM_PAYLOAD")
pytestmark = pytest.mark.skipif(not PAYLOAD and saved_run("vllm") is None, reason=VLLM_SKIP_REASON)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vllm_bench("vllm", "vllm_overhead.py", [], 570, tmp_path_factory)


def saved(bench: Path, name: str) -> dict:
    data = json.loads((bench / "cli" / "gpuobs-block" / f"{name}.json").read_text())
    assert "error" not in data, data
    return data


def test_requests_device_time_adds_up_to_the_steps(bench: Path) -> None:
    requests = saved(bench, "requests-load-blocks")
    steps = [s for s in saved(bench, "steps-load-blocks")["steps"] if s["request_ids"]]
    split = [s for s in steps if int(s["device_span_ns"])]
    assert len({s["pid"] for s in steps}) == 1 and len(split) > 0
    rows = requests["requests"]
    assert len(rows) > 1  # concurrent requests
    assert sum(int(r["device_ns"]) for r in rows) == int(requests["steps_device_ns"])
    assert int(requests["steps_device_ns"]) == sum(int(s["device_span_ns"]) for s in split)
    assert sum(int(r["tokens"]) for r in rows) == sum(int(s["tokens"]) for s in steps)
    assert any(int(s["requests"]) > 1 for s in split), "no step served several requests"


def test_busy_ratio_of_each_step_is_within_0_and_1(bench: Path) -> None:
    """Device span over host step time (one step's start to the next's), as ListSteps gives it."""
    steps = saved(bench, "steps-load-blocks")["steps"]
    measured = [s for s in steps if int(s["device_span_ns"]) and int(s["host_step_ns"])]
    assert measured
    for step in measured:
        assert step["busy_ratio"] == pytest.approx(int(step["device_span_ns"]) / int(step["host_step_ns"]))
    assert all(0 < s["busy_ratio"] <= 1 for s in measured), sorted(s["busy_ratio"] for s in measured)[-5:]
