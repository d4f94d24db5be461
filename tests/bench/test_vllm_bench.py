"""bench/vllm_overhead.py driven end to end against a stand-in vLLM server (CPU only): every
server started and stopped, the reference requests and the load made, a real gpuobsd asked to
switch modes, figures and ratios written. The real server runs in tests/gpu/test_vllm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpuobs_testing.daemon import free_port

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).parent / "stand_in"


@pytest.mark.slow
def test_the_bench_measures_every_server_and_records_what_failed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "vllm_overhead.py"),
            "--payload",
            str(STAND_IN / "payload"),
            "--out",
            str(out),
            "--model",
            str(tmp_path / "model"),
            "--requests",
            "8",
            "--tokens",
            "8",
            "--port-base",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--commit",
            "test",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "vllm-overhead.json").read_text())
    assert list(data["servers"]) == ["none-cold", "gpuobs-block", "gpuobs-memory", "none"]
    for name, row in data["servers"].items():
        assert row["healthy"] and row["engine_init_s"] == 1.25 and row["graph_capture_s"] == 1.0, (name, row)
    assert data["servers"]["gpuobs-memory"]["environment"]["GPUOBS_PATCH_SET"] == "memory"
    # modes run without a switch: measured
    assert json.loads((out / "cli" / "gpuobs-memory" / "steps-reference-sampled.json").read_text())["steps"] == []
    for mode in ("none-cold", "sampled", "none"):
        row = data["modes"][mode]
        assert row["requests_ok"] == 8 and row["output_tokens"] == 64 and row["p99_ms"] >= row["p50_ms"] > 0
    assert data["ratios_to_none"]["none"] == {
        "tokens_per_s": 1.0,
        "p50_ms": 1.0,
        "p99_ms": 1.0,
        "start_s": 1.0,
        "engine_init_s": 1.0,
        "graph_capture_s": 1.0,
    }
    assert data["tokens_identical"] and set(data["reference_tokens"]) == {"none-cold", "sampled", "none"}
    # the stand-in has no CUDA, so gpuobsd has no process to switch: recorded as failed, not hidden
    assert data["servers"]["gpuobs-block"]["pid"] is None
    for mode in ("off", "counter", "blocks"):
        assert data["modes"][mode]["requests_failed"] == 16 and data["modes"][mode]["tokens_per_s"] == 0.0
        assert "no process to switch" in data["modes"][mode]["set_mode_error"]
    switching = data["servers"]["gpuobs-block"]["live_switching"]
    assert switching["requests"] > 0 and switching["requests_failed"] == 0 and len(switching["switches"]) == 6
    assert (out / "cli" / "gpuobs-block" / "metrics.txt").read_text().startswith("# HELP")
    assert '"event": "ready"' in (out / "logs" / "gpuobsd.log").read_text()


def test_the_decode_bench_interleaves_fresh_processes_and_reports_ratios_and_spreads(tmp_path: Path) -> None:
    """bench/vllm_decode.py against the stand-in offline API: every process started, let go in
    turn and stopped; per round and mode the figures, ratios to the no-tool process of the same
    round, the no-tool spread, the same tokens everywhere."""
    out = tmp_path / "out"
    # the stand-in loads no tool library: the floor tool (a bench build's) need only be named
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "libgpuobs_floor_tool.so").touch()
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "vllm_decode.py"),
            "--tool-dir",
            str(tools),
            "--payload",
            str(STAND_IN / "payload"),
            "--out",
            str(out),
            "--model",
            str(tmp_path / "model"),
            "--configs",
            "none,floor-patch,floor-steady",
            "--rounds",
            "3",
            "--repeats",
            "2",
            "--metrics-port",
            str(free_port()),
            "--commit",
            "test",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "vllm-overhead.json").read_text())
    runs = data["runs"]
    assert [(r["config"], r["round"]) for r in runs] == [
        ("none", 0),
        ("floor-patch", 0),
        ("floor-steady", 0),
        ("floor-patch", 1),
        ("floor-steady", 1),
        ("none", 1),  # the order rotates each round
        ("floor-steady", 2),
        ("none", 2),
        ("floor-patch", 2),
    ]
    for run in runs:
        figures = run["figures"]["modes"]["none"]
        assert len(figures["single_ms_per_token"]) == 2 and len(figures["batch_tokens_per_s"]) == 2, run
        # the process's CPU time per token: never above the wall time of all its threads
        assert len(figures["single_cpu_ms_per_token"]) == 2 and len(figures["batch_cpu_ms_per_token"]) == 2, run
        assert all(cpu > 0 for cpu in figures["single_cpu_ms_per_token"] + figures["batch_cpu_ms_per_token"]), run
        assert run["figures"]["engine_ready_s"] >= 0.2
    summary = data["summary"]
    assert set(summary["rows"]) == {"none", "floor-patch", "floor-steady"}
    none = summary["rows"]["none"]["single_ms_per_token"]
    assert none["ratio_per_round"] == [1.0, 1.0, 1.0] and len(none["per_round"]) == 3
    for row in summary["rows"].values():
        assert 0.5 < row["batch_tokens_per_s"]["cost"] < 2 and len(row["batch_tokens_per_s"]["ratio_per_round"]) == 3
        for metric in ("single_ms_per_token", "single_cpu_ms_per_token", "batch_cpu_ms_per_token"):
            assert len(row[metric]["best_ratio_per_round"]) == 3 and row[metric]["best_cost"] > 0, (metric, row)
    assert summary["rows"]["none"]["single_cpu_ms_per_token"]["best_ratio_per_round"] == [1.0, 1.0, 1.0]
    spread = summary["no_tool_spread"]["single_ms_per_token"]
    assert spread["min_over_median"] <= 1 <= spread["max_over_median"] and len(spread["per_round"]) == 3
    assert summary["tokens_identical"] and len(summary["token_groups"][0]) == 9
    assert set(summary["engine_ready"]) == {"none", "floor-patch", "floor-steady"}


def test_request_views_are_of_the_requests_that_began_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon keeps the last steps in detail: the views must be of requests whose steps it still
    holds (at 344fd1a the three with the most device time came from an earlier round and had none)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import vllm_overhead

    rows = [{"request": f"r{step}", "first_step": step, "device_ns": 10_000 - step} for step in (5, 900, 40, 700, 3)]
    (tmp_path / "requests-load-blocks.json").write_text(json.dumps({"requests": rows}))
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(vllm_overhead, "ctl_json", lambda daemon, into, *args: asked.append((into.name, *args)))
    vllm_overhead.save_request_views(None, tmp_path, count=2)
    assert asked == [
        ("request-load-blocks-0.json", "request", "r900"),
        ("request-load-blocks-1.json", "request", "r700"),
    ]
