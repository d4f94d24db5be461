"""Kernel-time overhead of each mode, measured side by side in one run on the GPU machine.

Workloads: (a) SiLU-and-mul, 6,098 blocks of 1,024 threads, memory-bound (bench/programs);
(b) a cuBLAS bf16 4096^3 GEMM; (c) a small transformer decode step replayed as a CUDA graph
(tokens/s). Every configuration is a fresh process (the injector reads its patch set and mode
at start); rounds interleave the configurations, and each ratio is the median over rounds of
(configuration time / uninstrumented time in the same round). Events are drained while they
are produced, as the daemon would, so a full ring never makes a mode look cheap.

    python bench/overhead.py --out overhead-DATE-COMMIT.json [--commit SHA] [--workloads decode,silu,gemm]
    python bench/overhead.py --workloads floor --rounds 5 --out overhead-floor.json   (the floor of `off` taken apart)
    python bench/overhead.py --merge part1.json part2.json --out overhead-DATE-COMMIT.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import floor_steps
import gpuobs
from gpuobs.segment import Segment, SegmentError, segment_paths

HERE = Path(__file__).parent
INJECTOR = Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so"
FLOOR_TOOL = Path(gpuobs.__file__).parent / "lib" / floor_steps.LIBRARY  # bench/floor_tool

# (label, mode, patch set, shift, extra environment); mode None = no injector at all
Config = tuple[str, str | None, str | None, int, dict]
BASELINE: Config = ("uninstrumented", None, None, 0, {})
# a second no-tool process in every round: its ratio is the spread the method cannot resolve
NO_TOOL_AGAIN: Config = ("uninstrumented, another process", None, None, 0, {})
SILU: list[Config] = [
    BASELINE,
    NO_TOOL_AGAIN,
    ("off", "off", "block", 0, {}),
    ("noop", "noop", "block", 0, {}),
    ("counter", "counter", "block", 0, {}),
    ("counter, launch times (GPUOBS_LAUNCH_TIMES=1)", "counter", "block", 0, {"GPUOBS_LAUNCH_TIMES": "1"}),
    ("blocks", "blocks", "block", 0, {}),
    ("blocks, exits hooked (GPUOBS_BLOCK_EXIT=1)", "blocks", "block", 0, {"GPUOBS_BLOCK_EXIT": "1"}),
    ("per-access hook floor (memory set, noop)", "noop", "memory", 0, {}),
    ("sampled", "sampled", "memory", 10, {}),
    ("sampled, block set (1 in 2^10 blocks)", "sampled", "block", 10, {}),
    ("naive exact count (2 atomics per access)", "memory", "memory", 0, {"GPUOBS_NAIVE_COUNTING": "1"}),
]
DIAGNOSE: list[Config] = [
    BASELINE,
    ("empty block-entry patch", "off", "block", 0, {"GPUOBS_DEBUG_PATCHES": "empty"}),
    (
        "empty block-entry and block-exit patches",
        "off",
        "block",
        0,
        {"GPUOBS_DEBUG_PATCHES": "empty", "GPUOBS_BLOCK_EXIT": "1"},
    ),
    ("empty per-access patch (memory set)", "off", "memory", 0, {"GPUOBS_DEBUG_PATCHES": "empty"}),
]
GEMM: list[Config] = [
    BASELINE,
    ("off", "off", "block", 0, {}),
    ("counter", "counter", "block", 0, {}),
    ("blocks", "blocks", "block", 0, {}),
    ("per-access hook floor (memory set, noop)", "noop", "memory", 0, {}),
    ("sampled", "sampled", "memory", 10, {}),
]
# The floors, from the floor tool (empty callbacks, an empty block-entry patch): what the
# Sanitizer API and an instrumented block cost, apart from anything gpuobs does.
EMPTY_PATCH = "empty block-entry patch (floor tool)"
DECODE: list[Config] = [
    BASELINE,
    NO_TOOL_AGAIN,
    (
        EMPTY_PATCH,
        "off",
        None,
        0,
        {"CUDA_INJECTION64_PATH": str(FLOOR_TOOL), "GPUOBS_FLOOR_PATCH": "1", "GPUOBS_FLOOR_CALLBACKS": ""},
    ),
    (
        "empty patch + gpuobs's steady callbacks (floor tool)",
        "off",
        None,
        0,
        {"CUDA_INJECTION64_PATH": str(FLOOR_TOOL), "GPUOBS_FLOOR_PATCH": "1", "GPUOBS_FLOOR_CALLBACKS": "steady"},
    ),
    ("gpuobs with empty patches (GPUOBS_DEBUG_PATCHES=empty)", "off", "block", 0, {"GPUOBS_DEBUG_PATCHES": "empty"}),
    ("off", "off", "block", 0, {}),
    ("noop", "noop", "block", 0, {}),
    ("counter", "counter", "block", 0, {}),
    (
        "counter, config bound in the userdata (GPUOBS_CONFIG_WORD=bound)",
        "counter",
        "block",
        0,
        {"GPUOBS_CONFIG_WORD": "bound"},
    ),
    ("counter, launch trace (GPUOBS_LAUNCH_TRACE=1)", "counter", "block", 0, {"GPUOBS_LAUNCH_TRACE": "1"}),
    # a launch event per launch from block (0,0,0): engine steps' device spans in `counter`
    ("counter, launch times (GPUOBS_LAUNCH_TIMES=1)", "counter", "block", 0, {"GPUOBS_LAUNCH_TIMES": "1"}),
    ("blocks", "blocks", "block", 0, {}),
    ("sampled", "sampled", "memory", 10, {}),
    ("sampled, block set (1 in 2^10 blocks)", "sampled", "block", 10, {}),
    ("sampled, block set, exits hooked (GPUOBS_BLOCK_EXIT=1)", "sampled", "block", 10, {"GPUOBS_BLOCK_EXIT": "1"}),
]
# The floor of `off` taken apart: the floor tool adding one part of what gpuobs keeps in steady
# state at a time (bench/floor_tool: subscribed only; + the steady resource callbacks, none of which
# fires per launch; + the graph callbacks, one of which fires per replay; + the empty block-entry
# patch, which is the floor under `off`), then the empty patch alone, gpuobs with empty patches
# (its host side over that floor) and `off` and `counter` themselves. The names before the colon
# are bench/vllm_decode.py's configurations of the same environment.
FLOOR: list[Config] = (
    DECODE[:2]
    + [
        (
            f"{name}: {floor_steps.FLOORS[name][0]} (floor tool)",
            "off",
            None,
            0,
            {"CUDA_INJECTION64_PATH": str(FLOOR_TOOL), **floor_steps.environment(name)},
        )
        for name in floor_steps.DECOMPOSITION
    ]
    + [DECODE[2], DECODE[4], DECODE[5], ("counter", "counter", "block", 0, {})]
)

# Block-entry patches that each do one part of a leader's work (GPUOBS_DEBUG_PATCHES=<step>,
# exits unpatched; gpuobs_patches.cu says what each does): where the block set's cost over the
# empty patch goes on the decode graph.
DEBUG_STEPS = ("leader", "load", "load_context", "red", "count", "count_inline", "census")
DECOMPOSE: list[Config] = (
    DECODE[:5]
    + [
        (
            f"block-entry diagnostic patch: {step} (GPUOBS_DEBUG_PATCHES={step})",
            "counter",
            "block",
            0,
            {"GPUOBS_DEBUG_PATCHES": step},
        )
        for step in DEBUG_STEPS
    ]
    + [
        ("off", "off", "block", 0, {}),
        ("counter", "counter", "block", 0, {}),
        (
            "counter, config bound in the userdata (GPUOBS_CONFIG_WORD=bound)",
            "counter",
            "block",
            0,
            {"GPUOBS_CONFIG_WORD": "bound"},
        ),
    ]
)

# What engine steps' device spans cost in `counter`, on the workload with the most launches per
# second, with the no-tool spread and the floor beside it: replay spans (the default: block
# (0,0,0) folds its entry into its replay's span in device memory; the host copies each replay's
# end after it, in every mode) against none, and the launch event per launch they replace
# (GPUOBS_LAUNCH_TIMES=1, off in the vLLM drop-in for its cost).
NO_REPLAY_SPANS = {"GPUOBS_REPLAY_SPANS": "0"}
STEP_SPANS: list[Config] = DECODE[:3] + [
    ("off", "off", "block", 0, {}),
    ("off, no replay spans (GPUOBS_REPLAY_SPANS=0)", "off", "block", 0, NO_REPLAY_SPANS),
    ("counter", "counter", "block", 0, {}),
    ("counter, no replay spans (GPUOBS_REPLAY_SPANS=0)", "counter", "block", 0, NO_REPLAY_SPANS),
    (
        "counter, launch times (GPUOBS_LAUNCH_TIMES=1)",
        "counter",
        "block",
        0,
        {"GPUOBS_LAUNCH_TIMES": "1", **NO_REPLAY_SPANS},
    ),
]

# The same question without any call in the patch (no frame for any thread): the thread index
# alone, the leader's reduction alone, load + reduction, then production.
INLINE_STEPS = ("tid_inline", "red_inline", "count_inline")
INLINE: list[Config] = (
    DECODE[:3]
    + [DECODE[4]]
    + [
        (
            f"block-entry diagnostic patch: {step} (GPUOBS_DEBUG_PATCHES={step})",
            "counter",
            "block",
            0,
            {"GPUOBS_DEBUG_PATCHES": step},
        )
        for step in INLINE_STEPS
    ]
    + [("counter", "counter", "block", 0, {})]
)


class Drainer(threading.Thread):
    """Drains every segment that appears in a directory until stopped."""

    def __init__(self, directory: Path) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.stop_event = threading.Event()
        self.segments: dict[Path, Segment] = {}

    def run(self) -> None:
        while not self.stop_event.is_set():
            for path in segment_paths(self.directory):
                if path not in self.segments:
                    try:
                        self.segments[path] = Segment(path)
                    except SegmentError:
                        continue
            busy = sum(sum(s.drain_counts()) for s in self.segments.values())
            if not busy:
                time.sleep(0.0005)

    def finish(self) -> dict:
        self.stop_event.set()
        self.join()
        totals = {"produced": 0, "dropped": 0, "launches": 0}
        for segment in self.segments.values():
            segment.drain_counts()
            snapshot = segment.counters()
            if snapshot:
                totals["produced"] += snapshot[0]["device_events_produced"]
                totals["dropped"] += snapshot[0]["device_events_dropped"]
                totals["launches"] += int(snapshot[1]["launches"].sum())  # kernel launches the device counted
        return totals


def run_config(argv: list[str], config: Config) -> dict:
    label, mode, patch_set, shift, extra = config
    env = dict(os.environ)
    env.pop("CUDA_INJECTION64_PATH", None)
    with tempfile.TemporaryDirectory(prefix="gpuobs-bench-", dir="/dev/shm") as directory:
        drainer = None
        if mode is not None:
            env.update(
                {
                    "CUDA_INJECTION64_PATH": str(INJECTOR),
                    "GPUOBS_SEGMENT_DIR": directory,
                    "GPUOBS_MODE": mode,
                    "GPUOBS_PATCH_SET": patch_set or "block",
                    "GPUOBS_SHIFT": str(shift),
                    **extra,
                }
            )
            drainer = Drainer(Path(directory))
            drainer.start()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        events = drainer.finish() if drainer else {"produced": 0, "dropped": 0, "launches": 0}
    if done.returncode != 0:
        raise RuntimeError(f"{label}: exit {done.returncode}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["events"] = events
    return result


def measure(
    workload: str, argv: list[str], configs: list[Config], rounds: int, deterministic: bool = True
) -> list[dict]:
    per_config: dict[str, list[dict]] = {c[0]: [] for c in configs}
    for round_index in range(rounds):
        for config in configs:
            per_config[config[0]].append(run_config(argv, config))
        print(f"  {workload}: round {round_index + 1}/{rounds} done", flush=True)
    baseline = per_config[BASELINE[0]]
    rows = []
    for label, mode, patch_set, shift, _ in configs:
        results = per_config[label]
        if "tokens_per_s" in results[0]:
            ratios = [b["tokens_per_s"] / r["tokens_per_s"] for r, b in zip(results, baseline)]
        else:
            ratios = [r["median_ms"] / b["median_ms"] for r, b in zip(results, baseline)]
        row = {
            "workload": workload,
            "mode": label if mode is None else mode,
            "config": label,
            "patch_set": patch_set,
            "shift": shift if mode == "sampled" else None,
            "ratio": statistics.median(ratios),
            "ratios_per_round": ratios,
            "median_ms": statistics.median(r["median_ms"] for r in results),
            # None: the workload's output varies between uninstrumented runs too (bench/diag_decode.sh)
            "output_identical": all(r["checksum"] == b["checksum"] for r, b in zip(results, baseline))
            if deterministic
            else None,
            "events_produced": results[-1]["events"]["produced"],
            "events_dropped": results[-1]["events"]["dropped"],
            "kernel_launches": results[-1]["events"].get("launches", 0),
        }
        if "tokens_per_s" in results[0]:
            row["tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in results)
        rows.append(row)
    return rows


def check_targets(rows: list[dict]) -> list[str]:
    """The targets whose rows this report has (a report of some workloads checks only theirs)."""

    def ratio(workload: str, config: str) -> float | None:
        return next((r["ratio"] for r in rows if r["workload"] == workload and r["config"] == config), None)

    lines = []

    def check(name: str, value: float | None, limit: float, at_least: bool = False) -> None:
        if value is None:
            return
        met = value >= limit if at_least else value <= limit
        lines.append(f"{'met' if met else 'MISSED'}: {name}: {value:.3f}")

    floor = ratio("silu_and_mul", "per-access hook floor (memory set, noop)")
    sampled = ratio("silu_and_mul", "sampled")
    naive = ratio("silu_and_mul", "naive exact count (2 atomics per access)")
    empty = ratio("decode_graph", EMPTY_PATCH)
    check("(a) noop <= 1.02", ratio("silu_and_mul", "noop"), 1.02)
    check("(a) counter <= 1.03", ratio("silu_and_mul", "counter"), 1.03)
    check("(a) blocks <= 1.15", ratio("silu_and_mul", "blocks"), 1.15)
    if floor and sampled:
        check("(a) sampled/floor <= 1.15", sampled / floor, 1.15)
    if naive and sampled:
        check("(a) naive/sampled >= 15", naive / sampled, 15, at_least=True)
    for mode in ("off", "noop", "counter"):
        value = ratio("decode_graph", mode)
        if value is not None and empty:
            check(f"(c) {mode} / empty-patch floor <= 1.01", value / empty, 1.01)
    block_sampled = ratio("decode_graph", "sampled, block set (1 in 2^10 blocks)")
    counter = ratio("decode_graph", "counter")
    if block_sampled and counter:
        check("(c) block-set sampled 10 / counter <= 1.01", block_sampled / counter, 1.01)
    spans = ratio("decode_graph_step_spans", "counter")
    unspanned = ratio("decode_graph_step_spans", "counter, no replay spans (GPUOBS_REPLAY_SPANS=0)")
    if spans and unspanned:
        check("(d) counter with replay spans / counter without <= 1.01", spans / unspanned, 1.01)
    off_spans = ratio("decode_graph_step_spans", "off")
    off_unspanned = ratio("decode_graph_step_spans", "off, no replay spans (GPUOBS_REPLAY_SPANS=0)")
    if off_spans and off_unspanned:
        check("(d) off with replay spans / off without <= 1.01", off_spans / off_unspanned, 1.01)
    launch_times = ratio("decode_graph_step_spans", "counter, launch times (GPUOBS_LAUNCH_TIMES=1)")
    if launch_times and unspanned:
        check("(d) counter with launch times / counter without spans <= 1.01", launch_times / unspanned, 1.01)
    # `off` over its floor (the floor tool with the same callbacks and an empty patch), same run
    steady = ratio("decode_graph_floor", next(row[0] for row in FLOOR if row[0].startswith("floor-steady")))
    off = ratio("decode_graph_floor", "off")
    if steady and off:
        check("(floor) off / floor-steady <= 1.01", off / steady, 1.01)
    return lines


WORKLOADS = ("silu", "gemm", "decode", "decompose", "inline", "floor", "step-spans")


def write_report(out: Path, commit: str, device: str, rows: list[dict], workloads: list[str]) -> None:
    """Written after every workload, so a run cut short by the device's time limit keeps what it measured."""
    report = {
        "commit": commit,
        "device": device,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": f"python bench/overhead.py --workloads {','.join(workloads)}",
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "workloads": sorted({row["workload"] for row in rows}),
        "rows": rows,
        "targets": check_targets(rows),
    }
    out.write_text(json.dumps(report, indent=2) + "\n")


def merge_reports(paths: list[str], out: Path) -> int:
    """One report from reports of disjoint workloads of one commit (each workload's ratios are
    within its own run, so rows from two runs of the same commit stand side by side)."""
    reports = [json.loads(Path(path).read_text()) for path in paths]
    commits = {report["commit"] for report in reports}
    if len(commits) != 1:
        print(f"overhead.py: reports of different commits {sorted(commits)}", file=sys.stderr)
        return 1
    seen: set[str] = set()
    rows: list[dict] = []
    for report in reports:
        workloads = {row["workload"] for row in report["rows"]}
        if workloads & seen:
            print(f"overhead.py: workload {sorted(workloads & seen)} in two reports", file=sys.stderr)
            return 1
        seen |= workloads
        rows += report["rows"]
    merged = dict(
        reports[0],
        rows=rows,
        targets=check_targets(rows),
        workloads=sorted(seen),
        merged_from=[{"date": r["date"], "command": r["command"]} for r in reports],
    )
    merged["command"] = "python bench/overhead.py --merge " + " ".join(Path(p).name for p in paths)
    out.write_text(json.dumps(merged, indent=2) + "\n")
    print_report(rows, merged["targets"])
    return 0


def print_report(rows: list[dict], targets: list[str]) -> None:
    print(f"{'workload':<18} {'config':<42} {'ratio':>8} {'median ms':>10} {'identical':>9}")
    for row in rows:
        print(
            f"{row['workload']:<18} {row['config']:<42} {row['ratio']:>8.3f} {row['median_ms']:>10.4f} "
            f"{str(row['output_identical']):>9}"
        )
    for line in targets:
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # no default: a run's report is filed under a dated name of its own (bench/results/README.md)
    parser.add_argument("--out", required=True, help="the report to write (JSON)")
    parser.add_argument("--commit", default=os.environ.get("GPUOBS_COMMIT", "unknown"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated, in the order to run: {', '.join(WORKLOADS)}"
    )
    parser.add_argument("--diagnose", action="store_true", help="SiLU-and-mul's empty-patch diagnostics only")
    parser.add_argument("--merge", nargs="+", metavar="REPORT", help="merge reports of disjoint workloads into --out")
    args = parser.parse_args()
    out = Path(args.out)
    if args.merge:
        return merge_reports(args.merge, out)
    workloads = [name for name in args.workloads.split(",") if name]
    unknown = [name for name in workloads if name not in WORKLOADS]
    if unknown or not workloads:
        parser.error(f"--workloads: {unknown or 'none'} not among {', '.join(WORKLOADS)}")
    if not FLOOR_TOOL.exists():
        parser.error(f"{FLOOR_TOOL} is missing: floors and diagnostics need a bench build (GPUOBS_BENCH_TOOLS=ON)")

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    build = Path(tempfile.mkdtemp(prefix="gpuobs-bench-build-"))
    silu = build / "silu_mul"
    subprocess.run(
        [
            nvcc,
            "-O3",
            "-arch=sm_90",
            "-I",
            str(HERE.parent / "tests" / "gpu" / "programs"),
            "-o",
            str(silu),
            str(HERE / "programs" / "silu_mul.cu"),
        ],
        check=True,
    )
    device = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    if args.diagnose:
        workloads = ["diagnose"]
    rows: list[dict] = []
    for name in workloads:
        if name in ("silu", "diagnose"):
            rows += measure(
                "silu_and_mul", [str(silu), "--iters", "30"], SILU if name == "silu" else DIAGNOSE, args.rounds
            )
        elif name == "gemm":
            rows += measure(
                "cublas_gemm_bf16", [sys.executable, str(HERE / "workloads" / "gemm.py")], GEMM, max(2, args.rounds - 1)
            )
        else:  # decode, decompose, inline, floor, step-spans: the same graph, a run of its own each
            workload, configs = {
                "decode": ("decode_graph", DECODE),
                "decompose": ("decode_graph_decomposed", DECOMPOSE),
                "inline": ("decode_graph_inline", INLINE),
                "floor": ("decode_graph_floor", FLOOR),
                "step-spans": ("decode_graph_step_spans", STEP_SPANS),
            }[name]
            rows += measure(
                workload,
                [sys.executable, str(HERE / "workloads" / "decode_graph.py"), "1000"],
                configs,
                args.rounds,
                deterministic=False,
            )
        write_report(out, args.commit, device, rows, workloads)
    print_report(rows, check_targets(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
