"""The functions the injector exports to the program it observes (engine steps, the process's
label, a profiler's start), reached through ctypes from the vLLM plugin and gpuobs.profiler_notice."""

from __future__ import annotations

import ctypes
import os

RECORDED, DROPPED, NOT_OBSERVING = 0, 1, -1


class InjectorAnnotations:
    """Finds the injector already loaded by CUDA (never loads a second copy: RTLD_NOLOAD)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._library: ctypes.CDLL | None = None

    def available(self) -> bool:
        """True once CUDA has loaded the injector in this process (it does at the first CUDA call)."""
        if self._library is None:
            try:
                library = ctypes.CDLL(self.path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            except OSError:
                return False
            library.gpuobs_record_step.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                                   ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
            library.gpuobs_record_step.restype = ctypes.c_int
            library.gpuobs_set_label.argtypes = [ctypes.c_char_p]
            library.gpuobs_set_label.restype = ctypes.c_int
            notice = getattr(library, "gpuobs_note_profiler", None)  # an older injector has none
            if notice is not None:
                notice.argtypes = [ctypes.c_char_p]
                notice.restype = ctypes.c_int
            self._library = library
        return True

    def record_step(self, step: int, requests: int, tokens: int, ids: bytes | None, flags: int) -> int:
        assert self._library is not None
        return int(self._library.gpuobs_record_step(step, requests, tokens, ids, len(ids or b""), flags))

    def set_label(self, label: str) -> int:
        assert self._library is not None
        return int(self._library.gpuobs_set_label(label.encode("utf-8", "replace")[:63]))

    def note_profiler(self, who: str) -> int:
        assert self._library is not None
        notice = getattr(self._library, "gpuobs_note_profiler", None)
        return int(notice(who.encode("utf-8", "replace")[:63])) if notice is not None else NOT_OBSERVING

    def record_op(self, label: str) -> int:
        """An op about to launch its kernels on this thread; an empty label: the op is over (an
        older injector has no such record)."""
        if self._library is None and not self.available():
            return NOT_OBSERVING
        record = getattr(self._library, "gpuobs_record_op", None)
        if record is None:
            return NOT_OBSERVING
        data = label.encode("utf-8", "replace")
        return int(record(ctypes.c_char_p(data), ctypes.c_uint32(len(data))))

    def set_identity(self, role: int, rank: int, world_size: int, local_rank: int, model: str) -> int:
        """Who this process is (segment fields that views and metrics select by); an older
        injector has no such fields."""
        assert self._library is not None
        identify = getattr(self._library, "gpuobs_set_identity", None)
        if identify is None:
            return NOT_OBSERVING
        return int(identify(ctypes.c_uint32(role), ctypes.c_uint32(rank), ctypes.c_uint32(world_size),
                            ctypes.c_uint32(local_rank), ctypes.c_char_p(model.encode("utf-8", "replace")[:63])))
