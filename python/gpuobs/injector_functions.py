"""The functions the injector exports to the program it observes (engine steps, the process's
label, a profiler's start), reached through ctypes from the vLLM plugin and gpuobs.profiler_notice."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

RECORDED, DROPPED, NOT_OBSERVING = 0, 1, -1
log = logging.getLogger("gpuobs")


# What each exported function takes. All but the first two came later: an older injector lacks them, and
# a call then answers NOT_OBSERVING instead of failing (which would stop the caller's other records).
# step, requests, tokens, ids, ids' bytes, flags
STEP = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
SIGNATURES = {
    "gpuobs_record_step": STEP,
    "gpuobs_record_step_flops": [*STEP, ctypes.c_uint64],  # and the engine's FLOP estimate
    "gpuobs_set_label": [ctypes.c_char_p],
    "gpuobs_note_profiler": [ctypes.c_char_p],
    "gpuobs_record_op": [ctypes.c_char_p, ctypes.c_uint32],
    "gpuobs_set_identity": [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p],
    "gpuobs_record_capture": [ctypes.c_uint64],
    "gpuobs_take_ops_window": [],
    "gpuobs_launch_trace_window": [ctypes.c_int],
}
REQUIRED = ("gpuobs_record_step", "gpuobs_set_label")


class InjectorAnnotations:
    """Finds the injector already loaded by CUDA (never loads a second copy: RTLD_NOLOAD)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._functions: dict[str, Callable[..., int]] | None = None  # restype c_int: calls answer an int
        self.missing: tuple[str, ...] = ()  # functions the loaded injector lacks: their calls answer NOT_OBSERVING

    def available(self) -> bool:
        """True once CUDA has loaded the injector in this process (it does at the first CUDA call)."""
        if self._functions is None:
            try:
                library = ctypes.CDLL(self.path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            except OSError:
                return False
            functions = {}
            for name, argtypes in SIGNATURES.items():
                function = getattr(library, name) if name in REQUIRED else getattr(library, name, None)
                if function is not None:
                    function.argtypes, function.restype = argtypes, ctypes.c_int
                    functions[name] = function
            self._functions = functions
            self.missing = tuple(name for name in SIGNATURES if name not in functions)
            if self.missing:  # said once: an injector older than this plugin (or one that hides them)
                log.warning(
                    "gpuobs: the injector %s lacks %s; what they record is not recorded",
                    self.path,
                    ", ".join(self.missing),
                )
        return True

    def _call(self, name: str, *args: object) -> int:
        assert self._functions is not None
        function = self._functions.get(name)
        return int(function(*args)) if function is not None else NOT_OBSERVING

    def record_step(self, step: int, requests: int, tokens: int, ids: bytes | None, flags: int, flops: int = 0) -> int:
        """`flops`: the engine's estimate for the step (0: none); an injector older than
        gpuobs_record_step_flops records the step without it."""
        if flops and self._functions is not None and "gpuobs_record_step_flops" in self._functions:
            return self._call("gpuobs_record_step_flops", step, requests, tokens, ids, len(ids or b""), flags, flops)
        return self._call("gpuobs_record_step", step, requests, tokens, ids, len(ids or b""), flags)

    def set_label(self, label: str) -> int:
        return self._call("gpuobs_set_label", label.encode("utf-8", "replace")[:63])

    def note_profiler(self, who: str) -> int:
        return self._call("gpuobs_note_profiler", who.encode("utf-8", "replace")[:63])

    def record_op(self, label: str) -> int:
        """An op about to launch its kernels on this thread; an empty label: the op is over."""
        if self._functions is None and not self.available():
            return NOT_OBSERVING
        data = label.encode("utf-8", "replace")
        return self._call("gpuobs_record_op", data, len(data))

    def record_capture(self, stream: int) -> int:
        """After an op ran on `stream` while it captures a graph: the graph nodes the op added
        take its label (2 when the stream is not capturing)."""
        return self._call("gpuobs_record_capture", stream)

    def take_ops_window(self) -> int:
        """The steps of an op window the daemon asked for since the last call (once; 0: none)."""
        return self._call("gpuobs_take_ops_window")

    def launch_trace_window(self, on: bool) -> int:
        """The launch trace on for an op window's steps, off after them."""
        return self._call("gpuobs_launch_trace_window", 1 if on else 0)

    def set_identity(self, role: int, rank: int, world_size: int, local_rank: int, model: str) -> int:
        """Who this process is (segment fields that views and metrics select by)."""
        return self._call(
            "gpuobs_set_identity", role, rank, world_size, local_rank, model.encode("utf-8", "replace")[:63]
        )
