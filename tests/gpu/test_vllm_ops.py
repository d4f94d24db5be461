"""vLLM beside a PyTorch job on one GPU under one gpuobsd: which layer's op runs each of vLLM's
kernels, and two observed processes switched separately and together.

vLLM runs offline with enforce_eager (tests/gpu/workloads/vllm_eager.py) under the drop-in's
environment, with the launch trace on and the plugin's op window over its first steps
(GPUOBS_OPS_STEPS); a PyTorch loop (torch_loop.py) runs under the injector beside it. `gpuobsctl
ops` must name, for every layer of the random Qwen3, the projections' GEMMs with bf16 inputs of the
layer's shapes, and FlashAttention and the KV-cache write under the attention module. Switches by
pid, by rank (only vLLM's plugin names a rank) and by GPU (both run on it) must reach exactly the
processes they select.

Needs the vLLM payload: GPUOBS_VLLM_PAYLOAD names an unpacked chunk folder (skipped otherwise);
reports go to $GPUOBS_REPORT_DIR/vllm-ops when that is set."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from gpuobs_testing.daemon import DaemonProcess, free_port, gpuobsctl
from gpuobs_testing.vllm_payload import drop_in_environment, make_model, offline_environment
from harness import INJECTOR, VLLM_SKIP_REASON, WORKLOADS, InjectedRun, keep_report

PAYLOAD = os.environ.get("GPUOBS_VLLM_PAYLOAD")
ROOT = Path(__file__).resolve().parents[2]
LAYERS, HIDDEN = 4, 1024  # make_tiny_qwen3.py: intermediate 2 x hidden, heads of 64, half as many KV heads
SHAPE = ["--layers", str(LAYERS), "--hidden", str(HIDDEN), "--vocab", "4096"]
OPS_STEPS = 3  # the prefill of the first generate and two decodes

pytestmark = pytest.mark.skipif(not PAYLOAD, reason=VLLM_SKIP_REASON)


def wait_for(path: Path, phase: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and any(line.endswith(f" {phase}") for line in path.read_text().splitlines()):
            return
        assert process.poll() is None, f"vLLM exited ({process.returncode}) before '{phase}'"
        time.sleep(0.2)
    raise AssertionError(f"no '{phase}' within {timeout} s: {path.read_text() if path.exists() else ''}")


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
    env.update({"CUDA_INJECTION64_PATH": str(INJECTOR), "GPUOBS_SEGMENT_DIR": str(segments),
                "GPUOBS_CUBIN_DIR": str(work / "cubins"), "GPUOBS_LAUNCH_TRACE": "1",
                "GPUOBS_OPS_STEPS": str(OPS_STEPS)})
    daemon = DaemonProcess(work / "run", segments, free_port())
    status, result, stop = work / "vllm.status", work / "vllm.json", work / "vllm.stop"
    for stale in (status, result, stop):
        stale.unlink(missing_ok=True)
    with (work / "vllm.log").open("w") as log:  # a file, never a pipe: vLLM's children outlive it
        vllm = subprocess.Popen([sys.executable, str(WORKLOADS / "vllm_eager.py"), "--model", str(model),
                                 "--status", str(status), "--result", str(result), "--stop", str(stop)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    job = None
    seen: dict = {"switches": []}
    try:
        wait_for(status, "generated", vllm, 300)
        job = InjectedRun([sys.executable, str(WORKLOADS / "torch_loop.py"), "--seconds", "600", "--stop", str(stop)],
                          segments, mode="counter", drain=False)
        daemon.wait_processes(2, timeout=120)
        time.sleep(1.0)
        processes = ctl_json(daemon, "status")["processes"]
        seen["status"] = processes
        (engine,) = [p for p in processes if int(p["pid"]) == vllm.pid]
        uuid = engine["gpus"][0]["uuid"]
        for selector in (["--pid", str(job.process.pid), "blocks"], ["--gpu", uuid, "counter"],
                         ["--rank", "0", "blocks"], ["off"], ["--gpu", uuid, "counter"]):
            done = gpuobsctl(daemon.address, "set-mode", *selector, timeout=60)
            seen["switches"].append({"set-mode": selector, "rc": done.returncode, "stderr": done.stderr[-500:],
                                     "modes": {str(pid): mode for pid, mode in modes(daemon).items()}})
        seen["ops"] = ctl_json(daemon, "ops", "--pid", str(vllm.pid), "--top", "10000")
        seen["kernels"] = ctl_json(daemon, "kernels", "--top", "0")
        stop.touch()
        wait_for(status, "done", vllm, 120)
        seen["vllm"] = json.loads(result.read_text())
        seen["job"] = job.finish(timeout=60)  # it ends at the stop file too, after a synchronize
        job = None
        daemon.wait_all_gone(60)
        seen["kernels_final"] = ctl_json(daemon, "kernels", "--top", "0")
        seen["status_final"] = ctl_json(daemon, "status")["processes"]
    finally:
        stop.touch()
        for sig in (15, 9):
            try:
                os.killpg(vllm.pid, sig)
                vllm.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if job is not None:
            job.process.kill()
        daemon.stop()
        keep_report("vllm-ops.json", seen)
    seen["engine_pid"] = vllm.pid
    return seen


def test_switches_reach_exactly_the_processes_they_select(scene: dict) -> None:
    engine = str(scene["engine_pid"])
    steps = scene["switches"]
    assert [s["rc"] for s in steps] == [0] * len(steps), steps
    (job,) = [pid for pid in steps[0]["modes"] if pid != engine]
    expected = [("counter", "blocks"),  # --pid the job
                ("counter", "counter"),  # --gpu: both run on it
                ("blocks", "counter"),  # --rank 0: only the engine has one
                ("off", "off"),  # everyone
                ("counter", "counter")]
    assert [(s["modes"][engine], s["modes"][job]) for s in steps] == expected, steps


def test_both_processes_name_the_same_gpu_and_only_the_engine_a_rank(scene: dict) -> None:
    processes = {int(p["pid"]): p for p in scene["status"]}
    engine = processes[scene["engine_pid"]]
    (job,) = [p for pid, p in processes.items() if pid != scene["engine_pid"]]
    assert engine["identity_set"] and engine["role"] == "engine" and int(engine["rank"]) == 0, engine
    assert engine["model"].endswith("qwen3-eager-ops"), engine["model"]
    assert not job["identity_set"]
    assert engine["gpus"][0]["uuid"] == job["gpus"][0]["uuid"] and engine["gpus"][0]["uuid"].startswith("GPU-")


def test_every_block_of_both_processes_accounted_for(scene: dict) -> None:
    for process in scene["status_final"]:
        assert int(process["accounting_errors"]) == 0, process
    for kernel in scene["kernels_final"]["kernels"]:
        accounted = int(kernel["blocks_observed"]) + int(kernel["blocks_unpatched"]) + int(kernel["blocks_unobserved"])
        assert int(kernel["blocks_expected"]) == accounted, kernel["name"]


def rows_for(scene: dict, path: str) -> list[dict]:
    """The ops table's rows whose label begins with this module path."""
    return [row for row in scene["ops"]["ops"] if row["op"].startswith(path + " ")]


def test_ops_name_each_layers_gemms_attention_and_cache_write(scene: dict) -> None:
    (totals,) = scene["ops"]["totals"]
    assert int(totals["ops"]) > 0 and int(totals["launches_attributed"]) > 0, totals
    intermediate, q_heads = 2 * HIDDEN, HIDDEN // 64
    qkv = 64 * (q_heads + 2 * max(1, q_heads // 2))
    gemm = re.compile(r"nvjet|gemm|gemv|cutlass|cublas", re.I)
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        for projection, inputs, outputs in (("self_attn.qkv_proj", HIDDEN, qkv), ("self_attn.o_proj", HIDDEN, HIDDEN),
                                            ("mlp.gate_up_proj", HIDDEN, 2 * intermediate),
                                            ("mlp.down_proj", intermediate, HIDDEN)):
            rows = rows_for(scene, f"{prefix}.{projection}")
            gemms = [row for row in rows if gemm.search(row["kernel"])]
            assert gemms, (projection, layer, rows)
            # the activations (tokens x inputs) and the weight transposed for the matmul, bf16
            assert all(re.search(rf"bf16\[\d+,{inputs}\] bf16\[{inputs},{outputs}\]", row["op"]) for row in gemms), gemms
        attention = rows_for(scene, f"{prefix}.self_attn.attn")
        kernels = " ".join(row["kernel"] for row in attention)
        assert re.search(r"flash", kernels, re.I), (layer, attention)
        assert re.search(r"cache", kernels, re.I), (layer, attention)
        assert all(int(row["launches"]) > 0 and int(row["blocks"]) > 0 for row in attention)
