"""The observed processes as status shows them (GetStatus, ListProcesses, the per-process
metrics), and how far behind the drain is."""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

from gpuobs import __version__
from gpuobs.segment import CONTROL_STATUS, MODE_NAMES, PATCH_SETS

from . import results
from .identity import identity_of
from .registry import ObservedProcess, Registry

STATUS_NAMES = {value: name for name, value in CONTROL_STATUS.items()}
PATCH_SET_NAMES = {value: name for name, value in PATCH_SETS.items()}
MAX_REJECTED_SHOWN = 32  # rejected segments named in a status reply (all are counted)


# The global counter (layout.h's GlobalCounters) behind each field of results.InjectorStats: the
# counter of the same name, or `<name>_ns` for a field `<name>_seconds`. Taken by name, so a counter
# added to the table and to InjectorStats (and its message) needs no line here; a test checks that
# each is a field of the table.
INJECTOR_COUNTERS: dict[str, str] = {
    field.name: f"{field.name.removesuffix('_seconds')}_ns" if field.name.endswith("_seconds") else field.name
    for field in dataclasses.fields(results.InjectorStats)
}


def injector_stats(counters: dict[str, int]) -> results.InjectorStats:
    """The injector's own work from its global counters: exact counts, and callback time in seconds."""
    # values of two types (counts, seconds), which one dict typed for the dataclass cannot tell apart
    values: dict[str, Any] = {
        field: counters.get(counter, 0) / 1e9 if field.endswith("_seconds") else counters.get(counter, 0)
        for field, counter in INJECTOR_COUNTERS.items()
    }
    return results.InjectorStats(**values)


class ProcessViews:
    """Each process's view (mode in force, counters, identity, rings), and the daemon's status."""

    def __init__(self, registry: Registry, segment_dir: str) -> None:
        self.registry = registry
        self.segment_dir = segment_dir
        self.started = time.monotonic()

    def process_view(self, process: ObservedProcess) -> results.Process:
        """Without the process's lock: the native reader is safe from any thread, and what comes
        from the analysis is whole values the drain replaces (the last accounting, counters), so
        status never waits for a batch's analysis."""
        segment = process.segment
        control = segment.control_state()
        counters = segment.global_counters() or {}
        account = process.last_accounting  # checked once at attach, then every ACCOUNTING_CHECK_S
        fill = 0.0
        for ring in range(segment.event_rings):
            stats = segment.reader.event_ring_stats(ring)
            backlog = max(0, stats["head"] - stats["tail"])
            fill = max(fill, min(1.0, backlog / stats["capacity"]))
        header = segment.reader.header()  # live: a plugin may name the process later
        return results.Process(
            pid=process.pid,
            producer=segment.header["producer"],
            label=header["label"],
            segment=str(process.path),
            alive=process.alive,
            mode=MODE_NAMES.get(control["applied_mode"], "unknown"),
            shift=control["applied_shift"],
            patch_set=PATCH_SET_NAMES.get(control["applied_patch_set"], "unknown"),
            kernel_filter=control["applied_filter"],
            generation=control["applied_generation"],
            control_status=STATUS_NAMES.get(control["status"], "unknown"),
            control_message=control["status_message"],
            launches=counters.get("launches", 0),
            kernels=segment.reader.kernel_count(),
            stages=list(account.stages if account else ()),
            ring_fill_ratio=fill,
            accounting_errors=process.accounting_errors,
            injector=injector_stats(counters),
            engine_steps=process.analyses.steps.report().steps,
            memory_kernels=header.get("memory_kernels", ""),
            block_events_unanalysed=process.analyses.block_pairing.unanalysed_total(segment.aggregates()),
            **identity_of(header),
        )

    def processes(self) -> list[results.Process]:
        # a copy: the metrics thread reads while the drain loop may add or drop processes
        return [self.process_view(p) for p in list(self.registry.processes.values())]

    def status(self) -> results.Status:
        return results.Status(
            version=__version__,
            segment_dir=self.segment_dir,
            uptime_ms=int((time.monotonic() - self.started) * 1000),
            processes=self.processes(),
            # a local user can fill the directory with junk: the reply names a few, counts all
            rejected_segments=[
                f"{str(path)[:256]}: {reason[:256]}"
                for path, reason in itertools.islice(dict(self.registry.rejected).items(), MAX_REJECTED_SHOWN)
            ],
            rejected_segments_total=self.registry.unattached,
            rejected_segments_forgotten=self.registry.rejected_forgotten,
        )

    def drain_age_seconds(self) -> float:
        """Time since the drain's last pass (what the watchdog and the drain-lag metric watch)."""
        return max(0.0, self.registry.clock() - self.registry.last_pass_at)
