"""A real vLLM OpenAI server (FULL_AND_PIECEWISE CUDA graphs, FlashAttention 3) under gpuobs, with a
real gpuobsd beside it. One run of bench/vllm_overhead.py starts the server with no
tool, with the drop-in deploy/systemd/vllm-gpuobs.conf (modes off, counter and blocks switched
live) and with the memory patch set (sampled), then with no tool again; the tests below judge
what it recorded.

Needs the vLLM payload (an offline vLLM 0.25.1 site folder in two chunk folders, docs/internals.md:
The GPU suite): GPUOBS_VLLM_PAYLOAD names an unpacked chunk folder (skipped otherwise). Its reports go to
$GPUOBS_REPORT_DIR/vllm when that is set."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from harness import VLLM_SKIP_REASON, saved_run, vllm_bench

PAYLOAD = os.environ.get("GPUOBS_VLLM_PAYLOAD")
INJECTED = ("gpuobs-block", "gpuobs-memory")
MODES = ("none-cold", "off", "counter", "blocks", "sampled", "none")
REFERENCE_TOKENS = 32  # bench/vllm_overhead.py's reference requests: one at a time, 32 tokens

JUDGES_SAVED_RUN = saved_run("vllm") is not None  # judged without a GPU (conftest)

pytestmark = pytest.mark.skipif(not PAYLOAD and not JUDGES_SAVED_RUN, reason=VLLM_SKIP_REASON)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vllm_bench("vllm", "vllm_overhead.py", [], 570, tmp_path_factory)


def result(bench: Path) -> dict:
    return json.loads((bench / "vllm-overhead.json").read_text())


def cli(bench: Path, config: str, name: str):
    return json.loads((bench / "cli" / config / f"{name}.json").read_text())


def test_every_server_and_mode_serves_the_same_tokens(bench: Path) -> None:
    data = result(bench)
    for name, row in data["servers"].items():
        assert row.get("healthy"), (name, row.get("log_tail", row))
    for mode in MODES:
        row = data["modes"][mode]
        assert row["requests_failed"] == 0 and row["requests_ok"] == data["load"]["requests"], (mode, row)
    references = data["reference_tokens"]
    assert set(references) == set(MODES)
    first = references["none"]
    assert len(first) == 3 and all(len(tokens) == REFERENCE_TOKENS for tokens in first)
    assert all(tokens == first for tokens in references.values()), references
    # the injected servers ran with the drop-in's environment, only its paths replaced
    assert data["drop_in_environment"]["GPUOBS_PATCH_SET"] == "block"
    assert data["replaced_paths"] == ["CUDA_INJECTION64_PATH", "GPUOBS_CUBIN_DIR", "GPUOBS_SEGMENT_DIR"]


def test_kernels_of_vllm_cublas_and_flashattention_with_exact_blocks(bench: Path) -> None:
    for config in INJECTED:
        kernels = cli(bench, config, "kernels")["kernels"]
        names = [k["name"] for k in kernels]
        assert any("vllm" in n or "reshape_and_cache" in n for n in names), names
        assert any(re.search(r"nvjet|gemm|cublas|cutlass", n, re.I) for n in names), names
        assert any(re.search(r"flash", n, re.I) for n in names), names
        for k in kernels:
            expected = int(k["blocks_expected"])
            accounted = int(k["blocks_observed"]) + int(k["blocks_unpatched"]) + int(k["blocks_unobserved"])
            assert expected == accounted, k
        attention = [k for k in kernels if re.search(r"flash", k["name"], re.I)]
        assert sum(int(k["blocks_observed"]) for k in attention) > 0


def test_one_replay_per_decode_step_of_a_request(bench: Path) -> None:
    """The reference requests ran alone, one after another; their steps were captured right after
    them, in each mode of the drop-in's server (the load that follows evicts them)."""
    (totals,) = cli(bench, "gpuobs-block", "steps")["totals"]
    # Launches before the first step are the recorded ones only (graph replays; eager launches
    # with the launch trace): eager launches are counted per kernel on the device, not per step.
    assert int(totals["steps"]) > 0
    graphs = {int(g["graph_exec"]) for g in cli(bench, "gpuobs-block", "graphs")["graphs"]}
    for mode in ("off", "counter", "blocks"):
        steps = cli(bench, "gpuobs-block", f"steps-reference-{mode}")["steps"]
        by_request: dict[str, list[dict]] = {}
        for step in steps:
            if int(step["requests"]) == 1 and step["request_ids_complete"]:
                by_request.setdefault(step["request_ids"][0], []).append(step)
        alone = [s for s in by_request.values() if len(s) == REFERENCE_TOKENS]  # the prefill and 31 decodes
        assert len(alone) >= 2, (mode, {k: len(v) for k, v in by_request.items()})
        unjoined, decodes = 0, 0
        for request_steps in alone:
            decode = [s for s in request_steps if int(s["tokens"]) == 1]
            assert len(decode) == REFERENCE_TOKENS - 1, [(s["step"], s["tokens"]) for s in request_steps]
            for step in decode:
                assert len(step["replays"]) == 1, step  # the FULL graph of batch size 1
                replay = step["replays"][0]
                assert int(replay["graph_exec"]) in graphs and replay["mode"] == mode, replay
                decodes += 1
                if mode == "blocks" and not replay["joined"]:
                    unjoined += 1  # the daemon says it did not join it (its analysis budget skipped events)
                elif mode == "blocks":  # block events exist only in blocks mode: each node joined
                    assert int(replay["nodes_matched"]) == int(replay["node_executions"]) > 0, replay
        # seen on an H100 at 66a890a: 1 of 93 replays unjoined, said so; never a wrong join
        assert unjoined <= decodes // 20, (mode, unjoined, decodes)


def test_mode_switches_live_while_requests_are_served(bench: Path) -> None:
    switching = result(bench)["servers"]["gpuobs-block"]["live_switching"]
    assert switching["requests"] > 0 and switching["requests_failed"] == 0, switching
    assert [s["rc"] for s in switching["switches"]] == [0] * len(switching["switches"]), switching


def test_status_labels_and_metrics_name_the_engine(bench: Path) -> None:
    for config, final_mode in (("gpuobs-block", "blocks"), ("gpuobs-memory", "sampled")):
        pid = result(bench)["servers"][config]["pid"]
        status = cli(bench, config, "status")
        (engine,) = [p for p in status["processes"] if int(p["pid"]) == pid]
        assert engine["label"].startswith("vllm engine rank 0"), engine
        assert int(engine["engine_steps"]) > 0 and int(engine["injector"]["modules_patched"]) > 0, engine
        assert int(engine["accounting_errors"]) == 0, engine
        metrics = (bench / "cli" / config / "metrics.txt").read_text()
        # series carry the engine's identity (rank 0 of its model on its GPU); its pid only the info series
        assert re.search(rf'gpuobs_process_info\{{[^}}]*pid="{pid}"[^}}]*rank="0"', metrics), config
        assert re.search(r'gpuobs_engine_steps_total\{[^}]*rank="0"[^}]*\} [1-9]', metrics)
        assert re.search(rf'gpuobs_mode\{{[^}}]*mode="{final_mode}"[^}}]*rank="0"[^}}]*\}} 1\.0', metrics)
        assert re.search(r'gpuobs_blocks_total\{[^}]*kernel="[^"]*"[^}]*rank="0"[^}]*\} [1-9]', metrics), config
