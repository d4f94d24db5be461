"""The FLOP estimate of an engine step, as vLLM makes it for its own MFU metrics
(`--enable-mfu-metrics`): the daemon divides it by the step's measured device time, so an
operator sees the rate the GPU achieved beside vLLM's figure (the same estimate over wall time).

The estimate is vLLM's code on the step's scheduler output (the same input its scheduler uses),
made only where the operator turned vLLM's MFU metrics on: it costs the engine thread what vLLM's
own estimate costs, once more per step."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

PERF_MODULE = "vllm.v1.metrics.perf"  # vLLM 0.25: ModelMetrics.get_step_perf_stats_per_gpu

FlopsOf = Callable[[Any], int]  # scheduler output -> FLOPs per GPU


def flops_estimator(worker: Any, module_name: str = PERF_MODULE) -> FlopsOf | None:
    """vLLM's per-step estimate for this worker's model, or None where its MFU metrics are off or
    it knows no component of the model. Raises (for the recorder to log once) where vLLM lacks it."""
    config = getattr(worker, "vllm_config", None)
    if not getattr(getattr(config, "observability_config", None), "enable_mfu_metrics", False):
        return None
    metrics = importlib.import_module(module_name).ModelMetrics(config)
    if not metrics.is_enabled():
        return None

    def flops_of(scheduler_output: Any) -> int:
        return max(0, int(metrics.get_step_perf_stats_per_gpu(scheduler_output).num_flops_per_gpu))

    return flops_of
