"""Where a vLLM engine step begins: the GPU worker's execute_model(scheduler_output)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

from ..method_hook import wrap_method_once

WORKER_MODULE = "vllm.v1.worker.gpu_worker"  # vLLM 0.25: both model runners are called from here


def install_step_hook(recorder: Callable[[Any, Any], None], module_name: str = WORKER_MODULE,
                      around: Callable[[Any], ContextManager] | None = None) -> bool:
    """Wraps Worker.execute_model once per process; False when it was already wrapped. Raises
    (for register() to log) when vLLM has no such hook. `around(worker)`: a context each step
    runs in (the op window)."""
    def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            recorder(self, scheduler_output)
            with around(self) if around is not None else contextlib.nullcontext():
                return original(self, scheduler_output, *args, **kwargs)

        return execute_model

    return wrap_method_once(module_name, "Worker", "execute_model", make_wrapper)
