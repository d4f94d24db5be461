"""Where a vLLM engine step begins: the GPU worker's execute_model(scheduler_output)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ..method_hook import wrap_method_once

WORKER_MODULE = "vllm.v1.worker.gpu_worker"  # vLLM 0.25: both model runners are called from here


def install_step_hook(
    recorder: Callable[[Any, Any], None], module_name: str = WORKER_MODULE, around: Any = None
) -> bool:
    """Wraps Worker.execute_model once per process; False when it was already wrapped. Raises
    (for register() to log) when vLLM has no such hook. `around(worker)`: a context each step
    runs in (the op window); where `around` has `sample(worker)` and the worker samples in a call
    of its own (sample_tokens, vLLM 0.25), that call runs in `around.sample(worker)`."""

    def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            recorder(self, scheduler_output)
            with around(self) if around is not None else contextlib.nullcontext():
                return original(self, scheduler_output, *args, **kwargs)

        return execute_model

    def make_sampling_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
            with around.sample(self):
                return original(self, *args, **kwargs)

        return sample_tokens

    wrapped = wrap_method_once(module_name, "Worker", "execute_model", make_wrapper)
    if wrapped and around is not None and hasattr(around, "sample"):
        try:
            wrap_method_once(module_name, "Worker", "sample_tokens", make_sampling_wrapper)
        except AttributeError:
            pass  # a vLLM that samples inside execute_model: the step's context holds it
    return wrapped
