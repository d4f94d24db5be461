"""A window of engine steps whose ops are recorded: GPUOBS_OPS_STEPS=N records the ops of the
first N engine steps of the process (gpuobs.op_recorder: module path, op, dtypes and shapes per
op), for `gpuobsctl ops`. The launches only join to them where the injector's launch trace is on
(GPUOBS_LAUNCH_TRACE=1), so the window is for a run that asks for it, never for steady state."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, ContextManager

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
        log.warning("gpuobs: GPUOBS_OPS_STEPS without GPUOBS_LAUNCH_TRACE=1: ops are recorded, but no launch joins to them")
    return steps


def model_of(worker: Any) -> Any:
    """vLLM's model on this worker (its modules give the ops their paths), or None."""
    runner = getattr(worker, "model_runner", None)
    try:
        return runner.get_model() if hasattr(runner, "get_model") else getattr(runner, "model", None)
    except Exception:  # noqa: BLE001 - paths are a nicety; the ops are recorded without them
        return None


class OpWindow:
    """Called with the worker before each step: the context its step runs in."""

    def __init__(self, annotations: Any, steps: int) -> None:
        self.annotations = annotations
        self.left = steps

    def record(self, label: str) -> None:
        try:
            self.annotations.record_op(label)
        except Exception:  # noqa: BLE001 - an op must run whatever happened to its label
            pass

    def __call__(self, worker: Any) -> ContextManager:
        if self.left <= 0:
            return contextlib.nullcontext()
        self.left -= 1
        try:
            if not self.annotations.available():
                return contextlib.nullcontext()
            from gpuobs.op_recorder import recording_ops  # torch: only where ops are recorded

            entered = contextlib.ExitStack()  # entered here, where a failure leaves the step unrecorded
            entered.enter_context(recording_ops(self.record, model_of(worker)))
            return entered
        except Exception as error:  # noqa: BLE001 - the step runs unrecorded
            self.left = 0
            log.warning("gpuobs: ops are not recorded (%s: %s)", type(error).__name__, error)
            return contextlib.nullcontext()
