"""Runs a program under the injector and drains its segment live, as the daemon will."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import gpuobs
import numpy as np
import pytest
from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE, Segment, segment_paths

INJECTOR = Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so"
WORKLOADS = Path(__file__).parent / "workloads"


class InjectedRun:
    """One injected process, its segment, and everything read from it."""

    def __init__(
        self,
        argv: list[str],
        segment_dir: Path,
        *,
        mode: str = "counter",
        patch_set: str = "block",
        shift: int = 0,
        ring_records: int = 1 << 20,
        env: dict[str, str] | None = None,
        inject: bool = True,
        drain: bool = True,
    ) -> None:
        self.argv = argv
        self.segment_dir = segment_dir
        self.env = dict(os.environ)
        if inject:
            self.env.update(
                {
                    "CUDA_INJECTION64_PATH": str(INJECTOR),
                    "GPUOBS_SEGMENT_DIR": str(segment_dir),
                    "GPUOBS_MODE": mode,
                    "GPUOBS_PATCH_SET": patch_set,
                    "GPUOBS_SHIFT": str(shift),
                    "GPUOBS_RING_RECORDS": str(ring_records),
                    # the default cubin folder ($XDG_CACHE_HOME/gpuobs/cubins) under the test's own
                    # folder, never the machine's home
                    "XDG_CACHE_HOME": str(segment_dir / ".cache"),
                }
            )
        self.env.update(env or {})
        self.segment: Segment | None = None
        self.events: list[np.ndarray] = []
        self.launches: list[np.ndarray] = []
        self.first_event_at: float | None = None
        self.exited_at: float | None = None
        self.stdout_lines: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # drain=False leaves the segment to a gpuobsd (one consumer per segment)
        self._drainer = threading.Thread(target=self._drain if drain else (lambda: None), daemon=True)
        self._drainer.start()
        self._drain_enabled = drain

    def _open_segment(self) -> None:
        wanted = f"gpuobs-{self.process.pid}-"
        for path in segment_paths(self.segment_dir):
            if path.name.startswith(wanted):
                self.segment = Segment(path)
                return

    def _drain_once(self) -> int:
        got = 0
        assert self.segment is not None
        for ring in range(self.segment.event_rings):
            batch = self.segment.read_events(ring)
            if len(batch):
                if self.first_event_at is None:
                    self.first_event_at = time.monotonic()
                self.events.append(batch.copy())
                got += len(batch)
        launches = self.segment.read_launches()
        if len(launches):
            self.launches.append(launches.copy())
            got += len(launches)
        return got

    def _drain(self) -> None:
        while not self._stop.is_set():
            if self.segment is None:
                self._open_segment()
                if self.segment is None:
                    time.sleep(0.005)
                    continue
            with self._lock:
                got = self._drain_once()
            if not got:
                time.sleep(0.001)

    def read_json_line(self, timeout: float = 120.0) -> dict:
        line = self.process.stdout.readline()
        self.stdout_lines.append(line)
        return json.loads(line)

    def send_line(self, text: str = "go") -> None:
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 300.0) -> dict:
        """Waits for the process; returns its last JSON line. Drains whatever is left."""
        out, err = self.process.communicate(timeout=timeout)
        self.exited_at = time.monotonic()
        self.stderr = err
        self.stdout_lines.extend(out.splitlines())
        self._stop.set()
        self._drainer.join()
        if self._drain_enabled and self.segment is None:
            self._open_segment()
        if self._drain_enabled and self.segment is not None:
            while self._drain_once():
                pass
        lines = [line for line in self.stdout_lines if line.strip().startswith("{")]
        assert self.process.returncode == 0, f"exit {self.process.returncode}: {err[-3000:]}"
        return json.loads(lines[-1]) if lines else {}

    # -- what was read ----------------------------------------------------------------------
    def all_events(self) -> np.ndarray:
        return np.concatenate(self.events) if self.events else np.zeros(0, dtype=EVENT_DTYPE)

    def all_launches(self) -> np.ndarray:
        return np.concatenate(self.launches) if self.launches else np.zeros(0, dtype=LAUNCH_DTYPE)

    def kernel_table(self) -> dict[str, dict]:
        """Demangled name -> counters row (as a dict), slot, and the device census's launch shapes
        ({(grid, block): launches}, and the launches it could not attribute to a shape)."""
        assert self.segment is not None
        counters, kernels = self.segment.counters()
        shapes = self.segment.reader.launch_shapes() or {}
        table = {}
        for entry in self.segment.kernels():
            row = {name: int(kernels[entry["slot"]][name]) for name in kernels.dtype.names}
            row["slot"] = entry["slot"]
            row["mangled"] = entry["mangled"]
            counted, other = shapes.get(entry["slot"], ([], 0))
            row["shapes"] = {(tuple(grid), tuple(block)): launches for grid, block, launches in counted}
            row["other_shapes"] = other
            table[entry["demangled"]] = row
        return table

    def global_counters(self) -> dict:
        assert self.segment is not None
        return self.segment.counters()[0]


def saved_run(name: str) -> Path | None:
    """A finished run to judge instead of running one: GPUOBS_VLLM_RESULTS names a report folder
    brought back from the GPU machine (the $GPUOBS_REPORT_DIR of that run, holding `name`/)."""
    root = os.environ.get("GPUOBS_VLLM_RESULTS")
    return Path(root) / name if root and (Path(root) / name / "vllm-overhead.json").is_file() else None


VLLM_SKIP_REASON = "GPUOBS_VLLM_PAYLOAD (an unpacked vLLM payload) or GPUOBS_VLLM_RESULTS not set"


def vllm_bench(
    name: str, script: str, args: list[str], timeout_s: int, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The folder of a vLLM benchmark's run for a test module to judge: the saved run `name` when
    there is one, else a run made now with the payload GPUOBS_VLLM_PAYLOAD names, into
    $GPUOBS_REPORT_DIR/`name` when that is set."""
    saved = saved_run(name) or _RUNS.get(name)
    if saved is not None:
        return saved
    payload = os.environ.get("GPUOBS_VLLM_PAYLOAD")
    assert payload, VLLM_SKIP_REASON
    report_dir = os.environ.get("GPUOBS_REPORT_DIR")
    out = Path(report_dir) / name if report_dir else tmp_path_factory.mktemp(name)
    _RUNS[name] = run_bench(script, ["--payload", payload, *args], out, timeout_s)
    return _RUNS[name]


# runs made in this session, by name: the test modules that judge one run (test_vllm.py and
# test_vllm_requests.py judge "vllm") share it rather than run it twice
_RUNS: dict[str, Path] = {}


def run_bench(script: str, args: list[str], out: Path, timeout_s: int) -> Path:
    """Runs a vLLM benchmark into `out` for the tests to judge. Its output goes to a file, never
    a pipe: vLLM's engine-core child can outlive a killed parent and keep an inherited pipe open,
    and reading a pipe to its end then waits until the timeout."""
    out.mkdir(parents=True, exist_ok=True)
    console = out / "bench-console.txt"
    with console.open("w") as sink:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / script), *args, "--out", str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
        )
    assert done.returncode == 0, console.read_text()[-3000:]
    return out


def find_kernel(table: dict[str, dict], prefix: str) -> dict:
    matches = [row for name, row in table.items() if name.startswith(prefix) or row["mangled"].startswith(prefix)]
    assert len(matches) == 1, f"{prefix}: {list(table)}"
    return matches[0]


def assert_small_model_labels(table: dict[str, list[str]]) -> None:
    """What tests/gpu/workloads/torch_ops_labelled.py's two bf16 layers give each op, eager or
    captured in a graph (label -> kernel names): each layer's up and down projections a GEMM with
    their 64-token bf16 input, each layer's silu its elementwise silu kernel."""
    projections = [label for label in table if ".mlp.up_proj " in label or ".mlp.down_proj " in label]
    assert len(projections) == 4, table  # two layers, two projections each
    for label in projections:
        assert any("nvjet" in k or "gemm" in k.lower() or "cutlass" in k.lower() for k in table[label]), table[label]
        assert "bf16[64," in label, label
    silu = [label for label in table if "aten::silu" in label]
    assert len(silu) == 2 and all(any("silu" in k.lower() for k in table[label]) for label in silu), table


def keep_report(name: str, report: object) -> None:
    """Writes a report into $GPUOBS_REPORT_DIR (the GPU suite archives it), when that is set."""
    report_dir = os.environ.get("GPUOBS_REPORT_DIR")
    if report_dir:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        (Path(report_dir) / name).write_text(json.dumps(report, indent=1, sort_keys=True))
