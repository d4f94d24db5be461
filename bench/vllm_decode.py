"""vLLM decode under gpuobs and under the floor tool, against no tool, side by side in one run on
the GPU machine: single-stream ms per token (1 request x 256 greedy tokens) and batched tokens/s
(64 requests x 128), as ratios to no tool, with the spread of the no-tool processes against
each other so a reader sees what the method can resolve.

Method: offline vLLM (the engine in the measured process), a random-weight Qwen3 of 24 layers,
hidden 2048, vocabulary 8192, or with --model-size gpu-bound 32 layers of hidden 5120, copies of
one, or with --model-size 8b an 8B-class geometry (vllm_models.py), FULL_AND_PIECEWISE CUDA
graphs for batch sizes 1..64. One fresh process per configuration and
round; configurations interleaved over ROUNDS rounds (the order rotates each round, so no
configuration always runs in the same position); in each process every measurement REPEATS
times, the modes of a gpuobs process interleaved within it (switched live with gpuobsctl, as an
operator does); per process the median; a configuration's ratio is the median over rounds of
(its median / the no-tool median of the same round). Beside the median, the best repeat of
each process (`best_cost`: what is left when a neighbour's interference, which only adds time,
is least), and the process's CPU time per token over all its threads (`*_cpu_ms_per_token`:
what the tool's host side adds, callbacks included, which a busy core does not lengthen the way
it lengthens wall time; inside one process the wall time of five repeats varied up to 1.4x on
the H200). A process imports vLLM while the one
before it starts its engine; that one measures only once the import is done, pinned to half of
the cores, while the daemon and everything else keep to the other half.

Configurations:
  none          no tool
  floor-patch   the floor tool: an empty block-entry patch on every module, no other callback
                than the two that patching needs (what instrumented blocks cost)
  floor-steady  the floor tool: the same empty patch and the callback ids gpuobs keeps enabled
                in steady state, with empty bodies (the floor under gpuobs's default, `off`)
  floor-subscribe, floor-resource, floor-launch
                the floor of `off` taken apart, each adding a part of floor-steady: subscribed
                with no callback and no patch; + the steady resource callbacks; + the steady
                graph callbacks (one fires per replay); floor-steady then adds the empty patch
  floor-old     the floor tool: every callback of the four domains the first design enabled,
                no patch (what the first design paid before doing anything)
  gpuobs        the vLLM drop-in (deploy/systemd/vllm-gpuobs.conf, its paths replaced): block
                patch set, modes off, noop, counter and blocks switched live, a gpuobsd beside it
                (--gpuobs-modes names others, `sampled --shift 10` as gpuobsctl set-mode takes it)
  gpuobs-trace  the same with the opt-in launch trace (a host record per launch), counter

    python bench/vllm_decode.py --payload .vllm/c2 --out DIR [--configs none,floor-steady,gpuobs]
    python bench/vllm_decode.py --payload .vllm/c2 --out DIR --model-size 8b --configs none,floor-steady,gpuobs \
        --gpuobs-modes "off,counter,sampled --shift 10,blocks"

DIR gets vllm-overhead.json (every figure, ratios, spreads, tokens), logs/ and cli/ (gpuobsctl
views of the last gpuobs process).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import floor_steps
import gpuobs
from gpuobs.segment import MODES
from gpuobs_testing.daemon import DaemonProcess, gpuobsctl  # (the tests' real gpuobsd)
from gpuobs_testing.phase_file import phases
from gpuobs_testing.vllm_payload import drop_in_environment, offline_environment
from vllm_models import GPU_MEMORY, MODELS, WORKLOAD, describe, make, model_folder
from vllm_overhead import DROP_IN
from workloads.vllm_generate import known_mode

ROOT = Path(__file__).resolve().parent.parent
LIB = Path(gpuobs.__file__).parent / "lib"
WORKER = Path(__file__).resolve().parent / "workloads" / "vllm_generate.py"
GPUOBS_MODES = "off,noop,counter,blocks"

# name -> (library, environment over the base, modes measured in the process)
CONFIGS: dict[str, tuple[str | None, dict[str, str], str]] = {
    "none": (None, {}, "none"),
    **{name: (floor_steps.LIBRARY, floor_steps.environment(name), "none") for name in floor_steps.FLOORS},
    "gpuobs": ("libgpuobs_injector.so", {}, GPUOBS_MODES),
    "gpuobs-trace": ("libgpuobs_injector.so", {"GPUOBS_LAUNCH_TRACE": "1"}, "counter"),
}
DEFAULT_CONFIGS = "none,floor-patch,floor-steady,gpuobs"


class Worker:
    """One measured process, in a session of its own (vLLM's helpers go with its group)."""

    def __init__(self, name: str, round_index: int, directory: Path, argv: list[str], env: dict[str, str]) -> None:
        self.name, self.round = name, round_index
        stem = directory / f"{name}-r{round_index}"
        self.status, self.result, self.go, self.measure, self.log = (
            stem.with_suffix(s) for s in (".status", ".json", ".go", ".measure", ".log")
        )
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [
                *argv,
                "--status",
                str(self.status),
                "--result",
                str(self.result),
                "--go",
                str(self.go),
                "--measure",
                str(self.measure),
            ],
            env=env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def phase(self) -> str:
        seen = phases(self.status)
        return seen[-1][1] if seen else ""

    def wait_for(self, phase: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.phase() == phase or (phase != "done" and self.result.exists()):
                return True
            if self.process.poll() is not None:
                return self.result.exists()
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        time.sleep(0.5)


def cores() -> tuple[set[int], set[int]]:
    """(cores for the process that measures, cores for everything else: the daemon, the next
    process's import): one half each, so that nothing else is scheduled where tokens are timed."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 4:
        return set(available), set(available)
    half = len(available) // 2
    return set(available[:half]), set(available[half:])


def pin(pid: int, allowed: set[int]) -> None:
    """Every thread of a process and of its descendants onto `allowed` (a thread made later
    inherits its creator's)."""
    pending, seen = [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                try:
                    os.sched_setaffinity(int(task), allowed)
                except OSError:
                    pass  # gone meanwhile
                try:
                    pending.extend(
                        int(child) for child in Path(f"/proc/{current}/task/{task}/children").read_text().split()
                    )
                except OSError:
                    pass
        except OSError:
            continue


# What each process measures, and which way is better: wall time per token in one stream, tokens
# per second in a batch, and the process's CPU time per token in each.
METRICS = (
    ("single_ms_per_token", "lower"),
    ("batch_tokens_per_s", "higher"),
    ("single_cpu_ms_per_token", "lower"),
    ("batch_cpu_ms_per_token", "lower"),
)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(runs: list[dict], configs: list[str], modes: dict[str, str] | None = None) -> dict:
    """Per configuration and mode: per-round medians, ratios to no tool of the same round, and
    the no-tool spread (each no-tool round's median over the median of all no-tool rounds).
    `modes`: the modes each configuration's processes measured, where not CONFIGS's."""
    by_round: dict[int, dict[str, dict]] = {}
    for run in runs:
        if "figures" in run:
            by_round.setdefault(run["round"], {})[run["config"]] = run["figures"]
    out: dict = {"rows": {}, "no_tool_spread": {}}
    for metric, better in METRICS:
        nones = [median(r["none"]["modes"]["none"].get(metric, [])) for r in by_round.values() if "none" in r]
        nones = [v for v in nones if v]
        if nones:
            centre = statistics.median(nones)
            out["no_tool_spread"][metric] = {
                "per_round": nones,
                "min_over_median": min(nones) / centre,
                "max_over_median": max(nones) / centre,
                "within_process_max_over_min": max(
                    (
                        max(r["none"]["modes"]["none"][metric]) / min(r["none"]["modes"]["none"][metric])
                        for r in by_round.values()
                        if "none" in r and min(r["none"]["modes"]["none"].get(metric) or [0]) > 0
                    ),
                    default=None,
                ),
            }
        for config in configs:
            for mode in (modes or {}).get(config, CONFIGS[config][2]).split(","):
                label = config if mode == "none" else f"{config}:{mode}"
                row = out["rows"].setdefault(label, {})
                values, ratios, best_ratios = [], [], []
                best = min if better == "lower" else max  # the repeat least disturbed by anything else
                for figures in by_round.values():
                    mine = figures.get(config, {}).get("modes", {}).get(mode)
                    base = figures.get("none", {}).get("modes", {}).get("none")
                    if not mine or not mine.get(metric):
                        continue
                    value = median(mine[metric])
                    values.append(value)
                    if base and base.get(metric):
                        ratios.append(value / median(base[metric]))
                        best_ratios.append(best(mine[metric]) / best(base[metric]))
                if not values:
                    continue
                # as a cost: > 1 is slower (ms/token grows, tokens/s falls)
                as_cost = (lambda r: r) if better == "lower" else (lambda r: 1 / r)  # noqa: E731
                row[metric] = {
                    "per_round": values,
                    "ratio_per_round": ratios,
                    "ratio": median(ratios),
                    "cost": median([as_cost(r) for r in ratios]),
                    "best_ratio_per_round": best_ratios,
                    "best_cost": median([as_cost(r) for r in best_ratios]),
                }
    ready = {}
    for config in configs:
        times = [r["figures"]["engine_ready_s"] for r in runs if r["config"] == config and "figures" in r]
        base = [r["figures"]["engine_ready_s"] for r in runs if r["config"] == "none" and "figures" in r]
        if times and base:
            ready[config] = {"engine_ready_s": times, "ratio": median(times) / median(base)}
    out["engine_ready"] = ready
    digests = {}
    for run in runs:
        for mode, tokens in run.get("figures", {}).get("tokens", {}).items():
            digests.setdefault(tokens["sha256"], []).append(f"{run['config']}:{mode}:r{run['round']}")
    out["tokens_identical"] = len(digests) == 1
    out["token_groups"] = list(digests.values())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", type=Path, required=True, help="a vllm-device chunk folder (device_unpack.sh)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model-size", choices=sorted(MODELS), default="host-bound")
    parser.add_argument("--model", help="where the model is made (default /tmp/qwen3-<size>)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument(
        "--gpuobs-modes",
        help=f"the modes the gpuobs processes measure, in order (default {GPUOBS_MODES}; "
        "`sampled --shift N` for a sample shift; blocks last, where the decode test looks for its replays)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=540.0, help="start no process after this")
    parser.add_argument("--metrics-port", type=int, default=9466)
    parser.add_argument("--commit", default=os.environ.get("GPUOBS_COMMIT", "unknown"))
    parser.add_argument(
        "--tool-dir", type=Path, default=LIB, help="where the tool libraries are (default: the installed package's)"
    )
    args = parser.parse_args()
    t0 = time.monotonic()
    args.model = args.model or model_folder(args.model_size)
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or "none" not in configs:
        raise SystemExit(f"configs must include none and be among {list(CONFIGS)}: {unknown}")
    modes_of = {c: CONFIGS[c][2] for c in configs}
    if args.gpuobs_modes is not None:
        if "gpuobs" not in configs:
            raise SystemExit("--gpuobs-modes without the gpuobs configuration")
        modes_of["gpuobs"] = args.gpuobs_modes
        wrong = [m for m in args.gpuobs_modes.split(",") if not known_mode(m)]
        if wrong:
            raise SystemExit(f"--gpuobs-modes: {wrong} not among {list(MODES)} (`sampled --shift N`)")
    libraries = {c: args.tool_dir / library for c in configs if (library := CONFIGS[c][0]) is not None}
    missing = sorted({str(path) for path in libraries.values() if not path.exists()})
    if missing:
        raise SystemExit(f"{missing} missing: the floor tool is a bench build's (GPUOBS_BENCH_TOOLS=ON)")
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    base_env = {
        **offline_environment(args.payload),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }
    began = time.monotonic()
    # the GPU-bound and 8B models' 32 layers are copies of one: made in seconds rather than minutes
    if make(args.payload, Path(args.model), base_env, args.model_size):
        print(f"model made in {time.monotonic() - began:.0f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpuobs-vllm-decode-"))
    segments = Path(tempfile.mkdtemp(prefix="gpuobs-vllm-decode-", dir="/dev/shm"))
    drop_in = drop_in_environment(DROP_IN)
    local_paths = {"GPUOBS_SEGMENT_DIR": str(segments), "GPUOBS_CUBIN_DIR": str(work / "cubins")}
    # --analysis-share 1: the daemon judges every replay's join (the test of this run checks it);
    # it runs beside the measured process on cores of its own
    daemon = (
        DaemonProcess(work / "run", segments, args.metrics_port, "--analysis-share", "1")
        if any(c.startswith("gpuobs") for c in configs)
        else None
    )
    measuring_cores, other_cores = cores()
    pin(os.getpid(), other_cores)  # this process, and so every child it starts, begins there
    if daemon is not None:
        pin(daemon.process.pid, other_cores)
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
    report: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": args.commit,
        "device": device[0] if device else "unknown",
        "vllm": "0.25.1",
        "model": describe(args.model_size),
        "model_size": args.model_size,
        "workload": dict(zip(("single_tokens", "batch", "batch_tokens"), WORKLOAD[args.model_size])),
        "command": "python bench/vllm_decode.py " + " ".join(sys.argv[1:]),
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "rounds": args.rounds,
        "repeats": args.repeats,
        "configs": {
            c: {
                "library": CONFIGS[c][0],
                "environment": CONFIGS[c][1],
                "modes": modes_of[c],
            }
            for c in configs
        },
        "drop_in_environment": drop_in,
        "runs": [],
        "cores": {"measuring": sorted(measuring_cores), "other": sorted(other_cores)},
    }
    plan = [
        (round_index, configs[(index + round_index) % len(configs)])
        for round_index in range(args.rounds)
        for index in range(len(configs))
    ]

    def start(round_index: int, name: str) -> Worker:
        _, overrides, _ = CONFIGS[name]
        library = libraries.get(name)
        env = dict(base_env)
        if library is not None:
            if name.startswith("gpuobs"):
                env.update(drop_in)
                env.update(local_paths)
            env.update({"CUDA_INJECTION64_PATH": str(library), **overrides})
        single, batch, batch_tokens = WORKLOAD[args.model_size]
        argv = [
            sys.executable,
            str(WORKER),
            "--model",
            args.model,
            "--modes",
            modes_of[name],
            "--repeats",
            str(args.repeats),
            "--single-tokens",
            str(single),
            "--batch",
            str(batch),
            "--batch-tokens",
            str(batch_tokens),
            "--gpu-memory-utilization",
            str(GPU_MEMORY[args.model_size]),
        ]
        if name.startswith("gpuobs"):
            argv += ["--address", daemon.address]
        return Worker(name, round_index, logs, argv, env)

    def write() -> None:
        report["summary"] = summarise(report["runs"], configs, modes_of)
        report["elapsed_s"] = round(time.monotonic() - t0, 1)
        (args.out / "vllm-overhead.json").write_text(json.dumps(report, indent=1))

    try:
        upcoming = start(*plan[0])
        for index, (round_index, name) in enumerate(plan):
            worker = upcoming
            upcoming = None
            run: dict = {"config": name, "round": round_index}
            try:
                imported = worker.wait_for("imported", 240)
                if imported:
                    worker.go.touch()
                if index + 1 < len(plan) and time.monotonic() - t0 < args.budget_s:
                    upcoming = start(*plan[index + 1])  # imports while this one starts its engine
                    upcoming.wait_for("imported", 240)  # then waits: nothing runs beside a measurement
                pin(worker.process.pid, measuring_cores)  # alone on its cores while it measures
                worker.measure.touch()
                if not imported:
                    run["error"] = f"no import: {worker.log.read_text(errors='replace')[-2000:]}"
                elif worker.wait_for("done", 420):
                    run["figures"] = json.loads(worker.result.read_text())
                    if name == "gpuobs" and daemon is not None:
                        views = args.out / "cli"
                        views.mkdir(exist_ok=True)
                        for view in (("status",), ("kernels", "--top", "0"), ("graphs", "--replays", "4")):
                            done = gpuobsctl(daemon.address, "--output", "json", *view, timeout=60)
                            (views / f"{view[0]}.json").write_text(done.stdout if done.returncode == 0 else done.stderr)
                else:
                    run["error"] = f"no result ({worker.phase()}): {worker.log.read_text(errors='replace')[-3000:]}"
            finally:
                worker.stop()
                run["seconds"] = round(time.monotonic() - worker.started, 1)
                report["runs"].append(run)
                write()
                outcome = "ok" if "figures" in run else run.get("error", "")[:300]
                print(f"{name} r{round_index}: {run['seconds']} s, {outcome}", flush=True)
            if upcoming is None:
                # what the budget left out is said, not silently missing from the rounds
                report["not_run"] = [
                    {"config": later, "round": later_round, "why": "time budget spent"}
                    for later_round, later in plan[index + 1 :]
                ]
                break
    finally:
        if upcoming is not None:
            upcoming.stop()
        if daemon is not None:
            daemon.stop()
            shutil.copy(daemon.log_path, logs / "gpuobsd.log")
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(segments, ignore_errors=True)
        write()
    summary = report["summary"]
    print(
        f"{'configuration':<28} {'ms/token':>9} {'cost':>6} {'best':>6} {'tokens/s':>9} {'cost':>6} {'best':>6} "
        f"{'cpu cost 1':>10} {'cpu cost 64':>11}"
    )
    for label, row in summary["rows"].items():
        single, batch = row.get("single_ms_per_token", {}), row.get("batch_tokens_per_s", {})
        cpu_single, cpu_batch = row.get("single_cpu_ms_per_token", {}), row.get("batch_cpu_ms_per_token", {})
        fmt = lambda v, p: f"{v:{p}}" if v is not None else "-"  # noqa: E731
        print(
            f"{label:<28} {fmt(median(single.get('per_round', [])), '9.3f')} {fmt(single.get('cost'), '6.3f')} "
            f"{fmt(single.get('best_cost'), '6.3f')} {fmt(median(batch.get('per_round', [])), '9.0f')} "
            f"{fmt(batch.get('cost'), '6.3f')} {fmt(batch.get('best_cost'), '6.3f')} "
            f"{fmt(cpu_single.get('cost'), '10.3f')} {fmt(cpu_batch.get('cost'), '11.3f')}"
        )
    print(
        json.dumps(
            {
                "no_tool_spread": summary["no_tool_spread"],
                "engine_ready": summary["engine_ready"],
                "tokens_identical": summary["tokens_identical"],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
