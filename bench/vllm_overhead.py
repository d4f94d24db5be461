"""A real vLLM OpenAI server with no tool and under gpuobs, measured side by side in one run on the
GPU machine: engine start, graph capture, output tokens/s and request latency of a fixed load,
as ratios to no tool; and, under gpuobs, what gpuobsctl shows of the server.

Servers, one after another (each injected one takes its environment from the vLLM drop-in
deploy/systemd/vllm-gpuobs.conf, only its three paths replaced by this machine's):
  none-cold      no tool, first start: fills the torch.compile cache (its start is not compared)
  gpuobs-block   the drop-in as deployed (patch set block, counter at start); the load is run in
                 off, counter and blocks (--block-modes names others, `sampled --shift N` as
                 set-mode takes it), switched live with set-mode, ROUNDS times interleaved
                 (a process keeps one patch set; modes are a config word, so this is how an
                 operator changes them); then the mode is switched back and forth while requests
                 stream in (every request and every switch must succeed)
  gpuobs-memory  the drop-in with GPUOBS_PATCH_SET=memory, sampled, shift 10
  none           no tool, compile cache warm: the baseline of every ratio
  floor-steady   (not by default) the floor tool, a bench build's: an empty block-entry patch on
                 every module and the callbacks gpuobs keeps enabled in steady state, with empty
                 bodies (the floor under `off`, vllm_decode.py's floor-steady)
--servers names them in any order; a name given again is a fresh server of it (`none-2`,
`none-3`, ... in the figures).
A gpuobsd runs throughout, as it would beside a service. In every mode, REFERENCE_REQUESTS greedy
requests are answered one at a time (temperature 0, ignore_eos) before the load: their tokens
must be the same everywhere. Figures are written after every server, so a run cut short keeps
what it measured.

The cost of gpuobs to a service of a production-shaped model: --model-size (vllm_models.py; by
default the tiny 2-layer model above) serves a model of that size, its share of GPU memory and
graphs up to the batch it serves, and runs COST_SERVERS: no tool started fresh three times,
interleaved with the drop-in in off, counter, `sampled --shift 10` and blocks, and with the
floor tool. In every mode a single-stream load (requests one at a time: ms per token) comes
beside the batch load (concurrency = the batch); `cost` in the figures gives each mode's figures
over the median of the no-tool servers of the run, and the no-tool spread (each no-tool server
over that median), what the method can resolve.

    python bench/vllm_overhead.py --payload .vllm/c2 --out DIR [--commit SHA]
    python bench/vllm_overhead.py --payload .vllm/c2 --out DIR --model-size 8b [--servers none,gpuobs-block,...]

DIR gets vllm-overhead.json (figures, ratios), cli/<server>/... (gpuobsctl outputs, /metrics)
and logs/<server>.log. The vLLM payload is an offline vLLM 0.25.1 site folder in two chunk folders (.vllm/c1,
.vllm/c2, each with its device_unpack.sh), carried in two runs back to back.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import floor_steps
import gpuobs
from gpuobs.daemon.request_ledger import RequestLedger
from gpuobs.segment import MODES
from gpuobs_testing.daemon import DaemonProcess, gpuobsctl  # (the tests' real gpuobsd, as daemon_drain.py)
from gpuobs_testing.vllm_payload import drop_in_environment, make_model, offline_environment
from vllm_models import GPU_MEMORY, MODELS, WORKLOAD, describe, make, model_folder
from workloads.vllm_generate import CAPTURE_SIZES, known_mode, mode_switch

ROOT = Path(__file__).resolve().parent.parent
DROP_IN = ROOT / "deploy" / "systemd" / "vllm-gpuobs.conf"
LIB = Path(gpuobs.__file__).parent / "lib"
INJECTOR = LIB / "libgpuobs_injector.so"
FLOOR_TOOL = floor_steps.LIBRARY
SERVE_ARGS = [
    "--max-model-len",
    "512",
    "--gpu-memory-utilization",
    "0.2",
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "512",
    "--compilation-config",
    '{"cudagraph_capture_sizes":[1,2,4]}',
    "--enable-mfu-metrics",  # vLLM's FLOP estimate per step (every server alike): gpuobs divides it by device time
]
REFERENCE_REQUESTS = 3
ROUNDS = 2
# server -> (tool: "gpuobs" the drop-in, "floor" the floor tool, None no tool; environment over the
# drop-in's or the floor tool's; modes its load runs in)
SERVERS: dict[str, tuple[str | None, dict[str, str], list[str]]] = {
    "none-cold": (None, {}, ["none-cold"]),
    "gpuobs-block": ("gpuobs", {}, ["off", "counter", "blocks"]),
    "gpuobs-memory": (
        "gpuobs",
        {"GPUOBS_PATCH_SET": "memory", "GPUOBS_MODE": "sampled", "GPUOBS_SHIFT": "10"},
        ["sampled"],
    ),
    "none": (None, {}, ["none"]),
    "floor-steady": ("floor", floor_steps.environment("floor-steady"), ["floor-steady"]),
}
DEFAULT_SERVERS = "none-cold,gpuobs-block,gpuobs-memory,none"
TINY = "tiny"  # the default model: make_tiny_qwen3.py's own, 2 layers, served with SERVE_ARGS

# A cost run on a model of vllm_models.py's sizes: how many servers one device call holds. The
# tiny model's server is healthy ~50 s after its start with the compile cache warm, ~80 s cold
# (the H100 at 344fd1a): ~45 s of it is the two imports of vLLM, the API server's and the
# engine's, and its engine init only ~5 s. An 8B-class server adds its 15 GB of weights (from the
# page cache), the profile run and graph capture of 7 sizes of 32 layers: ~60-90 s warm, the first
# ~40 s more for torch.compile; it stops in ~5 s. Measured: a no-tool or floor server ~10 s (the
# reference requests, one round of the loads), the drop-in's ~50 s (four modes x two rounds of
# the loads, a set-mode before each, gpuobsctl's views). So ~135 s the first no-tool server,
# ~130 s the drop-in's, ~85-95 s each other: ~530 s for these five servers, what one 570 s
# device call holds, with the model already made (the decode bench's call makes it in the same
# folder; ~60 s more where this run makes it, and then --budget-s leaves the last no-tool server
# out, as the figures say). A sixth (a second drop-in, say) does not fit; nor does the live
# switching (~15 s; the tiny model's run checks it), which a cost run leaves out.
COST_SERVERS = "none,gpuobs-block,none,floor-steady,none"
COST_BLOCK_MODES = "off,counter,sampled --shift 10,blocks"
# A big size's load is vllm_models.WORKLOAD's (single-stream tokens, batch, tokens per request of
# the batch load), the work of vllm_decode.py's processes of the same size, so that an offline
# figure and a served one are of the same work. The batch is the server's most sequences and the
# load's concurrency; the load has twice as many requests, so the batch stays full most of the
# time. At ~5 ms a step on the H100 a mode's round takes ~3 s: SINGLE_REQUESTS x 128 tokens, then
# 64 x 64 tokens.
SINGLE_REQUESTS = 2
# What the cost summary compares, and which way is better
COST_METRICS = (
    ("tokens_per_s", "higher"),
    ("p50_ms", "lower"),
    ("p99_ms", "lower"),
    ("single_ms_per_token", "lower"),
)
SWITCHES = ["counter", "off", "blocks", "noop", "counter", "blocks"]


def post(port: int, path: str, body: dict, timeout: float = 120) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {"error": error.read().decode(errors="replace")[:500]}
    except Exception as error:  # noqa: BLE001 - a failed request is a figure, not a crash
        return 0, {"error": repr(error)}


def completion(port: int, prompt: str, tokens: int) -> tuple[int, dict, float]:
    began = time.perf_counter()
    code, body = post(
        port,
        "/v1/completions",
        {
            "model": "tiny",
            "prompt": prompt,
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    )
    return code, body, time.perf_counter() - began


def listen_port(start: int, taken: set[int]) -> int:
    """The first port from `start` that no earlier server took and that binds on the loopback now:
    a port another program holds (or a client's connection took) would make a healthy server fail
    to start and its row read as a failed server."""
    for port in range(start, 65536):
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise SystemExit(f"no free port from {start}")


class Server:
    """One `vllm serve` in a session of its own, stopped as a group."""

    def __init__(self, model: str, env: dict[str, str], log: Path, port: int, serve_args: list[str]) -> None:
        self.port = port
        self.started = time.perf_counter()
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.cli.main",
                "serve",
                model,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--served-model-name",
                "tiny",
                *serve_args,
            ],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_healthy(self, timeout: float) -> float | None:
        while time.perf_counter() - self.started < timeout:
            if self.process.poll() is not None:
                return None
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return time.perf_counter() - self.started
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        return None

    def stop(self) -> None:
        for sig, wait in ((signal.SIGINT, 20), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait)
                time.sleep(0.5)  # the engine core is in the same group: let it go too
            except subprocess.TimeoutExpired:
                continue
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return


def engine_timings(log: Path) -> dict[str, float]:
    """vLLM's own start-up figures: engine init (profile, KV cache, warm-up and graph capture
    included), torch.compile, graph capture (vLLM logs whole seconds)."""
    text = log.read_text(errors="replace")
    out: dict[str, float] = {}
    if m := re.search(r"init engine .* took ([\d.]+) s(?: \(compilation: ([\d.]+) s\))?", text):
        out["engine_init_s"] = float(m.group(1))
        if m.group(2):
            out["compile_s"] = float(m.group(2))
    if m := re.search(r"Graph capturing finished in ([\d.]+) secs", text):
        out["graph_capture_s"] = float(m.group(1))
    return out


def load(port: int, requests: int, tokens: int, concurrency: int) -> dict:
    """The fixed load: `requests` completions of `tokens` tokens, `concurrency` at a time."""
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: completion(port, f"Request {i}: count to ten.", tokens), range(requests)))
    wall = time.perf_counter() - began
    ok = [(body, seconds) for code, body, seconds in results if code == 200]
    produced = sum(int(body.get("usage", {}).get("completion_tokens", 0)) for body, _ in ok)
    latencies = sorted(seconds * 1000 for _, seconds in ok)
    return {
        "requests_ok": len(ok),
        "requests_failed": len(results) - len(ok),
        "output_tokens": produced,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(produced / wall, 1) if wall else 0.0,
        "p50_ms": round(statistics.median(latencies), 2) if latencies else None,
        "p99_ms": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 2) if latencies else None,
    }


def reference_tokens(port: int, tokens: int) -> list[list[int]]:
    out = []
    for i in range(REFERENCE_REQUESTS):
        code, body, _ = completion(port, f"Reference {i}: the quick brown fox", tokens)
        out.append(list(body["choices"][0].get("token_ids") or []) if code == 200 else [])
    return out


def ctl_json(daemon: DaemonProcess, into: Path, *args: str) -> None:
    """`gpuobsctl --output json ARGS` into a file (its error, when it fails)."""
    done = gpuobsctl(daemon.address, "--output", "json", *args, timeout=60)
    into.parent.mkdir(parents=True, exist_ok=True)
    into.write_text(done.stdout if done.returncode == 0 else json.dumps({"error": done.stderr}))


def model_layers(model: Path) -> int | None:
    """The model's decoder layers (its config.json), what a request's KV-cache writes scale by."""
    config = model / "config.json"
    return int(json.loads(config.read_text())["num_hidden_layers"]) if config.exists() else None


def save_request_views(
    daemon: DaemonProcess, folder: Path, mode: str, pid: int | None, count: int = 3, listing: str = "load"
) -> None:
    """`gpuobsctl request ID` of the `count` requests of the saved list that began last: each one's
    kernels, the KV-cache write's among them (and in `sampled` beside the memory patch set, the
    cache slots it wrote). The daemon keeps the last 4,096 steps in detail, so a request of an
    earlier round (the list's top by device time, in the run at 344fd1a) has no kernels left to
    show (kernel_steps 0). Of this server's engine only (`pid`): the daemon keeps an earlier
    server's exited engine for minutes, its step numbers counted apart."""
    listed = json.loads((folder / f"requests-{listing}-{mode}.json").read_text())
    mine = [row for row in listed.get("requests", []) if pid is None or int(row["pid"]) == pid]
    newest = sorted(mine, key=lambda row: (-int(row["first_step"]), row["request"]))
    for index, row in enumerate(newest[:count]):
        ctl_json(daemon, folder / f"request-{listing}-{mode}-{index}.json", "request", row["request"], *pid_args(pid))


def pid_args(pid: int | None) -> list[str]:
    return ["--pid", str(pid)] if pid else []


def save_load_views(daemon: DaemonProcess, folder: Path, mode: str, pid: int | None) -> None:
    """GPU time per request and the cache slots of the load just made: requests, steps, views."""
    ctl_json(daemon, folder / f"requests-load-{mode}.json", "requests", "--top", "100000", *pid_args(pid))
    ctl_json(daemon, folder / f"steps-load-{mode}.json", "steps", "--last", "4096", *pid_args(pid))
    save_request_views(daemon, folder, mode, pid)


def restore_args(mode: str, overrides: dict[str, str]) -> list[str]:
    """gpuobsctl's arguments that put a server back in `mode`, its shift as it started, every kernel."""
    shift = [] if mode_switch(mode)[1] is not None else ["--shift", overrides.get("GPUOBS_SHIFT", "0")]
    return [*set_mode_args(mode), *shift, "--kernel", ""]


def every_cache_store(daemon: DaemonProcess, port: int, folder: Path, restore: list[str], pid: int | None) -> dict:
    """The reference requests again, one at a time, with every store of the KV-cache kernel
    recorded (`memory`, events of that kernel only: a few hundred thousand), then the server put
    back as it was (`restore`: gpuobsctl's arguments), whatever failed: what the exact test of
    the slots each request wrote reads (requests-, steps- and request-reference-memory-N.json)."""
    try:
        switched = gpuobsctl(
            daemon.address, "set-mode", "memory", "--kernel", "reshape_and_cache", *pid_args(pid), timeout=60
        )
        if switched.returncode != 0:
            return {"set_mode_error": switched.stdout + switched.stderr}
        tokens = reference_tokens(port, 32)
        time.sleep(RequestLedger.IDLE_NS / 1e9 + 1.5)  # the last step settles once the engine went idle
        ctl_json(daemon, folder / "requests-reference-memory.json", "requests", "--top", "100000", *pid_args(pid))
        ctl_json(daemon, folder / "steps-reference-memory.json", "steps", "--last", "400", *pid_args(pid))
        save_request_views(daemon, folder, "memory", pid, REFERENCE_REQUESTS, listing="reference")
        return {"requests_ok": sum(bool(t) for t in tokens)}
    finally:
        gpuobsctl(daemon.address, *restore, *pid_args(pid), timeout=60)


def capture(daemon: DaemonProcess, into: Path, pid: int | None) -> None:
    """What an operator would look at: each view as text, and whole as JSON; the metrics."""
    into.mkdir(parents=True, exist_ok=True)
    pids = ["--pid", str(pid)] if pid else []
    views = [
        ("status", ["status"], ["status"]),
        ("kernels", ["kernels", *pids, "--top", "40"], ["kernels", *pids, "--top", "0"]),
        ("graphs", ["graphs", *pids, "--replays", "12"], ["graphs", *pids, "--replays", "1024"]),
        ("steps", ["steps", *pids, "--last", "80"], ["steps", *pids, "--last", "4096"]),
    ]
    for name, text, whole in views:
        (into / f"{name}.txt").write_text(gpuobsctl(daemon.address, *text, timeout=60).stdout)
        ctl_json(daemon, into / f"{name}.json", *whole)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
            (into / "metrics.txt").write_bytes(response.read())
    except Exception as error:  # noqa: BLE001
        (into / "metrics.txt").write_text(f"# unavailable: {error!r}\n")


def engine_pid(daemon: DaemonProcess, not_in: set[int]) -> int | None:
    """The newest live process with an engine label (the plugin names it) or any live one."""
    done = gpuobsctl(daemon.address, "--output", "json", "status", timeout=60)
    if done.returncode != 0:
        return None
    processes = [p for p in json.loads(done.stdout)["processes"] if p["alive"] and int(p["pid"]) not in not_in]
    processes.sort(key=lambda p: ("engine" not in p["label"], -int(p["pid"])))
    return int(processes[0]["pid"]) if processes else None


def switch_while_serving(daemon: DaemonProcess, port: int, seconds_per_mode: float = 1.5) -> dict:
    """set-mode through SWITCHES while requests stream in; every request and every switch must succeed."""
    stop = threading.Event()
    codes: list[int] = []

    def stream() -> None:
        while not stop.is_set():
            codes.append(completion(port, "Switching: tell a story.", 16)[0])

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for thread in threads:
        thread.start()
    switches = []
    try:
        for mode in SWITCHES:
            time.sleep(seconds_per_mode)
            began = time.perf_counter()
            done = gpuobsctl(daemon.address, "set-mode", mode, timeout=60)
            switches.append(
                {
                    "mode": mode,
                    "rc": done.returncode,
                    "ms": round((time.perf_counter() - began) * 1000, 1),
                    "output": (done.stdout + done.stderr).strip()[-300:],
                }
            )
        time.sleep(seconds_per_mode)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return {"switches": switches, "requests": len(codes), "requests_failed": sum(c != 200 for c in codes)}


def ratios(modes: dict[str, dict], servers: dict[str, dict]) -> dict[str, dict]:
    """Per mode, load figures over no tool's; per server, start-up figures over no tool's."""
    out: dict[str, dict] = {}
    for table, baseline, keys in (
        (modes, "none", ("tokens_per_s", "p50_ms", "p99_ms")),
        (servers, "none", ("start_s", "engine_init_s", "graph_capture_s")),
    ):
        base = table.get(baseline) or {}
        for name, row in table.items():
            r = {key: round(row[key] / base[key], 3) for key in keys if row.get(key) is not None and base.get(key)}
            if r:
                out.setdefault(name, {}).update(r)
    return out


def median_load(rounds: list[dict]) -> dict:
    """The round with the median tokens/s, and every round's figure beside it."""
    ordered = sorted(rounds, key=lambda r: r["tokens_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds_tokens_per_s"] = [r["tokens_per_s"] for r in rounds]
    chosen["requests_failed"] = sum(r["requests_failed"] for r in rounds)
    return chosen


def single_stream(port: int, requests: int, tokens: int) -> dict:
    """Requests one at a time (the engine's batch of one, its decode graph of size 1): the median
    ms per output token, what one user waits per token. One untimed request first: the first
    replays after a set-mode (the device reads the new mode word) stay out of the figure."""
    completion(port, "Single: warm up.", 16)
    per_token, failed = [], 0
    for i in range(requests):
        code, body, seconds = completion(port, f"Single {i}: the quick brown fox jumps over the lazy dog, and", tokens)
        produced = int(body.get("usage", {}).get("completion_tokens", 0)) if code == 200 else 0
        if produced:
            per_token.append(seconds * 1000 / produced)
        else:
            failed += 1
    return {
        "single_ms_per_token": round(statistics.median(per_token), 4) if per_token else None,
        "single_ms_per_token_all": [round(value, 4) for value in per_token],
        "single_requests_failed": failed,
    }


def set_mode_args(mode: str) -> list[str]:
    """gpuobsctl's arguments for a mode as the bench names it (`sampled --shift 10` takes two more)."""
    name, shift = mode_switch(mode)
    return ["set-mode", name, *(["--shift", str(shift)] if shift is not None else [])]


def file_part(mode: str) -> str:
    """A mode as part of a file name: `sampled --shift 10` -> `sampled-shift-10` (no space in a
    name that comes back from the GPU machine)."""
    return re.sub(r"[^\w.]+", "-", mode).strip("-")


def serve_args(size: str) -> list[str]:
    """`vllm serve`'s arguments for a model size: SERVE_ARGS for the tiny model; for a big one its
    share of GPU memory (vllm_models.GPU_MEMORY), as many sequences as its load's batch and a
    CUDA graph for every capture size up to it, FULL_AND_PIECEWISE as vLLM serves by default."""
    if size == TINY:
        return SERVE_ARGS
    _, batch, _ = WORKLOAD[size]
    return [
        "--max-model-len",
        "512",
        "--gpu-memory-utilization",
        str(GPU_MEMORY[size]),
        "--max-num-seqs",
        str(batch),
        "--max-num-batched-tokens",
        "512",
        "--compilation-config",
        json.dumps({"cudagraph_capture_sizes": [n for n in CAPTURE_SIZES if n <= batch]}),
        "--enable-mfu-metrics",
    ]


def server_labels(names: list[str]) -> list[str]:
    """Each server's name in the figures: its own the first time, `NAME-2`, `NAME-3`, ... after."""
    seen: collections.Counter[str] = collections.Counter()
    labels = []
    for name in names:
        seen[name] += 1
        labels.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return labels


def cost_summary(servers: dict[str, dict]) -> dict:
    """Per row (a server's name, or NAME:MODE of one that runs several modes), each metric of
    COST_METRICS per server (the median over its rounds that failed no request) and over the
    median of the no-tool servers of the run (`none`, `none-2`, ...; started fresh, interleaved
    with the others): `ratio` the median over servers of that, `cost` the same as a cost (> 1 is
    slower). `no_tool_spread`: each no-tool server over their median, what the method can
    resolve. `start`: time to healthy over the no-tool servers' median (the first no-tool server
    also fills the compile cache; the median of three leaves it out)."""

    def value(rounds: list[dict], metric: str) -> float | None:
        values = [
            r[metric]
            for r in rounds
            if r.get(metric) and not r.get("requests_failed") and not r.get("single_requests_failed")
        ]
        return statistics.median(values) if values else None

    baseline = {label: row for label, row in servers.items() if row.get("server") == "none" and row.get("loads")}
    out: dict = {"baseline": list(baseline), "no_tool_spread": {}, "rows": {}, "start": {}}
    centre: dict[str, float] = {}
    for metric, _ in COST_METRICS:
        per = {label: v for label, row in baseline.items() if (v := value(row["loads"]["none"], metric)) is not None}
        if not per:
            continue
        centre[metric] = statistics.median(per.values())
        over = {label: round(v / centre[metric], 4) for label, v in per.items()}
        out["no_tool_spread"][metric] = {
            "per_server": per,
            "median": centre[metric],
            "over_median": over,
            "min_over_median": min(over.values()),
            "max_over_median": max(over.values()),
        }
    for label, row in servers.items():
        name = row.get("server", label)
        for mode, rounds in row.get("loads", {}).items():
            entry = out["rows"].setdefault(name if mode in ("none", name) else f"{name}:{mode}", {})
            for metric, _ in COST_METRICS:
                v = value(rounds, metric)
                if v is None or metric not in centre:
                    continue
                figure = entry.setdefault(metric, {"per_server": {}, "ratio_per_server": {}})
                figure["per_server"][label] = v
                figure["ratio_per_server"][label] = round(v / centre[metric], 4)
    better = dict(COST_METRICS)
    for entry in out["rows"].values():
        for metric, figure in entry.items():
            figure["ratio"] = round(statistics.median(figure["ratio_per_server"].values()), 4)
            as_cost = [r if better[metric] == "lower" else 1 / r for r in figure["ratio_per_server"].values()]
            figure["cost"] = round(statistics.median(as_cost), 4)
    starts = [row["start_s"] for row in baseline.values() if row.get("start_s")]
    for label, row in servers.items():
        if row.get("start_s") and starts:
            start = out["start"].setdefault(row.get("server", label), {"start_s": {}})
            start["start_s"][label] = row["start_s"]
            start["ratio"] = round(statistics.median(start["start_s"].values()) / statistics.median(starts), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", type=Path, required=True, help="a vllm-device chunk folder (device_unpack.sh)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--model-size",
        choices=[TINY, *sorted(MODELS)],
        default=TINY,
        help="the model served (vllm_models.py; a size other than tiny makes a cost run's defaults)",
    )
    parser.add_argument("--model", help="where the model is made (default /tmp/tinyqwen3, /tmp/qwen3-<size>)")
    parser.add_argument(
        "--servers", help=f"in order, a name again for a fresh server of it (default {DEFAULT_SERVERS}; {COST_SERVERS})"
    )
    parser.add_argument(
        "--block-modes",
        help="the modes gpuobs-block's load runs in, switched live, in order (default off,counter,blocks; "
        f"{COST_BLOCK_MODES}); `sampled --shift N` for a sample shift",
    )
    parser.add_argument(
        "--live-switching",
        action=argparse.BooleanOptionalAction,
        help="switch modes while requests stream in, after a server's loads (default: the tiny model's run only)",
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--requests", type=int, help="requests of the load (default 64; twice the batch)")
    parser.add_argument("--tokens", type=int, help="tokens per request of the load (default 64; the size's)")
    parser.add_argument("--concurrency", type=int, help="requests at once (default 4; the batch)")
    parser.add_argument("--single-tokens", type=int, help="tokens per single-stream request (default none; the size's)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="start no configuration after this")
    parser.add_argument("--port-base", type=int, default=8100, help="each server on the next free port from here")
    parser.add_argument("--metrics-port", type=int, default=9464)
    parser.add_argument("--commit", default=os.environ.get("GPUOBS_COMMIT", "unknown"))
    parser.add_argument("--tool-dir", type=Path, default=LIB, help="where the floor tool is (default: the package's)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    tiny = args.model_size == TINY
    single_tokens, batch, batch_tokens = (0, 4, 64) if tiny else WORKLOAD[args.model_size]
    args.model = args.model or ("/tmp/tinyqwen3" if tiny else model_folder(args.model_size))
    args.servers = args.servers or (DEFAULT_SERVERS if tiny else COST_SERVERS)
    args.block_modes = args.block_modes or (",".join(SERVERS["gpuobs-block"][2]) if tiny else COST_BLOCK_MODES)
    args.live_switching = tiny if args.live_switching is None else args.live_switching
    args.concurrency = args.concurrency or batch
    args.requests = args.requests or (64 if tiny else 2 * batch)
    args.tokens = args.tokens or batch_tokens
    args.single_tokens = single_tokens if args.single_tokens is None else args.single_tokens
    names = args.servers.split(",")
    unknown = [name for name in names if name not in SERVERS]
    if unknown:
        raise SystemExit(f"--servers: {unknown} not among {list(SERVERS)}")
    block_modes = args.block_modes.split(",")
    wrong = [mode for mode in block_modes if not known_mode(mode)]
    if wrong:
        raise SystemExit(f"--block-modes: {wrong} not among {list(MODES)} (`sampled --shift N`)")
    floor_tool = args.tool_dir / FLOOR_TOOL
    if any(SERVERS[name][0] == "floor" for name in names) and not floor_tool.exists():
        raise SystemExit(f"{floor_tool} missing: the floor tool is a bench build's (GPUOBS_BENCH_TOOLS=ON)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    base_env = offline_environment(args.payload)
    began = time.perf_counter()
    if tiny:
        make_model(args.payload, Path(args.model), base_env)
    elif make(args.payload, Path(args.model), base_env, args.model_size):
        print(f"model made in {time.perf_counter() - began:.0f} s", flush=True)
    arguments = serve_args(args.model_size)
    work = Path(tempfile.mkdtemp(prefix="gpuobs-vllm-"))
    segments = Path(tempfile.mkdtemp(prefix="gpuobs-vllm-", dir="/dev/shm"))
    drop_in = drop_in_environment(DROP_IN)
    # this machine's paths for the drop-in's three paths; every other variable as deployed
    local_paths = {
        "CUDA_INJECTION64_PATH": str(INJECTOR),
        "GPUOBS_SEGMENT_DIR": str(segments),
        "GPUOBS_CUBIN_DIR": str(work / "cubins"),
    }
    daemon = DaemonProcess(work / "run", segments, args.metrics_port)
    try:
        device = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            .stdout.strip()
            .splitlines()[:1]
        )
    except OSError:
        device = []
    result: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": args.commit,
        "device": device[0] if device else "unknown",
        "vllm": "0.25.1",
        "model": "tiny random-weight Qwen3 (2 layers)" if tiny else describe(args.model_size),
        "model_size": args.model_size,
        "layers": model_layers(Path(args.model)),
        "serve_args": arguments,
        "load": {"requests": args.requests, "tokens": args.tokens, "concurrency": args.concurrency},
        "drop_in": str(DROP_IN.relative_to(ROOT)),
        "drop_in_environment": drop_in,
        "replaced_paths": sorted(local_paths),
        "servers": {},
        "modes": {},
        "reference_tokens": {},
    }
    if args.single_tokens:
        result["load"]["single"] = {"requests": SINGLE_REQUESTS, "tokens": args.single_tokens}
    seen_pids: set[int] = set()
    ports: set[int] = set()
    try:
        for name, label in zip(names, server_labels(names)):
            if time.perf_counter() - t0 > args.budget_s:
                result["servers"][label] = {"server": name, "skipped": "time budget spent"}
                continue
            tool, overrides, modes = SERVERS[name]
            if name == "gpuobs-block":
                modes = block_modes
            inject = tool == "gpuobs"
            env = dict(base_env)
            if inject:
                env.update(drop_in)
                env.update(local_paths)
                env.update(overrides)
            elif tool == "floor":
                env.update({"CUDA_INJECTION64_PATH": str(floor_tool), **overrides})
            log = args.out / "logs" / f"{label}.log"
            server = Server(args.model, env, log, listen_port(args.port_base, ports), arguments)
            row: dict = {"server": name, "injected": inject, "environment": overrides}
            if tool == "floor":
                row["tool"] = FLOOR_TOOL
            # a mode's figures under its own name the first time, and under "MODE (LABEL)" in a
            # server given again
            key = {mode: mode if label == name else f"{mode} ({label})" for mode in modes}
            try:
                start = server.wait_healthy(timeout=240)
                row["healthy"] = start is not None
                if start is None:
                    row["log_tail"] = log.read_text(errors="replace")[-3000:]
                    continue
                row["start_s"] = round(start, 2)
                row.update(engine_timings(log))
                pid = engine_pid(daemon, seen_pids) if inject else None
                row["pid"] = pid
                if pid:
                    seen_pids.add(pid)
                rounds: dict[str, list[dict]] = {mode: [] for mode in modes}
                for _ in range(args.rounds if len(modes) > 1 else 1):
                    for mode in modes:
                        if len(modes) > 1:
                            switched = gpuobsctl(daemon.address, *set_mode_args(mode), timeout=60)
                            if switched.returncode != 0:
                                rounds[mode].append(
                                    {
                                        "tokens_per_s": 0.0,
                                        "requests_failed": args.requests,
                                        "set_mode_error": switched.stdout + switched.stderr,
                                    }
                                )
                                continue
                        if key[mode] not in result["reference_tokens"]:
                            result["reference_tokens"][key[mode]] = reference_tokens(server.port, 32)
                            if inject:  # the steps of the requests that ran alone, before the load evicts them
                                ctl_json(
                                    daemon,
                                    args.out / "cli" / label / f"steps-reference-{file_part(mode)}.json",
                                    "steps",
                                    *(["--pid", str(pid)] if pid else []),
                                    "--last",
                                    "160",
                                )
                        figures = (
                            single_stream(server.port, SINGLE_REQUESTS, args.single_tokens)
                            if args.single_tokens
                            else {}
                        )
                        figures.update(load(server.port, args.requests, args.tokens, args.concurrency))
                        rounds[mode].append(figures)
                        if inject and mode in ("blocks", "sampled"):  # GPU time per request, cache slots
                            save_load_views(daemon, args.out / "cli" / label, mode, pid)
                        if inject and mode == "counter":  # the drop-in's mode: steps timed by replay spans
                            steps = args.out / "cli" / label / "steps-load-counter.json"
                            ctl_json(daemon, steps, "steps", "--last", "4096", *pid_args(pid))
                for mode, measured in rounds.items():
                    result["modes"][key[mode]] = {"server": label, **median_load(measured)}
                row["loads"] = rounds
                if len(modes) > 1 and args.live_switching:
                    row["live_switching"] = switch_while_serving(daemon, server.port)
                if inject and overrides.get("GPUOBS_PATCH_SET") == "memory":
                    restore = restore_args(modes[-1], overrides)
                    row["cache_slots"] = every_cache_store(daemon, server.port, args.out / "cli" / label, restore, pid)
                if inject:
                    time.sleep(1.5)  # one more drain pass and publish
                    capture(daemon, args.out / "cli" / label, pid)
            finally:
                server.stop()
                result["servers"][label] = row
                result["ratios_to_none"] = ratios(result["modes"], result["servers"])
                result["cost"] = cost_summary(result["servers"])
                result["elapsed_s"] = round(time.perf_counter() - t0, 1)
                (args.out / "vllm-overhead.json").write_text(json.dumps(result, indent=1))
                shown = {k: v for k, v in row.items() if k not in ("log_tail", "environment", "loads")}
                print(f"{label}: {json.dumps(shown)}", flush=True)
    finally:
        daemon.stop()
        # the daemon's log stays with the results; its socket and the segments go
        shutil.copy(daemon.log_path, args.out / "logs" / "gpuobsd.log")
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(segments, ignore_errors=True)
    references = [tokens for tokens in result["reference_tokens"].values() if tokens]
    result["tokens_identical"] = bool(references) and all(tokens == references[0] for tokens in references)
    (args.out / "vllm-overhead.json").write_text(json.dumps(result, indent=1))
    print(
        json.dumps(
            {
                "modes": result["modes"],
                "ratios_to_none": result.get("ratios_to_none"),
                "tokens_identical": result["tokens_identical"],
            },
            indent=1,
        )
    )
    cost = result["cost"]
    print(json.dumps({"no_tool_spread": cost["no_tool_spread"], "start": cost["start"]}, indent=1))
    print(f"{'server:mode':<36} {'ms/token':>9} {'cost':>6} {'tokens/s':>9} {'cost':>6} {'p50 ms':>8} {'cost':>6}")
    for label, row in cost["rows"].items():
        cells = []
        for metric, width in (("single_ms_per_token", "9.3f"), ("tokens_per_s", "9.1f"), ("p50_ms", "8.1f")):
            figure = row.get(metric)
            values = list(figure["per_server"].values()) if figure else []
            cells.append(f"{statistics.median(values):{width}}" if values else f"{'-':>{width.split('.')[0]}}")
            cells.append(f"{figure['cost']:6.3f}" if figure else f"{'-':>6}")
        print(f"{label:<36} {' '.join(cells)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
