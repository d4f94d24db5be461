"""Step attribution on hand-made launch ring rows: what a step keeps of its replays is
bounded, however many replays it launches."""

from __future__ import annotations

import numpy as np
from gpuobs.daemon.graph_exec import ReplayShape
from gpuobs.daemon.step_attribution import StepAttribution
from gpuobs.segment import LAUNCH_DTYPE, LAUNCH_KINDS, STEP_DTYPE


def step_rows(step: int, replays: range, graph_exec: int = 0x7000) -> np.ndarray:
    """A step record, then graph launch records of `replays` after it (host clock)."""
    rows = np.zeros(1 + len(replays), dtype=LAUNCH_DTYPE)
    record = rows[:1].view(STEP_DTYPE)
    record["kind"] = LAUNCH_KINDS["step"]
    record["step"] = step
    record["host_time_ns"] = step * 1_000_000
    launches = rows[1:]
    launches["kind"] = LAUNCH_KINDS["graph_launch"]
    launches["graph_exec"] = graph_exec
    launches["replay"] = np.arange(replays.start, replays.stop)
    launches["host_time_ns"] = step * 1_000_000 + 1 + np.arange(len(replays))
    return rows


def test_replays_beyond_those_a_step_keeps_are_not_remembered() -> None:
    steps = StepAttribution(lambda graph_exec: ReplayShape(1, 3, 12, {5: (2, 8), 6: (1, 4)}))
    steps.KEEP_STEPS = 8
    per_step = steps.MAX_REPLAYS_PER_STEP + 100
    for step in range(1, 41):
        steps.on_launches(step_rows(step, range(step * per_step, (step + 1) * per_step)))
    assert len(steps.steps) == 8 and steps.steps_seen == 40
    assert len(steps.replay_step) == 8 * steps.MAX_REPLAYS_PER_STEP
    newest = steps.steps[next(reversed(steps.steps))]
    assert newest.kernel_launches == 3 * per_step and newest.blocks_expected == 12 * per_step
    # per kernel, every replay counted (named or not): what the step's requests share
    assert newest.kernels == {5: [2 * per_step, 8 * per_step], 6: [per_step, 4 * per_step]}
    assert steps.step_of_replay(40 * per_step) is newest
    assert steps.step_of_replay(40 * per_step + steps.MAX_REPLAYS_PER_STEP) is None


def test_a_steps_eager_launches_are_counted_per_kernel_beside_its_replays() -> None:
    steps = StepAttribution(lambda graph_exec: ReplayShape(1, 2, 6, {5: (2, 6)}))
    rows = step_rows(1, range(1, 3))
    eager = np.zeros(3, dtype=LAUNCH_DTYPE)
    eager["kind"] = LAUNCH_KINDS["eager"]
    eager["kernel_slot"] = [5, 7, 7]
    eager["grid_x"], eager["grid_y"], eager["grid_z"] = [3, 10, 20], 1, 2
    eager["host_time_ns"] = 1_000_000 + 10 + np.arange(3)
    steps.on_launches(np.concatenate([rows, eager]))
    (step,) = steps.steps.values()
    assert step.kernels == {5: [2 * 2 + 1, 2 * 6 + 6], 7: [2, 60]}
    assert step.kernel_launches == sum(e for e, _ in step.kernels.values())
    assert step.blocks_expected == sum(b for _, b in step.kernels.values())
