"""bench/vllm_overhead.py driven end to end against a stand-in vLLM server (CPU only): every
server started and stopped, the reference requests and the load made, a real gpuobsd asked to
switch modes, figures and ratios written; and its cost run of a big model size, which takes
minutes of device time per server and so is checked here first. The real server runs in
tests/gpu/test_vllm.py."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from gpuobs_testing import vllm_payload
from gpuobs_testing.daemon import free_port, quiet_port_base

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).parent / "stand_in"


def run_bench(out: Path, model: Path, *extra: str) -> str:
    """bench/vllm_overhead.py against the stand-in, a small load, on ports of its own."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "vllm_overhead.py"),
            *("--payload", str(STAND_IN / "payload"), "--out", str(out), "--model", str(model)),
            *("--requests", "8", "--tokens", "8", "--commit", "test"),
            *("--port-base", str(quiet_port_base()), "--metrics-port", str(free_port())),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_bench_measures_every_server_and_records_what_failed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_bench(out, tmp_path / "model")
    data = json.loads((out / "vllm-overhead.json").read_text())
    assert list(data["servers"]) == ["none-cold", "gpuobs-block", "gpuobs-memory", "none"]
    for name, row in data["servers"].items():
        assert row["healthy"], (name, row.get("log_tail"), row)
        assert row["engine_init_s"] == 1.25 and row["graph_capture_s"] == 1.0, (name, row)
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

    steps = (5, 900, 40, 700, 3)
    rows = [{"pid": 7, "request": f"r{step}", "first_step": step, "device_ns": 10_000 - step} for step in steps]
    # an earlier server's engine, exited and still kept by the daemon, its steps counted apart
    rows.append({"pid": 6, "request": "old", "first_step": 13_000, "device_ns": 1})
    (tmp_path / "requests-load-blocks.json").write_text(json.dumps({"requests": rows}))
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(vllm_overhead, "ctl_json", lambda daemon, into, *args: asked.append((into.name, *args)))
    vllm_overhead.save_request_views(None, tmp_path, "blocks", 7, count=2)
    assert asked == [
        ("request-load-blocks-0.json", "request", "r900", "--pid", "7"),
        ("request-load-blocks-1.json", "request", "r700", "--pid", "7"),
    ]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/vllm_overhead.py, imported as the scripts import their neighbours."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("vllm_overhead")


@pytest.mark.slow
def test_a_cost_run_interleaves_fresh_no_tool_servers_with_the_tools(tmp_path: Path) -> None:
    """--model-size 8b against the stand-in: the default cost list (three no-tool servers, the
    drop-in in four modes, the floor tool), each given the size's arguments and its tool's
    environment, a single-stream load beside the batch one, and every mode's figures over the
    no-tool servers' median with their spread. The model is there already (the stand-in's maker
    cannot make the 8B class: its reshape needs torch), as the decode bench's call leaves it."""
    out = tmp_path / "out"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 32}))
    tools = tmp_path / "tools"  # the stand-in loads no tool library: the floor tool need only be named
    tools.mkdir()
    (tools / "libgpuobs_floor_tool.so").touch()
    stdout = run_bench(out, model, "--model-size", "8b", "--tool-dir", str(tools), "--single-tokens", "8")
    data = json.loads((out / "vllm-overhead.json").read_text())
    assert list(data["servers"]) == ["none", "gpuobs-block", "none-2", "floor-steady", "none-3"]
    assert [row["server"] for row in data["servers"].values()] == [
        "none",
        "gpuobs-block",
        "none",
        "floor-steady",
        "none",
    ]
    assert data["model_size"] == "8b" and data["layers"] == 32 and "vocab_size" in data["model"]
    assert data["load"] == {
        "requests": 8,
        "tokens": 8,
        "concurrency": 32,
        "single": {"requests": 2, "tokens": 8},
    }
    for label, row in data["servers"].items():
        assert row["healthy"] and "live_switching" not in row, (label, row)
        log = (out / "logs" / f"{label}.log").read_text()
        arguments = json.loads(log.split("INFO stand-in arguments: ", 1)[1].splitlines()[0])
        assert arguments[-len(data["serve_args"]) :] == data["serve_args"], label
        tool = json.loads(log.split("INFO stand-in tool environment: ", 1)[1].splitlines()[0])
        if row["server"] == "floor-steady":
            assert row["tool"] == "libgpuobs_floor_tool.so"
            assert tool == {
                "CUDA_INJECTION64_PATH": str(tools / "libgpuobs_floor_tool.so"),
                "GPUOBS_FLOOR_CALLBACKS": "steady",
                "GPUOBS_FLOOR_PATCH": "1",
            }
        elif row["server"] == "gpuobs-block":
            assert tool["CUDA_INJECTION64_PATH"].endswith("libgpuobs_injector.so") and len(tool) == 1, tool
        else:
            assert tool == {}, (label, tool)
    serve = data["serve_args"]
    assert serve[serve.index("--gpu-memory-utilization") + 1] == "0.35"
    assert serve[serve.index("--max-num-seqs") + 1] == "32"
    capture = json.loads(serve[serve.index("--compilation-config") + 1])["cudagraph_capture_sizes"]
    assert capture[0] == 1 and capture[-1] == 32
    # every mode's figures, a server given again under "MODE (LABEL)"
    modes = data["modes"]
    no_tool = ("none", "none (none-2)", "floor-steady", "none (none-3)")
    assert set(modes) == {*no_tool, "off", "counter", "sampled --shift 10", "blocks"}
    for key in no_tool:
        row = modes[key]
        assert row["requests_ok"] == 8 and row["single_requests_failed"] == 0 and row["single_ms_per_token"] > 0, key
    assert modes["none (none-3)"]["server"] == "none-3"
    # no CUDA, so no process to switch: the shift reached gpuobsctl as its own flag, and failed there
    for mode in ("off", "counter", "sampled --shift 10", "blocks"):
        assert "no process to switch" in modes[mode]["set_mode_error"], (mode, modes[mode]["set_mode_error"])
    assert data["tokens_identical"] and set(data["reference_tokens"]) == set(no_tool)
    cost = data["cost"]
    assert cost["baseline"] == ["none", "none-2", "none-3"]
    for metric in ("tokens_per_s", "p50_ms", "p99_ms", "single_ms_per_token"):
        spread = cost["no_tool_spread"][metric]
        assert set(spread["per_server"]) == set(cost["baseline"]), metric
        assert spread["min_over_median"] <= 1 <= spread["max_over_median"], spread
        assert cost["rows"]["none"][metric]["ratio"] == 1.0  # the median of three over their median
        floor = cost["rows"]["floor-steady"][metric]
        assert list(floor["ratio_per_server"]) == ["floor-steady"] and 0.2 < floor["cost"] < 5, floor
    # the drop-in's rows are there, empty: every round of theirs failed its switch
    for mode in ("off", "counter", "sampled --shift 10", "blocks"):
        assert cost["rows"][f"gpuobs-block:{mode}"] == {}, mode
    assert set(cost["start"]) == {"none", "gpuobs-block", "floor-steady"} and len(cost["start"]["none"]["start_s"]) == 3
    # the console ends with the cost table, what the device call's tail shows
    table = stdout.splitlines()[-7:]
    assert table[0].startswith("server:mode") and [line.split()[0] for line in table[1:3]] == [
        "none",
        "gpuobs-block:off",
    ]


def test_the_served_sizes_are_the_decode_benchs_and_the_tiny_run_is_unchanged(served: ModuleType) -> None:
    """The sizes' loads are vllm_decode.py's WORKLOAD (offline and served figures of the same
    work), their servers get the size's share of GPU memory and a graph up to their batch; the
    floor server is vllm_decode.py's floor-steady; the cost list puts a fresh no-tool server on
    both sides of every tool's; the tiny model's run keeps its arguments and servers."""
    import vllm_decode
    import vllm_models

    assert served.SERVE_ARGS == served.serve_args(served.TINY)
    assert served.DEFAULT_SERVERS == "none-cold,gpuobs-block,gpuobs-memory,none"
    assert served.SERVERS["gpuobs-block"][2] == ["off", "counter", "blocks"]
    assert served.WORKLOAD is vllm_decode.WORKLOAD is vllm_models.WORKLOAD
    assert set(vllm_models.WORKLOAD) == set(vllm_models.MODELS)
    for size, (single, batch, _) in vllm_models.WORKLOAD.items():
        arguments = served.serve_args(size)
        assert arguments[arguments.index("--gpu-memory-utilization") + 1] == str(vllm_models.GPU_MEMORY[size])
        assert arguments[arguments.index("--max-num-seqs") + 1] == str(batch)
        sizes = json.loads(arguments[arguments.index("--compilation-config") + 1])["cudagraph_capture_sizes"]
        assert sizes[-1] == batch and sizes == sorted(sizes), (size, sizes)
        assert 1 + single + 16 <= int(arguments[arguments.index("--max-model-len") + 1]), size
    tool, environment, _ = served.SERVERS["floor-steady"]
    assert tool == "floor" and environment == vllm_decode.CONFIGS["floor-steady"][1]
    assert vllm_decode.CONFIGS["floor-steady"][0] == served.FLOOR_TOOL
    names = served.COST_SERVERS.split(",")
    assert names.count("none") >= 3 and names[0] == names[-1] == "none"
    assert all(names[i - 1] == names[i + 1] == "none" for i, name in enumerate(names) if name != "none")
    assert {served.SERVERS[name][0] for name in names} == {None, "gpuobs", "floor"}
    labels = served.server_labels(["none", "gpuobs-block", "none", "none"])
    assert labels == ["none", "gpuobs-block", "none-2", "none-3"]
    assert [served.set_mode_args(m) for m in served.COST_BLOCK_MODES.split(",")] == [
        ["set-mode", "off"],
        ["set-mode", "counter"],
        ["set-mode", "sampled", "--shift", "10"],
        ["set-mode", "blocks"],
    ]
    assert served.file_part("sampled --shift 10") == "sampled-shift-10" and served.file_part("off") == "off"


def test_both_benches_make_a_size_one_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm_models.make: the maker's flags of the size, then (8B class) its layer reshaped and
    copied; nothing made where a model is already."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import vllm_models

    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        calls.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(vllm_payload.subprocess, "run", run)
    assert vllm_models.make(tmp_path, tmp_path / "8b", {}, "8b")
    assert calls[0][3:] == ["--layers", "1", "--hidden", "4096", "--vocab", "8192"]
    assert calls[1][3:5] == [str(tmp_path / "8b"), "32"] and "vocab_size=128256" in calls[1]
    calls.clear()
    assert vllm_models.make(tmp_path, tmp_path / "host", {}, "host-bound") and len(calls) == 1
    (tmp_path / "there").mkdir()
    assert not vllm_models.make(tmp_path, tmp_path / "there", {}, "8b") and len(calls) == 1


def test_the_cost_summary_divides_by_the_median_no_tool_server(served: ModuleType) -> None:
    def server(name: str, mode: str, *tokens_per_s: float, start: float = 60.0) -> dict:
        rounds = [{"tokens_per_s": t, "p50_ms": 1000 / t, "requests_failed": 0} for t in tokens_per_s]
        return {"server": name, "start_s": start, "loads": {mode: rounds}}

    servers = {
        "none": server("none", "none", 100.0, start=120.0),
        "gpuobs-block": {
            "server": "gpuobs-block",
            "start_s": 70.0,
            "loads": {
                "off": [{"tokens_per_s": 95.0, "requests_failed": 0}, {"tokens_per_s": 85.0, "requests_failed": 0}],
                "blocks": [{"tokens_per_s": 0.0, "requests_failed": 8, "set_mode_error": "x"}],
            },
        },
        "none-2": server("none", "none", 90.0),
        "floor-steady": server("floor-steady", "floor-steady", 99.0),
        "none-3": server("none", "none", 110.0),
    }
    cost = served.cost_summary(servers)
    spread = cost["no_tool_spread"]["tokens_per_s"]
    assert spread["median"] == 100.0 and spread["min_over_median"] == 0.9 and spread["max_over_median"] == 1.1
    off = cost["rows"]["gpuobs-block:off"]["tokens_per_s"]
    assert off["per_server"] == {"gpuobs-block": 90.0} and off["ratio"] == 0.9 and off["cost"] == 1.1111
    assert cost["rows"]["gpuobs-block:blocks"] == {}  # a failed switch is no figure
    assert cost["rows"]["floor-steady"]["p50_ms"]["cost"] == pytest.approx(10 / 9.9, abs=1e-4)
    assert cost["start"]["none"]["ratio"] == 1.0 and cost["start"]["gpuobs-block"]["ratio"] == round(70 / 60, 3)
