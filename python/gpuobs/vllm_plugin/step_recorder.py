"""What one engine step tells gpuobs: written before the step launches its work."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpuobs import step_text
from gpuobs._native import PROCESS_ROLES, STEP_SAME_REQUESTS
from gpuobs.step_text import KvCacheLayout

from .kv_cache import cache_stores_seen, kv_cache_layout, new_blocks
from .step_flops import FlopsOf, flops_estimator

log = logging.getLogger("gpuobs.vllm_plugin")

SAME_REQUESTS = STEP_SAME_REQUESTS  # the requests and their tokens are those of the step before
MAX_ATTEMPTS = 1000  # steps to wait for CUDA to load the injector before giving up
LAYOUT_EVERY = 1000  # steps between the KV cache's layout sent again (a lost record costs no more)


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
        self,
        annotations: Annotations,
        estimator_for: Callable[[Any], FlopsOf | None] = flops_estimator,
        environment: Mapping[str, str] = os.environ,
    ) -> None:
        self.annotations = annotations
        # KV-cache blocks and layout: only where the cache kernel's stores can be seen
        self.track_cache = cache_stores_seen(environment)
        self.layout: KvCacheLayout | None = None
        self.layout_sent = -LAYOUT_EVERY  # the step it was last sent in
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
            blocks, layout = self.cache_parts(worker, scheduler_output)
            # a dropped record is counted by the injector, in the segment: nothing to do here
            same = scheduled == self.last_scheduled  # decode steps: each request's count is unchanged
            if same and not blocks and layout is None:
                self.annotations.record_step(self.step, len(scheduled), tokens, None, SAME_REQUESTS, flops)
            else:  # a `same` text where only blocks or the layout are new
                text = step_text.encode(None if same else scheduled, blocks, layout)
                self.annotations.record_step(self.step, len(scheduled), tokens, text, 0, flops)
                self.last_scheduled = scheduled
        except Exception as error:  # noqa: BLE001 - the engine must run on
            self.disable(f"{type(error).__name__}: {error}")

    def cache_parts(self, worker: Any, scheduler_output: Any) -> tuple[dict[str, list[int]], KvCacheLayout | None]:
        """The blocks this step hands out and the layout when due; a failure stops only these,
        with one log line (the steps are still recorded)."""
        if not self.track_cache:
            return {}, None
        try:
            return new_blocks(scheduler_output), self.layout_due(worker)
        except Exception as error:  # noqa: BLE001 - the engine and its step records run on
            self.track_cache = False
            log.warning("gpuobs: no KV-cache slots are recorded (%s: %s)", type(error).__name__, error)
            return {}, None

    def layout_due(self, worker: Any) -> KvCacheLayout | None:
        """The KV cache's layout when it is to be sent with this step: once the runner has its
        cache, then every LAYOUT_EVERY steps. A runner without one that can be described (a hybrid
        model) stops the blocks too, with one log line: they would name no slot."""
        if self.step - self.layout_sent < LAYOUT_EVERY:
            return None
        if self.layout is None:
            self.layout = kv_cache_layout(worker)
            if self.layout is None:
                if getattr(getattr(worker, "model_runner", None), "kv_caches", None):
                    self.track_cache = False
                    log.warning("gpuobs: the KV cache's layout cannot be described: no cache slots are recorded")
                return None
        self.layout_sent = self.step
        return self.layout

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
