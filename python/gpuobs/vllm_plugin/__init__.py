"""The gpuobs plugin for vLLM (entry point group `vllm.general_plugins`).

vLLM calls `register()` in every process it starts (API server, engine core, workers), maybe
more than once. In a process the injector observes (CUDA_INJECTION64_PATH names it), the plugin
wraps the GPU worker's `execute_model` so that each engine step is written into the process's
segment (step number, requests and tokens scheduled, request ids), names the process (role,
rank, model), records the ops of its first GPUOBS_OPS_STEPS steps and of the windows gpuobsd opens
(op_window.py) and, with GPUOBS_OPS_CAPTURE=1, those that capture its CUDA graphs
(capture_labels.py), and notes each profiler started in it (vLLM's start_profile: it records no
GPU activity beside the injector, gpuobs.profiler_notice says why). Elsewhere it does nothing.
It never raises into vLLM: a hook that is missing or fails disables it with one log line, and
the engine runs on.
"""

from __future__ import annotations

import logging
import os

from ..injector_functions import InjectorAnnotations
from ..profiler_notice import install_profiler_notice
from .capture_labels import install_capture_labels
from .capture_labels import wanted as capture_labels_wanted
from .engine_hook import install_step_hook
from .op_window import OpWindow, window_steps
from .step_recorder import StepRecorder

log = logging.getLogger("gpuobs.vllm_plugin")
_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    injector = os.environ.get("CUDA_INJECTION64_PATH", "")
    if not injector:
        return  # not observed: nothing to annotate
    annotations = InjectorAnnotations(injector)
    try:
        # always around the step: a window may be asked for at any time (gpuobsctl ops --record-steps)
        install_step_hook(StepRecorder(annotations), around=OpWindow(annotations, window_steps()))
    except Exception as error:  # noqa: BLE001 - vLLM must start whatever went wrong here
        log.warning("gpuobs: engine steps are not recorded (%s: %s)", type(error).__name__, error)
    if capture_labels_wanted():
        try:
            install_capture_labels(annotations)
        except Exception as error:  # noqa: BLE001
            log.warning("gpuobs: graph nodes will not be labelled (%s: %s)", type(error).__name__, error)
    try:  # vLLM's start_profile (and any torch.profiler in the process) goes through torch's
        install_profiler_notice(annotations)
    except Exception as error:  # noqa: BLE001
        log.warning("gpuobs: a profiler's start will not be noted (%s: %s)", type(error).__name__, error)
