"""Kernels (ListKernels, the per-kernel metrics) and the PCs of their memory events (ListHotPcs):
rows read from the segment's tables and the analyses a chunk at a time, the drain given its turn
between chunks."""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from gpuobs import _native
from gpuobs.segment import (
    EVENT_KINDS,
    KERNEL_ACCESS_HOOKS_CHOSEN,
    KERNEL_COUNTERS_DTYPE,
    MODE_NAMES,
    MODES,
    PATCH_SETS,
    SAMPLED_MODES,
    field_names,
)

from . import results
from .kernel_labels import kernel_id
from .paging import HOT_PC_TOKEN, KERNEL_TOKEN, process_order, walk_pages
from .registry import ObservedProcess, Registry
from .service_targets import Targets, check_top_or_page

BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
BLOCK_CAPTURES = {value: name for name, value in _native.BLOCK_CAPTURES.items()}
DEFAULT_KERNEL_PAGE = 5_000  # ~1.3 MB of reply
MAX_KERNEL_PAGE = 20_000  # building a reply is one call that holds the GIL: ~30 ms at this size
DEFAULT_HOT_PC_PAGE = 5_000
MAX_HOT_PC_PAGE = 20_000
ROWS_PER_CHUNK = 256  # ~5 ms of work between pauses (Registry.yield_to_drain)

# The fields of a kernel's row that are its device counters of the same name (layout.h's
# KernelCounters): copied by name, so a counter added to the table and to results.Kernel (and its
# message) needs no line here.
KERNEL_COUNTER_FIELDS: tuple[str, ...] = tuple(
    field.name for field in dataclasses.fields(results.Kernel) if field.name in field_names(KERNEL_COUNTERS_DTYPE)
)


def launch_shapes(entry: tuple | None) -> tuple[list[results.LaunchShape], int]:
    """One kernel's launch shapes as the device's launch census counted them, most launched
    first, and the launches no shape could be told for."""
    if entry is None:
        return [], 0
    shapes, other = entry
    ordered = sorted(shapes, key=lambda shape: -shape[2])
    return [results.LaunchShape(list(grid), list(block), count) for grid, block, count in ordered], other


def slot_runs(slots: list[int], most: int) -> Iterator[list[int]]:
    """Ascending slots in runs of at most `most` that each span at most 2 x `most` slots: the
    ranges a run's tables are read over stay small when the slots are far apart (a top-N)."""
    run: list[int] = []
    for slot in slots:
        if run and (len(run) >= most or slot - run[0] >= 2 * most):
            yield run
            run = []
        run.append(slot)
    if run:
        yield run


def kernel_records(mode: int, shift: int, access_hooks: bool) -> str:
    """What a mode records of a kernel, by the patches' own decision (block_capture): counts,
    every block or 1 in 2^shift, every access or 1 in 2^shift ("-": a mode that counts no block)."""
    if mode < MODES["counter"]:
        return "-"
    capture = BLOCK_CAPTURES[_native.block_capture(mode, shift, True, access_hooks)]
    sample = f" 1/2^{shift}" if MODE_NAMES.get(mode) in SAMPLED_MODES else ""
    if capture == "launches":
        return "accesses" + sample
    return {"none": "counts", "sampled": f"blocks 1/2^{shift}", "every": "blocks"}[capture]


class KernelQueries:
    def __init__(self, registry: Registry, targets: Targets, cubin_dir: str | None) -> None:
        self.registry = registry
        self.targets = targets
        self.cubin_dir = cubin_dir  # None: each producer's own, as its segment names it

    def kernels(
        self, pids: list[int], top: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Kernel]:
        """The `top` kernels by launches; or, with top 0, every kernel a page at a time in (pid,
        slot) order, which new kernels only extend: following next_page_token visits each once."""
        check_top_or_page(top, page_size, page_token, MAX_KERNEL_PAGE, "kernel")
        targets = sorted(self.targets.processes(pids, live_only=False), key=process_order)
        if top:
            return results.Page(self._top_kernels(targets, top))
        size = page_size or DEFAULT_KERNEL_PAGE

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            first = at[0] if at else 0
            count = process.segment.kernel_count()
            stop = min(count, first + size - len(rows))
            rows.extend(self._kernel_rows(process, list(range(first, stop))))
            return (stop,) if stop < count else None

        return results.Page(
            *walk_pages(
                KERNEL_TOKEN,
                targets,
                page_token,
                take,
                lambda rows: len(rows) >= size,
                lambda process: process.segment.kernel_count() > 0,
            )
        )

    def kernel_counters(self) -> list[tuple[ObservedProcess, np.ndarray | None]]:
        """Per process, its per-kernel counters as one array (row = slot): what the metrics
        export, read without a lock and summed by the caller in numpy, so a scrape costs a copy
        of the counters and O(series) Python, not a Python step per kernel. None for a process
        whose producer kept publishing through every try (the caller keeps its last copy)."""
        out: list[tuple[ObservedProcess, np.ndarray | None]] = []
        for process in sorted(self.targets.processes([], live_only=False), key=process_order):
            began = time.perf_counter()
            snapshot = process.segment.counters(0, process.segment.kernel_count())
            out.append((process, snapshot[1] if snapshot is not None else None))
            self.registry.yield_to_drain(time.perf_counter() - began)
        return out

    @staticmethod
    def block_duration_histograms(process: ObservedProcess) -> dict[int, tuple[np.ndarray, int]]:
        """Per kernel slot with block durations (exits hooked): its log2 histogram of durations
        in ns (block_pairing.BUCKETS_PER_OCTAVE buckets an octave) and their sum, copied under
        the process's lock."""
        with process.lock:
            return {
                slot: (durations.histogram.copy(), durations.total_ns)
                for slot, durations in process.analyses.block_pairing.durations.items()
                if durations.count
            }

    @staticmethod
    def kernel_names(process: ObservedProcess, first_slot: int, count: int) -> list[tuple[str, str]]:
        """(mangled, demangled) names of slots first_slot.. (fewer when not all are published yet)."""
        return [(entry["mangled"], entry["demangled"]) for entry in process.segment.kernels(first_slot, count)]

    def _top_kernels(self, targets: list[ObservedProcess], top: int) -> list[results.Kernel]:
        """Each process's `top` by launches, chosen in place in its segment (no copy of every
        kernel's counters), then the rows of those alone: the cost follows what is returned."""
        candidates: list[tuple[int, int, int, ObservedProcess]] = []
        for process in targets:
            chosen = process.segment.reader.top_kernels("launches", top)
            candidates.extend((launches, process.pid, slot, process) for slot, launches in chosen)
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        by_process: dict[int, tuple[ObservedProcess, list[int]]] = {}
        for _, _, slot, process in candidates[:top]:
            by_process.setdefault(id(process), (process, []))[1].append(slot)
        rows = [row for process, slots in by_process.values() for row in self._kernel_rows(process, sorted(slots))]
        rows.sort(key=lambda r: (-r.launches, r.pid, r.slot))
        return rows

    def _kernel_rows(self, process: ObservedProcess, slots: list[int]) -> list[results.Kernel]:
        """Rows of those slots (ascending). Each chunk reads only its own range of the segment's
        tables, and the analysis under the process's lock, then pauses (Registry.yield_to_drain):
        the drain takes the same lock per batch, and wants the GIL this thread holds."""
        rows: list[results.Kernel] = []
        with process.lock:
            graph_launches = process.analyses.graph_join.report().executions_per_kernel
        control = process.segment.control_state()
        memory_set = control["applied_patch_set"] == PATCH_SETS["memory"]
        for chunk in slot_runs(slots, ROWS_PER_CHUNK):
            began = time.perf_counter()
            low, span = chunk[0], chunk[-1] - chunk[0] + 1
            snapshot = process.segment.counters(low, span)
            if snapshot is None:  # the producer kept publishing: this chunk's rows are left out
                continue
            counters = snapshot[1]
            aggregates = process.segment.aggregates(low, span)
            found = process.segment.reader.launch_shapes(low, span)  # a dict by slot, or None: no table
            shapes = found if isinstance(found, dict) else {}
            entries = [e for e in process.segment.kernels_at(chunk) if e["slot"] - low < len(counters)]
            block_events = [
                int(aggregates[e["slot"] - low, BLOCK_ENTER] + aggregates[e["slot"] - low, BLOCK_EXIT]) for e in entries
            ]
            with process.lock:
                durations = process.analyses.block_pairing.block_durations([e["slot"] for e in entries], block_events)
            for entry, block_durations in zip(entries, durations):
                slot = entry["slot"]
                row = counters[slot - low]
                kernel_shapes, other_shapes = launch_shapes(shapes.get(slot))
                access_hooks = memory_set or bool(entry["flags"] & KERNEL_ACCESS_HOOKS_CHOSEN)
                rows.append(
                    results.Kernel(
                        pid=process.pid,
                        slot=slot,
                        name=entry["demangled"],
                        mangled=entry["mangled"],
                        kernel_id=kernel_id(entry["mangled"], entry["demangled"]),
                        **{name: int(row[name]) for name in KERNEL_COUNTER_FIELDS},
                        events_delivered=int(aggregates[slot - low].sum()),
                        shapes=kernel_shapes,
                        other_shape_launches=other_shapes,
                        block_durations=block_durations,
                        graph_launches=graph_launches.get(slot, 0),
                        function_pc=int(entry.get("function_pc", 0)),
                        cubin=self.cubin_path(process, entry),
                        access_hooks=access_hooks,
                        records=kernel_records(control["applied_mode"], control["applied_shift"], access_hooks),
                        blocks_in_flight=max(
                            0, int(row["blocks_observed"]) + int(row["blocks_unobserved"]) - int(row["blocks_exited"])
                        )
                        if int(row["blocks_exited"])
                        else 0,
                    )
                )
            self.registry.yield_to_drain(time.perf_counter() - began)
        return rows

    def cubin_path(self, process: ObservedProcess, entry: dict) -> str:
        """The kept cubin of a kernel's module, when the file is there and the producer's own: in
        the directory its segment names (or --cubin-dir), a regular file, not a link, owned by the
        producer's user or root (anything else another user may have put there)."""
        directory = self.cubin_dir or process.segment.header.get("cubin_dir", "")
        if not entry.get("cubin_hash") or not directory:
            return ""
        path = Path(directory) / f"{int(entry['cubin_hash']):016x}.cubin"
        try:
            info = os.lstat(path)
        except OSError:
            return ""
        trusted = stat.S_ISREG(info.st_mode) and info.st_uid in (process.segment.owner_uid, 0)
        return str(path) if trusted else ""

    def hot_pcs(self, pids: list[int], top: int, page_size: int = 0, page_token: str = "") -> results.HotPcs:
        """The `top` PCs by memory events in one reply; or, with top 0, every PC counted a page
        at a time in (pid, first seen) order, which new PCs only extend."""
        check_top_or_page(top, page_size, page_token, MAX_HOT_PC_PAGE, "PC")
        targets = self.targets.processes(pids, live_only=False)
        counted = skipped = 0
        for process in targets:
            with process.lock:
                totals = process.analyses.hot_pcs.report()
            counted, skipped = counted + totals.counted, skipped + totals.skipped
        if top:
            rows = []
            for process in targets:
                with process.lock:
                    rows.extend(self._hot_pc_rows(process, process.analyses.hot_pcs.top(top)))
            rows.sort(key=lambda r: -r.events)
            return results.HotPcs(rows[:top], counted, skipped)
        size = page_size or DEFAULT_HOT_PC_PAGE

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            first = at[0] if at else 0
            with process.lock:
                found = process.analyses.hot_pcs.seen(first, size - len(rows))
                rows.extend(self._hot_pc_rows(process, found))
                return (first + len(found),) if first + len(found) < process.analyses.hot_pcs.distinct else None

        rows, token = walk_pages(
            HOT_PC_TOKEN,
            targets,
            page_token,
            take,
            lambda rows: len(rows) >= size,
            lambda process: process.analyses.hot_pcs.distinct > 0,
        )
        return results.HotPcs(rows, counted, skipped, token)

    def _hot_pc_rows(self, process: ObservedProcess, found: list[tuple[int, int, int]]) -> list[results.HotPc]:
        """Rows of (slot, pc, events), with the kernel each pc is in (only those kernels are read)."""
        entries = {k["slot"]: k for k in process.segment.kernels_at(sorted({slot for slot, _, _ in found}))}
        rows = []
        for slot, pc, events in found:
            entry = entries.get(slot, {})
            rows.append(
                results.HotPc(
                    pid=process.pid,
                    slot=slot,
                    kernel=entry.get("demangled", f"slot {slot}"),
                    mangled=entry.get("mangled", ""),
                    pc=pc,
                    events=events,
                    function_pc=int(entry.get("function_pc", 0)),
                    cubin=self.cubin_path(process, entry),
                )
            )
        return rows
