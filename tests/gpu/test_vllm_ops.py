"""Two vLLM engines and a PyTorch job on one GPU under one gpuobsd: which layer's op runs each of
vLLM's kernels, eager and in CUDA graphs, and three observed processes switched separately and
together.

Both engines run offline (tests/gpu/workloads/vllm_generate_loop.py) under the drop-in's
environment, each with a share of the GPU's memory: one with enforce_eager, the launch trace on
and the plugin's op window over its first steps (GPUOBS_OPS_STEPS), one with torch.compile and
CUDA graphs whose capture the plugin labels (GPUOBS_OPS_CAPTURE=1); a PyTorch loop (torch_loop.py)
runs under the injector beside them. `gpuobsctl ops` must name, for every layer of the random
Qwen3, the eager engine's projection GEMMs with bf16 inputs of the layer's shapes, and
FlashAttention and the KV-cache write under the attention module; in the graph engine, the
attention and cache-write nodes of every layer carry their layer's labels, executed at every
replay. Switches by pid, by rank (only the engines have one) and by GPU (all run on it) must
reach exactly the processes they select.

Needs the vLLM payload: GPUOBS_VLLM_PAYLOAD names an unpacked chunk folder (skipped otherwise);
reports go to $GPUOBS_REPORT_DIR/vllm-ops when that is set."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuobs_testing.daemon import DaemonProcess, free_port, gpuobsctl
from gpuobs_testing.perfetto_trace import read_trace
from gpuobs_testing.phase_file import phases
from gpuobs_testing.vllm_payload import drop_in_environment, make_model, offline_environment
from harness import INJECTOR, VLLM_SKIP_REASON, WORKLOADS, InjectedRun, keep_report

PAYLOAD = os.environ.get("GPUOBS_VLLM_PAYLOAD")
ROOT = Path(__file__).resolve().parents[2]
LAYERS, HIDDEN = 4, 1024  # make_tiny_qwen3.py: intermediate 2 x hidden, heads of 64, half as many KV heads
SHAPE = ["--layers", str(LAYERS), "--hidden", str(HIDDEN), "--vocab", "4096"]
OPS_STEPS = 3  # the prefill of the first generate and two decodes
TRACE_EVENTS = 200_000  # a trace's cap: its export reads every block event in Python
WINDOW_STEPS = 20  # opened at run time: a loop's generate is a prefill and 15 decodes, so one prefill at least

pytestmark = pytest.mark.skipif(not PAYLOAD, reason=VLLM_SKIP_REASON)


class Engine:
    """One vLLM process in a session of its own, followed through its status file."""

    def __init__(self, name: str, work: Path, model: Path, env: dict[str, str], *extra: str) -> None:
        self.name = name
        self.status, self.result, self.stop = (work / f"{name}{suffix}" for suffix in (".status", ".json", ".stop"))
        for stale in (self.status, self.result, self.stop):
            stale.unlink(missing_ok=True)
        with (work / f"{name}.log").open("w") as log:  # a file, never a pipe: vLLM's children outlive it
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(WORKLOADS / "vllm_generate_loop.py"),
                    "--model",
                    str(model),
                    "--status",
                    str(self.status),
                    "--result",
                    str(self.result),
                    "--stop",
                    str(self.stop),
                    *extra,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid = self.process.pid

    def reached(self, phase: str) -> bool:
        return any(seen == phase for _, seen in phases(self.status))

    def wait_for(self, phase: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reached(phase):
                return
            assert self.process.poll() is None, f"{self.name} exited ({self.process.returncode}) before '{phase}'"
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no '{phase}' within {timeout} s")

    def kill(self) -> None:
        self.stop.touch()
        for sig in (15, 9):
            try:
                os.killpg(self.pid, sig)
                self.process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


def ctl_json(daemon: DaemonProcess, *args: str) -> dict:
    done = gpuobsctl(daemon.address, "--output", "json", *args, timeout=60)
    assert done.returncode == 0, (args, done.stderr[-2000:])
    return json.loads(done.stdout)


def modes(daemon: DaemonProcess) -> dict[int, str]:
    return {int(p["pid"]): p["mode"] for p in ctl_json(daemon, "status")["processes"] if p["alive"]}


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    segments = Path(tempfile.mkdtemp(prefix="gpuobs-test-", dir="/dev/shm"))
    try:
        yield run_scene(tmp_path_factory, segments)
    finally:
        shutil.rmtree(segments, ignore_errors=True)


def run_scene(tmp_path_factory: pytest.TempPathFactory, segments: Path) -> dict:
    report_dir = os.environ.get("GPUOBS_REPORT_DIR")
    work = Path(report_dir) / "vllm-ops" if report_dir else tmp_path_factory.mktemp("vllm-ops")
    work.mkdir(parents=True, exist_ok=True)
    payload = Path(PAYLOAD)
    env = {**offline_environment(payload), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    model = Path("/tmp/qwen3-eager-ops")
    make_model(payload, model, env, SHAPE)
    env.update(drop_in_environment(ROOT / "deploy" / "systemd" / "vllm-gpuobs.conf"))
    env.update(
        {
            "CUDA_INJECTION64_PATH": str(INJECTOR),
            "GPUOBS_SEGMENT_DIR": str(segments),
            "GPUOBS_CUBIN_DIR": str(work / "cubins"),
        }
    )
    daemon = DaemonProcess(work / "run", segments, free_port())
    stop = work / "job.stop"
    stop.unlink(missing_ok=True)
    eager = Engine("eager", work, model, {**env, "GPUOBS_LAUNCH_TRACE": "1", "GPUOBS_OPS_STEPS": str(OPS_STEPS)})
    graphs = Engine("graphs", work, model, {**env, "GPUOBS_OPS_CAPTURE": "1"}, "--graphs")
    job = None
    seen: dict = {"switches": [], "engine_pids": {"eager": eager.pid, "graphs": graphs.pid}}
    try:
        eager.wait_for("generated", 300)
        try:  # the graph engine's failure fails its own test, not the others
            graphs.wait_for("generated", 300)
        except AssertionError as error:
            seen["graphs_error"] = f"{error}: {(work / 'graphs.log').read_text(errors='replace')[-3000:]}"
            graphs.kill()
        job = InjectedRun(
            [sys.executable, str(WORKLOADS / "torch_loop.py"), "--seconds", "600", "--stop", str(stop)],
            segments,
            mode="counter",
            drain=False,
        )
        seen["job_pid"] = job.process.pid
        daemon.wait_processes(2 if "graphs_error" in seen else 3, timeout=120)
        time.sleep(1.0)
        processes = ctl_json(daemon, "status")["processes"]
        seen["status"] = processes
        uuid = next(p for p in processes if int(p["pid"]) == eager.pid)["gpus"][0]["uuid"]
        for selector in (
            ["--pid", str(job.process.pid), "blocks"],
            ["--gpu", uuid, "counter"],
            ["--rank", "0", "blocks"],
            ["off"],
            ["--gpu", uuid, "counter"],
        ):
            done = gpuobsctl(daemon.address, "set-mode", *selector, timeout=60)
            seen["switches"].append(
                {
                    "set-mode": selector,
                    "rc": done.returncode,
                    "stderr": done.stderr[-500:],
                    "modes": {str(pid): mode for pid, mode in modes(daemon).items()},
                }
            )
        seen["ops_eager"] = ctl_json(daemon, "ops", "--pid", str(eager.pid), "--top", "10000")
        if "graphs_error" not in seen:
            try:  # a window refused fails its own test, not the others
                seen["window"] = open_window(daemon, graphs.pid)
            except AssertionError as error:
                seen["window_error"] = str(error)
            try:
                seen["trace"] = graph_trace(daemon, graphs.pid, work)
            except AssertionError as error:
                seen["trace_error"] = str(error)
            seen["ops_graphs"] = ctl_json(daemon, "ops", "--pid", str(graphs.pid), "--top", "10000")
        running = [eager] if "graphs_error" in seen else [eager, graphs]
        for engine in running:
            engine.stop.touch()
        stop.touch()
        for engine in running:
            engine.wait_for("done", 120)
            seen[engine.name] = json.loads(engine.result.read_text())
        seen["job"] = job.finish(timeout=60)  # it ends at the stop file too, after a synchronize
        job = None
        daemon.wait_all_gone(60)
        seen["kernels_final"] = ctl_json(daemon, "kernels", "--top", "0")
        seen["status_final"] = ctl_json(daemon, "status")["processes"]
    finally:
        stop.touch()
        for engine in (eager, graphs):
            engine.kill()
        if job is not None:
            job.process.kill()
        daemon.stop()
        keep_report("vllm-ops.json", seen)
    return seen


def open_window(daemon: DaemonProcess, pid: int) -> dict:
    """An op window of WINDOW_STEPS steps opened at run time in the graph engine, which runs
    without the launch trace: its eager launch records (ops totals) before, once the window's
    labels are in, and a while later (the trace off again: no more records)."""

    def totals() -> dict:
        (row,) = ctl_json(daemon, "ops", "--pid", str(pid), "--top", "1")["totals"]
        (process,) = [p for p in ctl_json(daemon, "status")["processes"] if int(p["pid"]) == pid]
        return {**row, "launch_callback_seconds": float(process["injector"].get("launch_callback_seconds", 0.0))}

    window: dict = {"before": totals()}
    window["opened"] = ctl_json(daemon, "ops", "--record-steps", str(WINDOW_STEPS), "--pid", str(pid))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = totals()
        if now["ops"] > window["before"]["ops"] and now["ops"] == totals()["ops"]:  # recorded, nothing more coming
            break
        time.sleep(1.0)
    time.sleep(2.0)
    window["after"] = totals()
    window["ops"] = ctl_json(daemon, "ops", "--pid", str(pid), "--top", "10000")["ops"]
    time.sleep(3.0)  # the engine keeps generating
    window["later"] = totals()
    return window


def graph_trace(daemon: DaemonProcess, pid: int, work: Path) -> dict:
    """`gpuobsctl trace` of the graph engine in blocks mode (then counter again), its events
    capped: per (op slice's label, the kernel of the node execution under it), how many."""
    for mode in ("blocks", "counter"):
        switched = gpuobsctl(daemon.address, "set-mode", "--pid", str(pid), mode, timeout=60)
        assert switched.returncode == 0, switched.stderr[-2000:]
        if mode == "blocks":
            out = work / "graphs.pftrace"
            ctl_json(
                daemon, "trace", "--duration", "2", "--count", str(TRACE_EVENTS), "--pid", str(pid), "--out", str(out)
            )
    trace = read_trace(out)
    executions = {
        (s.track, s.args["grid_id"], s.args["replay"]): s.name
        for s in trace.slices
        if s.track.startswith("graph exec ") and s.end is not None
    }
    pairs: collections.Counter = collections.Counter()
    for item in trace.slices:
        if item.track.startswith("ops · graph exec ") and item.end is not None:
            key = (item.track.removeprefix("ops · "), item.args["grid_id"], item.args["replay"])
            pairs[f"{item.name} | {executions.get(key, '(no execution)')}"] += 1
    return {"executions": len(executions), "pairs": dict(pairs)}


def test_a_trace_puts_each_layers_attention_op_above_its_graph_node_executions(scene: dict) -> None:
    """The graph engine's labels from capture, in a Perfetto trace of a later window: every
    layer's FlashAttention node executions under its attention op, and no op slice without the
    node execution it labels."""
    assert "graphs_error" not in scene, scene["graphs_error"]
    assert "trace_error" not in scene, scene["trace_error"]
    trace = scene["trace"]
    assert trace["executions"] > 0, trace
    assert not [pair for pair in trace["pairs"] if pair.endswith("| (no execution)")], trace["pairs"]
    for layer in range(LAYERS):
        attention = [pair for pair in trace["pairs"] if pair.startswith(f"model.layers.{layer}.self_attn.attn ")]
        assert re.search(r"flash", " ".join(attention), re.I), (layer, trace["pairs"])


def test_a_window_opened_at_run_time_records_its_steps_then_the_trace_is_off(scene: dict) -> None:
    """gpuobsctl ops --record-steps in an engine without the launch trace: its prefill's eager
    attention launches join to each layer's attention op, and no launch record comes after."""
    assert "graphs_error" not in scene, scene["graphs_error"]
    assert "window_error" not in scene, scene["window_error"]
    window = scene["window"]
    assert [r["status"] for r in window["opened"]["results"]] == ["ok"], window["opened"]
    before, after, later = window["before"], window["after"], window["later"]
    assert before["launches_attributed"] == before["launches_without_op"] == 0, before  # no trace before
    assert after["ops"] > before["ops"] and after["launches_attributed"] > 0, after
    assert after["launch_callback_seconds"] > before["launch_callback_seconds"], (before, after)  # on for the window
    eager_records = ("launches_attributed", "launches_without_op", "launch_callback_seconds")  # then off
    assert [later[key] for key in eager_records] == [after[key] for key in eager_records], (after, later)
    for layer in range(LAYERS):
        attention = [
            row
            for row in window["ops"]
            if row["op"].startswith(f"model.layers.{layer}.self_attn.attn ") and int(row["launches"]) > 0
        ]
        assert re.search(r"flash", " ".join(row["kernel"] for row in attention), re.I), (layer, attention)


def test_switches_reach_exactly_the_processes_they_select(scene: dict) -> None:
    assert "graphs_error" not in scene, scene["graphs_error"]
    steps = scene["switches"]
    assert [s["rc"] for s in steps] == [0] * len(steps), steps
    order = [str(scene["engine_pids"]["eager"]), str(scene["engine_pids"]["graphs"]), str(scene["job_pid"])]
    expected = [
        ("counter", "counter", "blocks"),  # --pid the job
        ("counter", "counter", "counter"),  # --gpu: all run on it
        ("blocks", "blocks", "counter"),  # --rank 0: only the engines have one
        ("off", "off", "off"),  # everyone
        ("counter", "counter", "counter"),
    ]
    assert [tuple(s["modes"][pid] for pid in order) for s in steps] == expected, steps


def test_every_process_names_the_same_gpu_and_only_the_engines_a_rank(scene: dict) -> None:
    processes = {int(p["pid"]): p for p in scene["status"] if p["alive"]}
    for name, pid in scene["engine_pids"].items():
        if name == "graphs" and "graphs_error" in scene:
            continue  # it did not start (test_switches_reach... says why)
        engine = processes[pid]
        assert engine["identity_set"] and engine["role"] == "engine" and int(engine["rank"]) == 0, engine
        assert engine["model"].endswith("qwen3-eager-ops"), engine["model"]
    job = processes[scene["job_pid"]]
    assert not job["identity_set"]
    assert len({p["gpus"][0]["uuid"] for p in processes.values()}) == 1 and job["gpus"][0]["uuid"].startswith("GPU-")


def test_every_block_of_every_process_accounted_for(scene: dict) -> None:
    for process in scene["status_final"]:
        assert int(process["accounting_errors"]) == 0, process
    for kernel in scene["kernels_final"]["kernels"]:
        accounted = int(kernel["blocks_observed"]) + int(kernel["blocks_unpatched"]) + int(kernel["blocks_unobserved"])
        assert int(kernel["blocks_expected"]) == accounted, kernel["name"]


def rows_for(ops: dict, path: str) -> list[dict]:
    """The ops table's rows whose label begins with this module path."""
    return [row for row in ops["ops"] if row["op"].startswith(path + " ")]


def test_ops_name_each_layers_gemms_attention_and_cache_write(scene: dict) -> None:
    ops = scene["ops_eager"]
    (totals,) = ops["totals"]
    assert int(totals["ops"]) > 0 and int(totals["launches_attributed"]) > 0, totals
    intermediate, q_heads = 2 * HIDDEN, HIDDEN // 64
    qkv = 64 * (q_heads + 2 * max(1, q_heads // 2))
    gemm = re.compile(r"nvjet|gemm|gemv|cutlass|cublas", re.I)
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        for projection, inputs, outputs in (
            ("self_attn.qkv_proj", HIDDEN, qkv),
            ("self_attn.o_proj", HIDDEN, HIDDEN),
            ("mlp.gate_up_proj", HIDDEN, 2 * intermediate),
            ("mlp.down_proj", intermediate, HIDDEN),
        ):
            rows = rows_for(ops, f"{prefix}.{projection}")
            gemms = [row for row in rows if gemm.search(row["kernel"])]
            assert gemms, (projection, layer, rows)
            # the activations (tokens x inputs), and the weight as aten::linear takes it (outputs x
            # inputs) or transposed for aten::mm, all bf16
            weight = rf"bf16\[({outputs},{inputs}|{inputs},{outputs})\]"
            assert all(re.search(rf"bf16\[\d+,{inputs}\] {weight}", row["op"]) for row in gemms), gemms
        attention = rows_for(ops, f"{prefix}.self_attn.attn")
        kernels = " ".join(row["kernel"] for row in attention)
        assert re.search(r"flash", kernels, re.I), (layer, attention)
        assert re.search(r"cache", kernels, re.I), (layer, attention)
        assert all(int(row["launches"]) > 0 and int(row["blocks"]) > 0 for row in attention)


def test_graph_nodes_carry_each_layers_attention_and_cache_write_labels(scene: dict) -> None:
    """Captured under torch.compile: the attention and cache-write ops take their layer from
    their layer-name argument; each of their nodes ran at every replay of its graph."""
    assert "graphs_error" not in scene, scene["graphs_error"]
    ops = scene["ops_graphs"]
    (totals,) = ops["totals"]
    assert int(totals["nodes_captured"]) > 0, totals
    for layer in range(LAYERS):
        attention = [row for row in rows_for(ops, f"model.layers.{layer}.self_attn.attn") if int(row["graph_nodes"])]
        kernels = " ".join(row["kernel"] for row in attention)
        assert re.search(r"flash", kernels, re.I) and re.search(r"cache", kernels, re.I), (layer, attention)
        assert all(int(row["node_executions"]) >= int(row["graph_nodes"]) > 0 for row in attention), attention
