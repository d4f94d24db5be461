"""Graph execs across unpatch and re-patch, with execs alive (bench/repatch_tool, a bench build's
tool, since gpuobs refuses to change the patched code while an exec lives): after
sanitizerUnpatchModule, do an older exec's replays run unpatched code; after re-patching the same
set, do old execs still work; does cudaGraphExecUpdate or a new instantiation pick up a module
patched with another set. Each scenario is a fresh process of tests/gpu/programs/graph_repatch.cu
(an error may leave its context unusable), a script of steps.

The answers are data, printed and written to $GPUOBS_REPORT_DIR/graph-repatch.json, never
asserted. What is asserted is what must hold whatever they are: the process ends and reports;
the tool counted the first passes under its first set exactly (or the answers mean nothing);
every launch that ran without an error gave the right output; every counter grew by whole
kernels' blocks (a pass is 8 + 4 blocks); no step that launches nothing counted anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import INJECTOR, keep_report

PROGRAM = Path(__file__).parent / "programs" / "graph_repatch.cu"
TOOL = INJECTOR.parent / "libgpuobs_repatch_tool.so"
WHOLE = {0, 4, 8, 12}  # the blocks of no kernel, offset_kernel, scale_kernel, both
LAUNCHES = ("eager", "replay:")

# name -> the steps, each with the question its outcome answers (None: a step on the way)
SCENARIOS: dict[str, list[tuple[str, str | None]]] = {
    "unpatch": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("replay:0", "after unpatch: an exec instantiated before it runs"),
        ("eager", "after unpatch: an eager launch runs"),
        ("instantiate", None),
        ("replay:1", "after unpatch: an exec instantiated after it runs"),
    ],
    "repatch-same": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("patch:a", None),
        ("replay:0", "after unpatch and re-patching the same set: an exec instantiated before runs"),
        ("eager", "after unpatch and re-patching the same set: an eager launch runs"),
    ],
    "changed-old-exec": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("patch:b", None),
        ("eager", "after re-patching with another set: an eager launch runs"),
        ("replay:0", "after re-patching with another set: an exec instantiated before runs"),
    ],
    "changed-exec-update": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("patch:b", None),
        ("update:0", "after re-patching with another set: cudaGraphExecUpdate of an older exec"),
        ("replay:0", "after re-patching with another set and cudaGraphExecUpdate: the older exec runs"),
    ],
    "changed-reinstantiate": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("patch:b", None),
        ("instantiate", None),
        ("replay:1", "after re-patching with another set: an exec instantiated afresh runs"),
    ],
    "changed-and-back": [
        ("eager", None),
        ("instantiate", None),
        ("replay:0", None),
        ("unpatch", None),
        ("patch:b", None),
        ("unpatch", None),
        ("patch:a", None),
        ("replay:0", "after another set and back to the first: an exec instantiated before runs"),
        ("eager", "after another set and back to the first: an eager launch runs"),
    ],
}
FINDINGS: dict[str, dict] = {}
HUNG: list[str] = []  # the steps of a process that did not end: the scenarios after it are skipped


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not TOOL.exists():
        pytest.skip(f"{TOOL.name} is a bench build's (GPUOBS_BENCH_TOOLS=ON, as install_on_device.sh builds)")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = tmp_path_factory.mktemp("programs") / "graph_repatch"
    subprocess.run(
        [nvcc, "-O2", "-arch=sm_90", "-I", str(PROGRAM.parent), "-o", str(binary), str(PROGRAM), "-ldl"], check=True
    )
    return str(binary)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    keep_report("graph-repatch.json", FINDINGS)
    print(json.dumps({name: found["answers"] for name, found in FINDINGS.items()}, indent=1))


def run_steps(program: str, steps: list[str], tool: bool) -> tuple[list[dict], dict]:
    """(one record per step run, the summary) of a fresh process, with the repatch tool injected
    or none."""
    env = {name: value for name, value in os.environ.items() if name != "CUDA_INJECTION64_PATH"}
    env["CUDA_MODULE_LOADING"] = "LAZY"  # the tool binds its counters to functions as they load
    if tool:
        env["CUDA_INJECTION64_PATH"] = str(TOOL)
    if HUNG:
        pytest.skip(f"an earlier scenario's process hung ({HUNG[0]}): the rest would spend device minutes the same way")
    try:
        done = subprocess.run(
            [program, *steps],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,  # seconds of a process that runs a few kernels: a hang is a failure, and short
        )
    except subprocess.TimeoutExpired:
        HUNG.append(" ".join(steps))
        raise
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1].get("summary"), done.stdout[-3000:]
    return lines[:-1], lines[-1]


def outcome(record: dict) -> str:
    """What a step did, in words, from its record: which set's code a launch ran (the counter
    that grew), or the error."""
    if record["error"]:
        return f"error ({'fatal' if record['fatal'] else 'not fatal'}): {record['error']}"
    if not record["step"].startswith(LAUNCHES):
        return "done" + (f", update result {record['update_result']}" if record["update_result"] >= 0 else "")
    blocks_a, blocks_b, accesses_b = record["counts"]
    ran = [f"set {name} ({count} blocks)" for name, count in (("a", blocks_a), ("b", blocks_b)) if count]
    if accesses_b:
        ran.append(f"set b's access hook ({accesses_b} accesses)")
    return (" and ".join(ran) or "unpatched code") + ("" if record["output_ok"] else ", WRONG OUTPUT")


def test_the_program_alone_runs_every_step_right(program: str) -> None:
    """Without the tool: every launch right, nothing counted, the tool's steps said to be absent."""
    records, summary = run_steps(program, [step for step, _ in SCENARIOS["changed-and-back"]], tool=False)
    assert not summary["tool"] and summary["stopped_at"] is None, summary
    for record in records:
        assert record["error"] is None and record["counts"] == [0, 0, 0], record
        if record["step"].startswith(LAUNCHES):
            assert record["output_ok"] is True, record
        if record["step"].startswith(("unpatch", "patch:")):
            assert record["tool_failures"] == -1, record


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_graph_execs_across_unpatch_and_repatch(program: str, scenario: str) -> None:
    script = SCENARIOS[scenario]
    records, summary = run_steps(program, [step for step, _ in script], tool=True)
    answers = {question: outcome(record) for (_, question), record in zip(script, records) if question}
    for _, question in script[len(records) :]:
        if question:
            answers[question] = f"not run: the process stopped at step {summary['stopped_at']}"
    FINDINGS[scenario] = {"steps": records, "summary": summary, "answers": answers}
    assert summary["tool"] and summary["bind_failures"] == 0, summary
    # the first eager pass and the first replay ran under set a, before any change: counted exactly
    assert [r["counts"] for r in records[:3]] == [[12, 0, 0], [0, 0, 0], [12, 0, 0]], records[:3]
    for record in records:
        if record["error"] and record["fatal"]:
            continue  # an answer (which step, which error), recorded
        if record["step"].startswith(LAUNCHES):
            assert record["output_ok"] is True, record
            blocks_a, blocks_b, _ = record["counts"]
            assert blocks_a in WHOLE and blocks_b in WHOLE, record
        else:
            assert record["counts"] == [0, 0, 0], record
