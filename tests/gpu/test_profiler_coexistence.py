"""torch.profiler in a process under the injector: what the profiler records, and whether gpuobs's
census stays exact while it does.

The driver admits one tool: with the Sanitizer subscriber attached, Kineto's cuptiSubscribe fails
(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) and the trace has no kernel. Each case below is a
way around it: Kineto without its callback subscription (KINETO_USE_DAEMON), the injector
unsubscribing before the profiler starts (gpuobs_step_aside), both, and a bare subscriber with no
callback and no patch (is subscribing alone what excludes CUPTI?). What every case must keep,
whatever the profiler gets: the program's results and exit, and the device census of the kernels
patched before any step-aside. What the profiler got is written to
$GPUOBS_REPORT_DIR/profiler-coexistence.json (the findings docs/user-guide.md reports)."""

from __future__ import annotations

import collections
import math
import sys

import pytest
from harness import INJECTOR, WORKLOADS, InjectedRun, keep_report

TORCH_OPS = [sys.executable, str(WORKLOADS / "torch_ops.py"), "--profile", "--iters", "3"]
FLOOR_TOOL = INJECTOR.parent / "libgpuobs_floor_tool.so"

# name -> (environment, injector asked to step aside, gpuobs injected)
CASES = {
    "gpuobs": ({}, False, True),
    "gpuobs+KINETO_USE_DAEMON": ({"KINETO_USE_DAEMON": "1"}, False, True),
    "gpuobs, stepped aside": ({"GPUOBS_STEP_ASIDE": "1"}, True, True),
    "gpuobs, stepped aside+KINETO_USE_DAEMON": ({"KINETO_USE_DAEMON": "1", "GPUOBS_STEP_ASIDE": "1"}, True, True),
    "bare subscriber (floor tool, no callback, no patch)": (
        {"CUDA_INJECTION64_PATH": str(FLOOR_TOOL), "GPUOBS_FLOOR_PATCH": "0", "GPUOBS_FLOOR_CALLBACKS": ""},
        False,
        False,
    ),
}
FINDINGS: dict[str, dict] = {}


def census_of(kernels: list[dict]) -> collections.Counter:
    """(name, grid, block) -> launches."""
    return collections.Counter((k["name"], tuple(k["grid"]), tuple(k["block"])) for k in kernels)


@pytest.fixture(scope="module")
def without_tool(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run = InjectedRun(TORCH_OPS, tmp_path_factory.mktemp("no-tool"), inject=False)
    return run.finish(timeout=120)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    keep_report("profiler-coexistence.json", FINDINGS)


@pytest.mark.parametrize("case", list(CASES))
def test_profiler_beside_the_injector(case: str, without_tool: dict, shm_dir) -> None:
    env, step_aside, injected = CASES[case]
    argv = TORCH_OPS + (["--step-aside"] if step_aside else []) + (["--notice"] if injected else [])
    run = InjectedRun(argv, shm_dir, mode="counter", env={"KINETO_LOG_LEVEL": "1", **env}, inject=True, drain=injected)
    out = run.finish(timeout=120)  # a profiler that cannot attach must not hang the program either
    assert out["checksum"] == without_tool["checksum"]  # the program's results, unchanged
    theirs = census_of(without_tool["profiler_kernels"])
    got = census_of(out["profiler_kernels"])
    finding: dict = {
        "profiler_kernel_events": sum(got.values()),
        "profiler_kernel_events_without_tool": sum(theirs.values()),
        "profiler_equal_to_without_tool": got == theirs,
        "step_aside_rc": out.get("step_aside_rc"),
        "log": [
            line
            for line in run.stderr.splitlines()
            if any(word in line for word in ("CUPTI", "cupti", "gpuobs", "Kineto", "kineto"))
        ][:20],
    }
    FINDINGS[case] = finding
    if not injected:
        return
    # the profiler's start was noted: counted in the segment once, said once in the process's log
    assert out["notice_installed"] is True
    finding["profiler_starts"] = int(run.global_counters()["profiler_starts"])
    said = [line for line in run.stderr.splitlines() if "started in this process" in line]
    if not step_aside:  # stepped aside, the injector has left: what it notes then is not asked for
        assert finding["profiler_starts"] == 1 and len(said) == 1, (finding["profiler_starts"], said)
    table = run.kernel_table()
    ours = collections.Counter(
        {
            (name, grid, block): launches
            for name, row in table.items()
            for (grid, block), launches in row["shapes"].items()
        }
    )
    # the profiled run's 3 steps and the warm-up step before them, all in patched modules
    expected = {key: count * 4 // 3 for key, count in theirs.items()}
    finding["census_equal"] = {key: ours[key] for key in theirs} == expected
    finding["census"] = {
        f"{name} {grid} {block}": [ours[(name, grid, block)], count] for (name, grid, block), count in expected.items()
    }
    finding["blocks_observed_equal_expected"] = all(
        row["blocks_observed"] == row["blocks_expected"] for row in table.values()
    )
    if not step_aside:  # the subscriber stays: the census must be exact whatever the profiler got
        assert finding["census_equal"], finding["census"]
        assert finding["blocks_observed_equal_expected"]
        for name, row in table.items():
            assert row["blocks_expected"] == sum(math.prod(g) * n for (g, _), n in row["shapes"].items()), name
