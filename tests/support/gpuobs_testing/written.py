"""The daemon's drain and queries in this process, over a segment this process writes with the
injector's own writer code (gpuobs._native.Writer): no daemon or synth subprocess, so a test can
place every record itself and step the drain one pass at a time."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np
from gpuobs import _native
from gpuobs.daemon.registry import ObservedProcess, Registry
from gpuobs.daemon.service import ObserverService


class Capacities(TypedDict, total=False):
    """The segment's sizes a test may choose (the writer's defaults otherwise)."""

    event_rings: int
    event_ring_records: int
    launch_ring_records: int
    kernel_slots: int
    name_arena_bytes: int


class WrittenProcess:
    """One segment written here, and a Registry and ObserverService over its directory, with
    an unlimited analysis budget (tests judge the analysis, not the budget)."""

    def __init__(self, directory: Path, *, kernels: int = 4, **capacities: Unpack[Capacities]) -> None:
        self.writer = _native.Writer(str(directory), **capacities)
        for slot in range(kernels):
            self.writer.register_kernel(f"_Z8kernel_{slot}v")
        self.registry = Registry(directory, owners=[os.getuid()], torn_timeout_s=1.0, analysis_share=1.0)
        self.service = ObserverService(self.registry, str(directory))
        self.drain()

    def put_events(self, records: np.ndarray, ring: int = 0) -> None:
        assert self.writer.put_events(ring, records) == len(records), "the event ring is full"

    def put_launches(self, records: np.ndarray) -> None:
        for index in range(len(records)):
            assert self.writer.write_launch(records[index : index + 1]), "the launch ring is full"

    def drain(self) -> None:
        """Discovery and drain passes until nothing more is read, the accounting checked at
        each (the daemon checks it at most every ACCOUNTING_CHECK_S)."""
        self.writer.publish()
        self.registry.discover()
        while True:
            for process in self.registry.processes.values():
                process.last_check = float("-inf")
            if not self.registry.drain_pass():
                return

    @property
    def process(self) -> ObservedProcess:
        (process,) = self.registry.processes.values()
        return process

    def close(self) -> None:
        self.service.close()


def device_now_ns(seconds_ago: float = 0.0) -> int:
    """A %globaltimer value (ns since the epoch) that many seconds ago."""
    return time.time_ns() - int(seconds_ago * 1e9)
