"""Windows of engine steps whose ops are recorded (gpuobs.op_recorder: module path, op, dtypes and
shapes per op), for `gpuobsctl ops`: GPUOBS_OPS_STEPS=N records the first N steps of the process,
whose launches join to their ops only where the process runs with the launch trace
(GPUOBS_LAUNCH_TRACE=1, a host callback per launch all its life); `gpuobsctl ops --record-steps N`
opens a window at run time, with the launch trace on for its steps only."""

from __future__ import annotations

import contextlib
import logging
import os
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger("gpuobs.vllm_plugin")


def window_steps() -> int:
    """GPUOBS_OPS_STEPS as a count of steps; 0 when unset or not a number (said once)."""
    text = os.environ.get("GPUOBS_OPS_STEPS", "")
    if not text:
        return 0
    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if steps < 0:
        log.warning("gpuobs: GPUOBS_OPS_STEPS=%s is not a number of steps; no ops are recorded", text)
        return 0
    if os.environ.get("GPUOBS_LAUNCH_TRACE") != "1":
        log.warning(
            "gpuobs: GPUOBS_OPS_STEPS without GPUOBS_LAUNCH_TRACE=1: ops are recorded, but no launch joins to them"
        )
    return steps


def model_of(worker: Any) -> Any:
    """vLLM's model on this worker (its modules give the ops their paths), or None."""
    runner: Any = getattr(worker, "model_runner", None)  # vLLM's, or None: both answer hasattr
    try:
        return runner.get_model() if hasattr(runner, "get_model") else getattr(runner, "model", None)
    except Exception:  # noqa: BLE001 - paths are a nicety; the ops are recorded without them
        return None


class OpWindow:
    """Called with the worker before each step: the context its step runs in. A window opens with
    GPUOBS_OPS_STEPS at start (the process then runs with its own launch trace) or when the daemon
    asks (gpuobsctl ops --record-steps N: the injector hands the request over at the next step);
    such a window turns the launch trace on for exactly its steps, so that outside it the steps
    pay no host callback per launch. Between windows a step costs one call into the injector."""

    def __init__(self, annotations: Any, steps: int = 0) -> None:
        self.annotations = annotations
        self.left = steps
        self.traced = False  # this window turned the launch trace on; off at the first step after it
        self.in_step = False  # the step under way is one of a window (its sampling is recorded too)

    def record(self, label: str) -> None:
        try:
            self.annotations.record_op(label)
        except Exception:  # noqa: BLE001 - an op must run whatever happened to its label
            pass

    def __call__(self, worker: Any) -> AbstractContextManager:
        """The context of a step's execute_model."""
        self.in_step = False
        try:
            if self.left <= 0:
                self._trace_off()  # the window ended with the step before (its sampling included)
                if not self._take():
                    return contextlib.nullcontext()
            elif self.traced:  # each step of the window says it is alive (the injector closes a silent one)
                self.annotations.launch_trace_window(True)
            self.left -= 1
            context = self._recording(worker)
            self.in_step = True
            return context
        except Exception as error:  # noqa: BLE001 - the step runs unrecorded
            self._give_up(error)
            return contextlib.nullcontext()

    def sample(self, worker: Any) -> AbstractContextManager:
        """The context of the same step's sample_tokens (vLLM 0.25 samples, lm_head included, in a
        call of its own after execute_model): recorded when the step was."""
        if not self.in_step:
            return contextlib.nullcontext()
        try:
            return self._recording(worker)
        except Exception as error:  # noqa: BLE001 - the sampling runs unrecorded
            self._give_up(error)
            return contextlib.nullcontext()

    def _recording(self, worker: Any) -> AbstractContextManager:
        if not self.annotations.available():
            raise RuntimeError("the injector is not loaded")
        from gpuobs.op_recorder import recording_ops  # torch: only where ops are recorded

        return recording_ops(self.record, model_of(worker))

    def _give_up(self, error: Exception) -> None:
        self.left, self.in_step = 0, False
        self._trace_off()
        log.warning("gpuobs: ops are not recorded (%s: %s)", type(error).__name__, error)

    def _take(self) -> bool:
        """A window the daemon asked for, with the launch trace on for it; False when none."""
        if not self.annotations.available():
            return False
        steps = self.annotations.take_ops_window()
        if steps <= 0:
            return False
        self.left = steps
        self.traced = self.annotations.launch_trace_window(True) == 0
        log.info("gpuobs: recording the ops of the next %d engine steps (asked by gpuobsd)", steps)
        return True

    def _trace_off(self) -> None:
        if self.traced:
            self.traced = False
            self.annotations.launch_trace_window(False)
