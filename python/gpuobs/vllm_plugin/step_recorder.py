"""What one engine step tells gpuobs: written before the step launches its work."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from gpuobs._native import PROCESS_ROLES, STEP_SAME_REQUESTS

from .step_flops import FlopsOf, flops_estimator

log = logging.getLogger("gpuobs.vllm_plugin")

SAME_REQUESTS = STEP_SAME_REQUESTS  # the requests and their tokens are those of the step before
MAX_ATTEMPTS = 1000  # steps to wait for CUDA to load the injector before giving up


class Annotations(Protocol):
    def available(self) -> bool: ...
    def record_step(
        self, step: int, requests: int, tokens: int, ids: bytes | None, flags: int, flops: int = 0
    ) -> int: ...
    def set_label(self, label: str) -> int: ...
    def set_identity(self, role: int, rank: int, world_size: int, local_rank: int, model: str) -> int: ...


class StepRecorder:
    """Called from the engine thread at each step; any failure disables it, with one log line."""

    def __init__(
        self, annotations: Annotations, estimator_for: Callable[[Any], FlopsOf | None] = flops_estimator
    ) -> None:
        self.annotations = annotations
        self.estimator_for = estimator_for
        self.flops_of: FlopsOf | None = None  # vLLM's FLOP estimate of a step, where its MFU metrics are on
        self.enabled = True
        self.step = 0
        self.attempts = 0
        self.labelled = False
        self.last_scheduled: list[tuple[str, int]] | None = None

    def disable(self, why: str) -> None:
        self.enabled = False
        log.warning("gpuobs: engine steps are no longer recorded (%s)", why)

    def __call__(self, worker: Any, scheduler_output: Any) -> None:
        if not self.enabled:
            return
        try:
            if not self.annotations.available():
                self.attempts += 1
                if self.attempts >= MAX_ATTEMPTS:
                    self.disable("the injector is not loaded in this process")
                return
            if not self.labelled:
                self.labelled = True
                self.annotations.set_label(process_label(worker))
                self.annotations.set_identity(*process_identity(worker))
                self.flops_of = self.estimate_with(worker)
            scheduled = scheduled_tokens(scheduler_output.num_scheduled_tokens)
            tokens = int(scheduler_output.total_num_scheduled_tokens)
            flops = self.flops(scheduler_output)
            self.step += 1
            # a dropped record is counted by the injector, in the segment: nothing to do here
            if scheduled == self.last_scheduled:  # decode steps: each request's count is unchanged
                self.annotations.record_step(self.step, len(scheduled), tokens, None, SAME_REQUESTS, flops)
            else:
                self.annotations.record_step(self.step, len(scheduled), tokens, step_text(scheduled), 0, flops)
                self.last_scheduled = scheduled
        except Exception as error:  # noqa: BLE001 - the engine must run on
            self.disable(f"{type(error).__name__}: {error}")

    def estimate_with(self, worker: Any) -> FlopsOf | None:
        try:
            return self.estimator_for(worker)
        except Exception as error:  # noqa: BLE001 - steps are still recorded, without the estimate
            log.warning("gpuobs: no FLOP estimate for engine steps (%s: %s)", type(error).__name__, error)
            return None

    def flops(self, scheduler_output: Any) -> int:
        """The step's estimate (0: none); a failure stops estimating, with one log line, not recording."""
        if self.flops_of is None:
            return 0
        try:
            return self.flops_of(scheduler_output)
        except Exception as error:  # noqa: BLE001 - the engine and its step records run on
            self.flops_of = None
            log.warning("gpuobs: engine steps no longer carry a FLOP estimate (%s: %s)", type(error).__name__, error)
            return 0


def scheduled_tokens(num_scheduled_tokens: Any) -> list[tuple[str, int]]:
    """(request id, tokens) in the scheduler's order, from vLLM's dict request id -> tokens: the
    daemon splits a step's device time among its requests by these counts."""
    return [(str(request), int(count)) for request, count in num_scheduled_tokens.items()]


def step_text(scheduled: list[tuple[str, int]]) -> bytes:
    """One 'id\ttokens' line per request (layout 7): a tab never occurs in a vLLM request id, and
    the daemon reads a line without one as an id whose tokens are unknown."""
    lines = (f"{one_line(request)}\t{count}" for request, count in scheduled)
    return "\n".join(lines).encode("utf-8", "replace")


def one_line(request: str) -> str:
    """The id with no tab or newline, which would split its line."""
    return request.replace("\t", " ").replace("\n", " ")


def model_name(worker: Any) -> str:
    model = getattr(getattr(worker, "model_config", None), "served_model_name", None) or getattr(
        getattr(worker, "model_config", None), "model", "?"
    )
    if isinstance(model, (list, tuple)):
        model = model[0] if model else "?"
    return os.path.basename(str(model).rstrip("/"))


def process_label(worker: Any) -> str:
    """role, rank, model: what an operator needs to tell the segments of one server apart."""
    return f"vllm engine rank {getattr(worker, 'rank', '?')} {model_name(worker)}"


def process_identity(worker: Any) -> tuple[int, int, int, int, str]:
    """(role, rank, world size, local rank, model) as segment fields, from vLLM's GPU worker."""
    parallel = getattr(worker, "parallel_config", None)
    return (
        PROCESS_ROLES["engine"],
        int(getattr(worker, "rank", 0) or 0),
        int(getattr(parallel, "world_size", 1) or 1),
        int(getattr(worker, "local_rank", 0) or 0),
        model_name(worker),
    )
