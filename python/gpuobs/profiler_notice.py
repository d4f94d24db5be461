"""Tells the injector when a profiler starts in the process it observes, so that an empty
profile has a reason an operator can find.

Measured on the H200 (driver r580, bench/results/profiler-coexistence-2026-12-02-9317789.json):
while any Compute Sanitizer subscriber is attached, even one with no callback and no patch, CUPTI
fails with error 39 (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) in its callback API and its
activity API alike, so torch.profiler records no kernel; Kineto without its subscription
(KINETO_USE_DAEMON) fails the same way, and the Sanitizer's unsubscribe does not give the slot
back. gpuobs cannot make the profiler work beside it; it counts each start in the segment
(`gpuobsctl status`, `gpuobs_profiler_starts_total`) and the injector says so once in the log.

The hook sits where every torch.profiler and autograd-profiler start passes before Kineto
reaches CUPTI (`torch.autograd.profiler.profile._prepare_trace`); vLLM's start_profile ends
there too. Only starts that ask for GPU activity are noted: a CPU-only profile loses nothing.

In a plain PyTorch program under gpuobs: `import gpuobs.profiler_notice as n; n.install_here()`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from .method_hook import wrap_method_once

log = logging.getLogger("gpuobs.profiler_notice")

PROFILER_MODULE = "torch.autograd.profiler"


class Notes(Protocol):
    def available(self) -> bool: ...
    def note_profiler(self, who: str) -> int: ...


def wants_gpu_activity(profile: Any) -> bool:
    """Whether this profile asks CUPTI for anything (kernels, copies): what gpuobs's presence
    takes from it."""
    activities = getattr(profile, "kineto_activities", None)
    if activities is None:  # an older profile object: its CUDA switch
        return bool(getattr(profile, "use_cuda", False) or getattr(profile, "use_device", None))
    return any("CUDA" in str(activity) for activity in activities)


def install_profiler_notice(notes: Notes, module_name: str = PROFILER_MODULE) -> bool:
    """Wraps the profiler's preparation once per process; False when it was already wrapped.
    Raises (for the caller to log) when the module or the method is missing. The wrapper never
    raises into the profiler: whatever fails here, the profiler starts as it would."""

    def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def _prepare_trace(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:  # once per profile object: a schedule prepares again at every cycle
                if not getattr(self, "_gpuobs_noted", False) and wants_gpu_activity(self) and notes.available():
                    self._gpuobs_noted = True
                    notes.note_profiler("torch.profiler")
            except Exception as error:  # noqa: BLE001 - the profiler must start whatever happened here
                log.debug("gpuobs: profiler start not noted (%s)", error)
            return original(self, *args, **kwargs)

        return _prepare_trace

    return wrap_method_once(module_name, "profile", "_prepare_trace", make_wrapper)


def install_here() -> bool:
    """For a plain PyTorch program: the notice, when this process runs under the injector (its
    path in CUDA_INJECTION64_PATH); False otherwise, and nothing is changed."""
    from .injector_functions import InjectorAnnotations

    injector = os.environ.get("CUDA_INJECTION64_PATH", "")
    if not injector:
        return False
    return install_profiler_notice(InjectorAnnotations(injector))
