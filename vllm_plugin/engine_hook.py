"""Where a vLLM engine step begins: the GPU worker's execute_model(scheduler_output)."""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Any, Callable, ContextManager

WORKER_MODULE = "vllm.v1.worker.gpu_worker"  # vLLM 0.25: both model runners are called from here


def install_step_hook(recorder: Callable[[Any, Any], None], module_name: str = WORKER_MODULE,
                      around: Callable[[Any], ContextManager] | None = None) -> bool:
    """Wraps Worker.execute_model once per process; False when it was already wrapped. Raises
    (for register() to log) when vLLM has no such hook. `around(worker)`: a context each step
    runs in (the op window)."""
    module = importlib.import_module(module_name)
    worker = module.Worker
    original = worker.execute_model
    if getattr(original, "__gpuobs_wrapped__", False):
        return False

    @functools.wraps(original)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        recorder(self, scheduler_output)
        with around(self) if around is not None else contextlib.nullcontext():
            return original(self, scheduler_output, *args, **kwargs)

    execute_model.__gpuobs_wrapped__ = True  # type: ignore[attr-defined]
    worker.execute_model = execute_model
    return True
