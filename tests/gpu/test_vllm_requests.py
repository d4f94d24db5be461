"""GPU time per request in a real vLLM server (CUDA graphs on) under concurrent load of the
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


def settled(bench: Path) -> tuple[dict, list[dict], bool]:
    """The requests reply, the saved steps that had settled when it was taken (a next step began:
    host_step_ns set; the engine was idle, so the device had run past every replay), and whether
    those steps are all the process ever had (then the sums over them are the ledger's exactly)."""
    requests = saved(bench, "requests-load-blocks")
    listed = saved(bench, "steps-load-blocks")
    steps = [s for s in listed["steps"] if "host_step_ns" in s]
    (totals,) = listed["totals"]
    return requests, steps, int(totals["steps"]) == len(listed["steps"])


def test_requests_device_time_adds_up_to_the_steps(bench: Path) -> None:
    requests, steps, whole = settled(bench)
    rows = requests["requests"]
    assert len(rows) > 1  # concurrent requests
    kept_ns = sum(int(r["device_ns"]) for r in rows)
    assert kept_ns + int(requests.get("device_ns_let_go", 0)) == int(requests["steps_device_ns"]) > 0
    split = [s for s in steps if s["request_ids"] and int(s["device_span_ns"])]
    assert any(int(s["requests"]) > 1 for s in split), "no step served several requests"
    if whole and not int(requests.get("requests_let_go", 0)):
        assert int(requests["steps_device_ns"]) == sum(int(s["device_span_ns"]) for s in split)
        assert sum(int(r["tokens"]) for r in rows) == sum(int(s["tokens"]) for s in steps if s["request_ids"])


def test_busy_ratio_of_each_step_is_within_0_and_1(bench: Path) -> None:
    """Device span over host step time (one step's start to the next's), as ListSteps gives it;
    unset (not 0) where either is unknown."""
    steps = saved(bench, "steps-load-blocks")["steps"]
    measured = [s for s in steps if int(s["device_span_ns"]) and "host_step_ns" in s]
    assert measured
    for step in measured:
        assert step["busy_ratio"] == pytest.approx(int(step["device_span_ns"]) / int(step["host_step_ns"]))
    assert all(0 < s["busy_ratio"] <= 1 for s in measured), sorted(s["busy_ratio"] for s in measured)[-5:]
    assert all("busy_ratio" not in s for s in steps if not int(s["device_span_ns"]) or "host_step_ns" not in s)
    # busy time needs every node execution's whole run (its blocks' exits, GPUOBS_BLOCK_EXIT=1),
    # which the drop-in does not hook: absent, never a span passed off as one (tests/daemon/test_steps.py
    # checks it with exits hooked, on gpuobs-synth)
    assert not any("device_busy_ns" in s for s in steps)


def test_counter_mode_steps_are_timed_by_replay_spans(bench: Path) -> None:
    """`counter`, the drop-in's mode, records no block event: each settled step whose replays all
    ran in it has its device span from the replays' spans (block (0,0,0)'s first entry to its
    last), so a busy ratio within 0 and 1."""
    steps = saved(bench, "steps-load-counter")["steps"]
    counter = [
        s for s in steps if s["replays"] and all(r["mode"] == "counter" for r in s["replays"]) and "host_step_ns" in s
    ]
    assert counter, "no settled step ran in counter"
    untimed = [s["step"] for s in counter if not int(s["device_span_ns"])]
    assert not untimed, (len(untimed), len(counter), untimed[:10])
    assert all(0 < s["busy_ratio"] <= 1 for s in counter), sorted(s["busy_ratio"] for s in counter)[-5:]


def test_steps_carry_vllms_flop_estimate_and_the_rate_the_gpu_achieved(bench: Path) -> None:
    """With --enable-mfu-metrics the plugin records vLLM's own FLOP estimate of each step; over the
    measured device span it is a rate at least the one over the step's host time (vLLM's figure)."""
    steps = [s for s in saved(bench, "steps-load-blocks")["steps"] if int(s.get("tokens", 0))]
    estimated = [s for s in steps if "flops" in s]
    assert steps and len(estimated) == len(steps), f"{len(steps) - len(estimated)} of {len(steps)} steps unestimated"
    measured = [s for s in estimated if "device_flops_per_s" in s and "host_flops_per_s" in s]
    assert measured
    for step in measured:
        assert step["device_flops_per_s"] == pytest.approx(int(step["flops"]) * 1e9 / int(step["device_span_ns"]))
        assert step["device_flops_per_s"] >= step["host_flops_per_s"] > 0


def test_each_requests_kv_cache_writes_are_at_least_its_tokens_times_layers(bench: Path) -> None:
    """The KV-cache write runs a block per token per layer: a request's token share of its steps'
    cache-write blocks is its tokens x layers where the step ran unpadded, more where a CUDA graph
    padded the batch (the spare blocks shared out by tokens), and one execution a layer a step."""
    layers = int(json.loads((bench / "vllm-overhead.json").read_text())["layers"])
    views = sorted(bench.glob("cli/gpuobs-block/request-load-blocks-*.json"))
    assert views, "the bench saved no request view"
    for view in views:
        (row,) = json.loads(view.read_text())["requests"]
        # the bench views requests that began last, whose steps are all still kept in detail
        assert int(row["kernel_steps"]) == int(row["steps"]), (view.name, row["kernel_steps"], row["steps"])
        cache = [k for k in row.get("kernels", []) if k.get("kv_cache")]
        assert cache, (view.name, [k["kernel"][:60] for k in row.get("kernels", [])])
        executions = sum(int(k["executions"]) for k in cache)
        blocks = sum(int(k["blocks"]) for k in cache)
        assert executions == int(row["steps"]) * layers, (view.name, executions, row["steps"], layers)
        # each step's share is rounded to a whole block (at most one off per step)
        assert blocks >= int(row["tokens"]) * layers - int(row["steps"]), (view.name, blocks, row["tokens"])


def test_sampled_cache_stores_name_slots_of_the_requests_own_blocks(bench: Path) -> None:
    """Beside the memory patch set (`sampled`, 1 in 1,024 accesses), the plugin hands out each
    step's KV-cache blocks and the cache's layout: every sampled store of the cache kernel after
    the layout came lies in the layout and in a block of a request of its step, and no request has
    more slots than tokens (each scheduled token writes one slot)."""
    folder = bench / "cli" / "gpuobs-memory"
    listed = json.loads((folder / "requests-load-sampled.json").read_text())
    assert "error" not in listed, listed
    assert int(listed["kv_cache_layouts"]) == 1
    assert int(listed.get("cache_stores_attributed", 0)) > 0, listed
    assert int(listed.get("cache_stores_outside", 0)) == 0 and int(listed.get("cache_stores_unattributed", 0)) == 0
    for row in listed["requests"]:
        assert int(row.get("cache_slots", 0)) <= int(row["tokens"]), row
    views = sorted(folder.glob("request-load-sampled-*.json"))
    assert views, "the bench saved no request view"
    for view in views:
        (row,) = json.loads(view.read_text())["requests"]
        slots = {s for r in row.get("cache_slot_ranges", []) for s in range(int(r["first"]), int(r["last"]) + 1)}
        assert len(slots) == int(row.get("cache_slots", 0)) <= int(row["tokens"]), (view.name, row)


def test_every_store_of_the_cache_kernel_names_exactly_the_slots_of_each_requests_tokens(bench: Path) -> None:
    """The reference requests, one at a time, with every store of the cache kernel recorded
    (`memory` on reshape_and_cache only): each request wrote one slot a token of each step that
    ran in a CUDA graph, exactly; a step vLLM ran without a graph (a prefill past the largest
    captured size) stores under the step before's replay, its stores counted ambiguous."""
    folder = bench / "cli" / "gpuobs-memory"
    row = json.loads((bench / "vllm-overhead.json").read_text())["servers"]["gpuobs-memory"]
    assert row.get("cache_slots", {}).get("requests_ok") == 3, row.get("cache_slots")
    listed = json.loads((folder / "requests-reference-memory.json").read_text())
    assert "error" not in listed, listed
    assert int(listed.get("cache_stores_outside", 0)) == 0 and int(listed.get("cache_stores_unattributed", 0)) == 0
    steps = json.loads((folder / "steps-reference-memory.json").read_text())["steps"]
    views = sorted(folder.glob("request-reference-memory-*.json"))
    assert len(views) == 3, views
    for view in views:
        (request,) = json.loads(view.read_text())["requests"]
        name = request["request"]
        alone = [s for s in steps if s.get("request_ids") == [name] and s.get("pid") == request["pid"]]
        assert len(alone) == int(request["steps"]), (name, len(alone), request["steps"])  # it ran alone
        in_graphs = sum(int(s["tokens"]) for s in alone if s.get("replays"))
        slots = {s for r in request.get("cache_slot_ranges", []) for s in range(int(r["first"]), int(r["last"]) + 1)}
        assert len(slots) == int(request.get("cache_slots", 0)) == in_graphs > 0, (name, len(slots), in_graphs)
        assert request.get("cache_slots_complete", True)
