"""A real vLLM OpenAI server with no tool and under gpuobs, measured side by side in one run on the
GPU machine: engine start, graph capture, output tokens/s and request latency of a fixed load,
as ratios to no tool; and, under gpuobs, what gpuobsctl shows of the server.

Servers, one after another (each injected one takes its environment from the vLLM drop-in
deploy/systemd/vllm-gpuobs.conf, only its three paths replaced by this machine's):
  none-cold      no tool, first start: fills the torch.compile cache (its start is not compared)
  gpuobs-block   the drop-in as deployed (patch set block, counter at start); the load is run in
                 off, counter and blocks, switched live with set-mode, ROUNDS times interleaved
                 (a process keeps one patch set; modes are a config word, so this is how an
                 operator changes them); then the mode is switched back and forth while requests
                 stream in (every request and every switch must succeed)
  gpuobs-memory  the drop-in with GPUOBS_PATCH_SET=memory, sampled, shift 10
  none           no tool, compile cache warm: the baseline of every ratio
A gpuobsd runs throughout, as it would beside a service. In every mode, REFERENCE_REQUESTS greedy
requests are answered one at a time (temperature 0, ignore_eos) before the load: their tokens
must be the same everywhere. Figures are written after every server, so a run cut short keeps
what it measured.

    python bench/vllm_overhead.py --payload .vllm/c2 --out DIR [--commit SHA]

DIR gets vllm-overhead.json (figures, ratios), cli/<server>/... (gpuobsctl outputs, /metrics)
and logs/<server>.log. The vLLM payload is an offline vLLM 0.25.1 site folder in two chunk folders (.vllm/c1,
.vllm/c2, each with its device_unpack.sh), carried in two runs back to back.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import gpuobs
from gpuobs_testing.daemon import DaemonProcess, gpuobsctl  # (the tests' real gpuobsd, as daemon_drain.py)
from gpuobs_testing.vllm_payload import drop_in_environment, make_model, offline_environment

ROOT = Path(__file__).resolve().parent.parent
DROP_IN = ROOT / "deploy" / "systemd" / "vllm-gpuobs.conf"
INJECTOR = Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so"
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
# server -> (inject?, environment over the drop-in's, modes its load runs in)
SERVERS: dict[str, tuple[bool, dict[str, str], list[str]]] = {
    "none-cold": (False, {}, ["none-cold"]),
    "gpuobs-block": (True, {}, ["off", "counter", "blocks"]),
    "gpuobs-memory": (
        True,
        {"GPUOBS_PATCH_SET": "memory", "GPUOBS_MODE": "sampled", "GPUOBS_SHIFT": "10"},
        ["sampled"],
    ),
    "none": (False, {}, ["none"]),
}
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


class Server:
    """One `vllm serve` in a session of its own, stopped as a group."""

    def __init__(self, model: str, env: dict[str, str], log: Path, port: int) -> None:
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
                *SERVE_ARGS,
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


def save_request_views(daemon: DaemonProcess, folder: Path, count: int = 3) -> None:
    """`gpuobsctl request ID` of the `count` requests of the saved list that began last: each one's
    kernels, the KV-cache write's among them. The daemon keeps the last 4,096 steps in detail, so
    a request of an earlier round (the list's top by device time, in the run at 344fd1a) has no
    kernels left to show (kernel_steps 0)."""
    listed = json.loads((folder / "requests-load-blocks.json").read_text())
    newest = sorted(listed.get("requests", []), key=lambda row: (-int(row["first_step"]), row["request"]))
    for index, row in enumerate(newest[:count]):
        ctl_json(daemon, folder / f"request-load-blocks-{index}.json", "request", row["request"])


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", type=Path, required=True, help="a vllm-device chunk folder (device_unpack.sh)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="/tmp/tinyqwen3")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=540.0, help="start no configuration after this")
    parser.add_argument("--port-base", type=int, default=8100, help="servers listen on consecutive ports from here")
    parser.add_argument("--metrics-port", type=int, default=9464)
    parser.add_argument("--commit", default=os.environ.get("GPUOBS_COMMIT", "unknown"))
    args = parser.parse_args()
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    base_env = offline_environment(args.payload)
    make_model(args.payload, Path(args.model), base_env)
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
        "model": "tiny random-weight Qwen3 (2 layers)",
        "layers": model_layers(Path(args.model)),
        "serve_args": SERVE_ARGS,
        "load": {"requests": args.requests, "tokens": args.tokens, "concurrency": args.concurrency},
        "drop_in": str(DROP_IN.relative_to(ROOT)),
        "drop_in_environment": drop_in,
        "replaced_paths": sorted(local_paths),
        "servers": {},
        "modes": {},
        "reference_tokens": {},
    }
    seen_pids: set[int] = set()
    try:
        for port, name in enumerate(args.servers.split(","), start=args.port_base):
            if time.perf_counter() - t0 > args.budget_s:
                result["servers"][name] = {"skipped": "time budget spent"}
                continue
            inject, overrides, modes = SERVERS[name]
            env = dict(base_env)
            if inject:
                env.update(drop_in)
                env.update(local_paths)
                env.update(overrides)
            log = args.out / "logs" / f"{name}.log"
            server = Server(args.model, env, log, port)
            row: dict = {"injected": inject, "environment": overrides}
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
                            switched = gpuobsctl(daemon.address, "set-mode", mode, timeout=60)
                            if switched.returncode != 0:
                                rounds[mode].append(
                                    {
                                        "tokens_per_s": 0.0,
                                        "requests_failed": args.requests,
                                        "set_mode_error": switched.stdout + switched.stderr,
                                    }
                                )
                                continue
                        if mode not in result["reference_tokens"]:
                            result["reference_tokens"][mode] = reference_tokens(server.port, 32)
                            if inject:  # the steps of the requests that ran alone, before the load evicts them
                                ctl_json(
                                    daemon,
                                    args.out / "cli" / name / f"steps-reference-{mode}.json",
                                    "steps",
                                    *(["--pid", str(pid)] if pid else []),
                                    "--last",
                                    "160",
                                )
                        rounds[mode].append(load(server.port, args.requests, args.tokens, args.concurrency))
                        if inject and mode == "blocks":  # GPU time per request (#33) of the concurrent load
                            folder = args.out / "cli" / name
                            ctl_json(daemon, folder / "requests-load-blocks.json", "requests", "--top", "100000")
                            ctl_json(daemon, folder / "steps-load-blocks.json", "steps", "--last", "4096")
                            save_request_views(daemon, folder)
                for mode, measured in rounds.items():
                    result["modes"][mode] = {"server": name, **median_load(measured)}
                if len(modes) > 1:
                    row["live_switching"] = switch_while_serving(daemon, server.port)
                if inject:
                    time.sleep(1.5)  # one more drain pass and publish
                    capture(daemon, args.out / "cli" / name, pid)
            finally:
                server.stop()
                result["servers"][name] = row
                result["ratios_to_none"] = ratios(result["modes"], result["servers"])
                result["elapsed_s"] = round(time.perf_counter() - t0, 1)
                (args.out / "vllm-overhead.json").write_text(json.dumps(result, indent=1))
                print(
                    f"{name}: {json.dumps({k: v for k, v in row.items() if k not in ('log_tail', 'environment')})}",
                    flush=True,
                )
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
