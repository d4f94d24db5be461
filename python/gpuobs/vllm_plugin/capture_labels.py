"""Labels for the kernels vLLM's CUDA graphs run: GPUOBS_OPS_CAPTURE=1 records the ops of the
model while vLLM captures its graphs (gpuobs.op_recorder, with the graph nodes each op adds),
so that every replay's node executions count for the layer and op that captured them in
`gpuobsctl ops`, with nothing recorded per replay. It costs start-up time (a Python call per
op while graphs are captured), never steady state. Under torch.compile, ops the compiled code
reaches through the dispatcher are labelled (GEMMs, vLLM's custom ops such as attention and the
KV-cache write, with the layer their arguments name); kernels Inductor generated and launches
itself are not, and count as graph nodes captured outside any op."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from ..method_hook import wrap_method_once

log = logging.getLogger("gpuobs.vllm_plugin")

# The runner classes whose capture_model captures the graphs: vLLM 0.25 constructs the V2 model
# runner by default (its log says "Using V2 Model Runner"), the V1 runner when asked for it.
RUNNER_MODULES = ("vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu_model_runner")


def wanted() -> bool:
    return os.environ.get("GPUOBS_OPS_CAPTURE") == "1"


def install_capture_labels(annotations: Any, module_names: tuple[str, ...] = RUNNER_MODULES) -> int:
    """Wraps GPUModelRunner.capture_model of each runner module this vLLM has, once per process;
    returns how many it wrapped now (0: all were already wrapped). Raises (for register() to log)
    when no module has such a method. Whatever fails in the recorder, the capture runs as it
    would; a capture inside another wrapped capture is recorded once."""
    recording = threading.local()

    def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def capture_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(recording, "on", False):
                return original(self, *args, **kwargs)
            recorder = None
            try:
                if annotations.available():
                    from gpuobs.op_recorder import recording_ops  # torch: only where ops are recorded

                    model = self.get_model() if hasattr(self, "get_model") else getattr(self, "model", None)
                    recorder = recording_ops(annotations.record_op, model, annotations.record_capture)
                    recorder.__enter__()
            except Exception as error:  # noqa: BLE001 - the graphs are captured unlabelled
                recorder = None
                log.warning("gpuobs: graph nodes are not labelled (%s: %s)", type(error).__name__, error)
            recording.on = True
            try:
                return original(self, *args, **kwargs)
            finally:
                recording.on = False
                if recorder is not None:
                    try:
                        recorder.__exit__(None, None, None)
                    except Exception:  # noqa: BLE001
                        pass

        return capture_model

    wrapped, missing = 0, []
    for name in module_names:
        try:
            wrapped += wrap_method_once(name, "GPUModelRunner", "capture_model", make_wrapper)
        except Exception as error:  # noqa: BLE001 - a runner this vLLM lacks (or cannot import here)
            missing.append(f"{name}: {type(error).__name__}: {error}")
    if len(missing) == len(module_names):
        raise RuntimeError("no GPUModelRunner.capture_model to wrap (" + "; ".join(missing) + ")")
    return wrapped
