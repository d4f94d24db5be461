"""Scratch folders of the benchmarks, gone whatever ends the run: a benchmark killed with SIGTERM
or SIGHUP (a time limit, a closed terminal) unwinds as on Ctrl-C, so its `with` blocks remove its
folders and its `finally` blocks stop the producers and daemons it started. Named gpuobs-bench-*
so that a leftover says whose it is."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path


def unwind_on_signals() -> None:
    """SIGTERM and SIGHUP raise SystemExit in the main thread, as SIGINT raises KeyboardInterrupt."""

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, leave)


@contextlib.contextmanager
def scratch_folder(name: str, shm: bool = True) -> Iterator[Path]:
    """gpuobs-bench-<name>-XXXX, on the tmpfs when `shm` (segments must be there for CUDA; the
    benchmarks' producers write tens of MB each), removed at the end."""
    place = "/dev/shm" if shm and os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix=f"gpuobs-bench-{name}-", dir=place) as folder:
        yield Path(folder)
