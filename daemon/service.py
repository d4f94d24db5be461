"""What gpuobsd answers, apart from how (gRPC, metrics): plain methods over the registry that
return typed results (daemon/results.py) and raise typed errors (daemon/errors.py). The
transport maps results to messages in one place (daemon/messages.py) and errors to status
codes, and reaches the registry only through these methods."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from gpuobs import __version__, _native
from gpuobs.op_labels import recording_prelude
from gpuobs.recording import RecordingWriter
from gpuobs.segment import (
    CONTROL_STATUS,
    EVENT_DTYPE,
    EVENT_KINDS,
    IDENTITY_SET,
    KERNEL_ACCESS_HOOKS_CHOSEN,
    KERNEL_COUNTERS_DTYPE,
    LAUNCH_DTYPE,
    MODE_NAMES,
    MODES,
    PATCH_SETS,
    PROCESS_ROLES,
    SAMPLED_MODES,
    TAKES_OP_WINDOWS,
)

from . import results
from .errors import Busy, InvalidArgument, NotFound, RecordFailed, quoted
from .graph_exec import DeviceTime, GraphExec
from .paging import (
    GRAPH_TOKEN,
    HANG_TOKEN,
    HOT_PC_TOKEN,
    KERNEL_TOKEN,
    STEP_TOKEN,
    page_token_of,
    parse_page_token,
    position_in,
    process_order,
    walk_pages,
)
from .recording_budget import RecordingAllowance, RecordingBudget
from .registry import ObservedProcess, Registry, Subscriber, SubscriberQueue, queue_subscriber
from .step_attribution import Step, StepAttribution

STATUS_NAMES = {value: name for name, value in CONTROL_STATUS.items()}
BLOCK_ENTER = EVENT_KINDS["block_enter"]
BLOCK_EXIT = EVENT_KINDS["block_exit"]
PATCH_SET_NAMES = {value: name for name, value in PATCH_SETS.items()}
ROLE_NAMES = {value: name for name, value in PROCESS_ROLES.items()}
BLOCK_CAPTURES = {value: name for name, value in _native.BLOCK_CAPTURES.items()}
MAX_PIDS = 4096
RECENT_OPS = 256  # labels of the last ops read that a recording begins with (an op open as it begins)
RECORD_CHUNK_BYTES = 1 << 20  # a streamed recording's chunk: under every client's default message limit
MAX_REJECTED_SHOWN = 32  # rejected segments named in a status reply (all are counted)
QUERY_THREADS = 4
MAX_TOP = 100_000
DEFAULT_KERNEL_PAGE = 5_000  # ~1.3 MB of reply
MAX_KERNEL_PAGE = 20_000  # building a reply is one call that holds the GIL: ~30 ms at this size
DEFAULT_HANG_PAGE = 64  # a launch lists up to 4,096 blocks: ~40 kB of reply at most
MAX_HANG_PAGE = 1024
DEFAULT_HOT_PC_PAGE = 5_000
MAX_HOT_PC_PAGE = 20_000
DEFAULT_GRAPH_PAGE = 32  # a 313-node graph with 16 replays in detail is ~30 kB of reply
MAX_GRAPH_PAGE = 512
GRAPH_PAGE_BYTES = 16 << 20  # and about this much of reply at most
STEPS_PAGE = 256  # steps per ListSteps reply (a step of 256 requests carries their ids)
ROWS_PER_CHUNK = 256  # ~5 ms of work between pauses (Registry.yield_to_drain)
MAX_PATH_BYTES = 4096  # PATH_MAX


def launch_shapes(entry: tuple | None) -> tuple[list[results.LaunchShape], int]:
    """One kernel's launch shapes as the device's launch census counted them, most launched
    first, and the launches no shape could be told for."""
    if entry is None:
        return [], 0
    shapes, other = entry
    ordered = sorted(shapes, key=lambda shape: -shape[2])
    return [results.LaunchShape(list(grid), list(block), count) for grid, block, count in ordered], other


@dataclasses.dataclass
class OpRow:
    """One (op label, kernel) row of a process as the ops reply gathers it."""

    launches: int = 0
    blocks: int = 0
    executions: int = 0
    nodes: int = 0
    device: DeviceTime = dataclasses.field(default_factory=DeviceTime)

    def result(self, pid: int, label: str, kernel: str, process_ns: int) -> results.OpKernel:
        """The row with its share of the process's device time (none when nothing of it was
        timed, or nothing of the process took time)."""
        device = self.device
        share = device.ns / process_ns if device.timed and process_ns else None
        return results.OpKernel(
            pid,
            label,
            kernel,
            self.launches,
            self.blocks,
            self.executions,
            self.nodes,
            device.ns,
            device.timed,
            device.partial,
            share,
        )


def check_top_or_page(top: int, page_size: int, page_token: str, max_page: int, row: str) -> None:
    """A list that answers either its `top` rows in one reply or every row a page at a time."""
    if not 0 <= top <= MAX_TOP:
        raise InvalidArgument(f"top must be within 0..{MAX_TOP}")
    if not 0 <= page_size <= max_page:
        raise InvalidArgument(f"page_size must be within 0..{max_page}")
    if top and page_token:
        raise InvalidArgument(f"a page_token pages through every {row} (top 0); it does not go with top")


def identity_of(header: dict) -> dict:
    """Who a process is, from its segment's header: the fields its plugin set, the GPUs of its
    contexts (a header names the first two; gpu_count counts them all)."""
    named = min(header.get("gpu_count", 0), len(header.get("gpus", [])))
    return {
        "identity_set": bool(header.get("identity_flags", 0) & IDENTITY_SET),
        "role": ROLE_NAMES.get(header.get("role", 0), "unknown"),
        "rank": header.get("rank", 0),
        "world_size": header.get("world_size", 0),
        "local_rank": header.get("local_rank", 0),
        "model": header.get("model", ""),
        "gpus": [results.Gpu(g["ordinal"], g["context"], g["pci_bus_id"], g["uuid"]) for g in header["gpus"][:named]],
        "gpu_count": header.get("gpu_count", 0),
    }


# The fields of a kernel's row that are its device counters of the same name (layout.h's
# KernelCounters): copied by name, so a counter added to the table and to results.Kernel (and its
# message) needs no line here.
KERNEL_COUNTER_FIELDS: tuple[str, ...] = tuple(
    field.name for field in dataclasses.fields(results.Kernel) if field.name in KERNEL_COUNTERS_DTYPE.names
)


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


def pci_address(text: str) -> tuple[int, int, int, int] | None:
    """domain:bus:device.function as numbers: CUDA writes 0000:3b:00.0, nvidia-smi 00000000:3B:00.0."""
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def matches_gpu(gpus: list[results.Gpu], wanted: str) -> bool:
    """A GPU named by its UUID or its PCI bus id, as nvidia-smi names it; not by an ordinal, which
    is each process's own (CUDA_VISIBLE_DEVICES renumbers them) and would select across GPUs."""
    address = pci_address(wanted)
    return any(
        wanted.lower() == g.uuid.lower() or (address is not None and address == pci_address(g.pci_bus_id)) for g in gpus
    )


def injector_stats(counters: dict[str, int]) -> results.InjectorStats:
    """The injector's own work from its global counters: exact counts, and callback time in seconds."""
    counts = {
        name: counters.get(name, 0)
        for name in (
            "modules_loaded",
            "modules_patched",
            "patch_failures",
            "cubins_kept",
            "cubins_skipped",
            "profiler_starts",
            "modules_access_hooked",
        )
    }
    seconds = {
        f"{name}_seconds": counters.get(f"{name}_ns", 0) / 1e9
        for name in ("resource_callback", "launch_callback", "graph_callback", "patch", "cubin")
    }
    return results.InjectorStats(**counts, **seconds)


class ObserverService:
    def __init__(
        self,
        registry: Registry,
        segment_dir: str,
        cubin_dir: str | None = None,
        recording_budget: RecordingBudget | None = None,
        spool_dir: Path | None = None,
    ) -> None:
        self.registry = registry
        self.segment_dir = segment_dir
        self.cubin_dir = cubin_dir  # None: each producer's own, as its segment names it
        self.recording_budget = recording_budget or RecordingBudget(1 << 30, 4 << 30)
        self.spool_dir = spool_dir  # where streamed recordings are written first (None: the system's temporary folder)
        self.started = time.monotonic()
        # Queries run here, not on the event loop: a long one (every kernel of a big process)
        # must not hold up a status call, nor the loop's turns that every RPC needs.
        self.executor = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="gpuobsd-query")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- reads -------------------------------------------------------------------------------
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

    def drain_stalled(self, threshold_s: float) -> bool:
        """The drain has not finished a pass for threshold_s (what the status line, the log and
        gpuobs_drain_stalled say; the daemon keeps answering)."""
        return self.drain_age_seconds() > threshold_s

    def drain_age_seconds(self) -> float:
        """Time since the drain's last pass (what the watchdog and the drain-lag metric watch)."""
        return max(0.0, self.registry.clock() - self.registry.last_pass_at)

    def processes(self) -> list[results.Process]:
        # a copy: the metrics thread reads while the drain loop may add or drop processes
        return [self.process_view(p) for p in list(self.registry.processes.values())]

    def kernels(
        self, pids: list[int], top: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Kernel]:
        """The `top` kernels by launches; or, with top 0, every kernel a page at a time in (pid,
        slot) order, which new kernels only extend: following next_page_token visits each once."""
        check_top_or_page(top, page_size, page_token, MAX_KERNEL_PAGE, "kernel")
        targets = sorted(self._targets(pids, live_only=False), key=process_order)
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
        for process in sorted(self._targets([], live_only=False), key=process_order):
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
    def kernel_names(process: ObservedProcess, first_slot: int, count: int) -> list[str]:
        """Demangled names of slots first_slot.. (fewer when not all are published yet)."""
        return [entry["demangled"] for entry in process.segment.kernels(first_slot, count)]

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
            shapes = process.segment.reader.launch_shapes(low, span) or {}
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

    def graphs(
        self, pids: list[int], replays: int = 16, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Graph]:
        """Graph execs a page at a time in (pid, first seen) order, which new execs only extend
        (whatever their handle). Each graph is read under its process's lock alone, then the
        drain gets its turn."""
        if not 0 <= replays <= 1024:
            raise InvalidArgument("replays must be within 0..1024")
        if not 0 <= page_size <= MAX_GRAPH_PAGE:
            raise InvalidArgument(f"page_size must be within 0..{MAX_GRAPH_PAGE}")
        size = page_size or DEFAULT_GRAPH_PAGE
        reply_bytes = [0]  # roughly: a page of big graphs with many replays stops short of `size`

        def full(rows: list) -> bool:
            return len(rows) >= size or reply_bytes[0] >= GRAPH_PAGE_BYTES

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            first = at[0] if at else 0
            with process.lock:
                instances = [i for i in list(process.analyses.graph_join.execs) if i >= first]  # first seen first
            for instance in instances:
                if full(rows):
                    return (instance,)
                began = time.perf_counter()
                with process.lock:
                    graph = process.analyses.graph_join.execs.get(instance)
                    if graph is not None:
                        rows.append(self._graph_row(process, graph, replays))
                        reply_bytes[0] += 64 * len(rows[-1].nodes) + sum(
                            48 + 6 * len(r.node_blocks) for r in rows[-1].recent_replays
                        )
                self.registry.yield_to_drain(time.perf_counter() - began)
            return None

        return results.Page(
            *walk_pages(
                GRAPH_TOKEN,
                self._targets(pids, live_only=False),
                page_token,
                take,
                full,
                lambda process: bool(process.analyses.graph_join.execs),
            )
        )

    def _graph_row(self, process: ObservedProcess, graph: GraphExec, replays: int) -> results.Graph:
        report = process.analyses.graph_join.exec_report(graph, replays)
        names = {
            k["slot"]: k["demangled"]
            for k in process.segment.kernels_at(sorted({n.slot for n in graph.nodes.values()}))
        }
        order = report["order"]
        position = {node: index for index, node in enumerate(order)}
        nodes = []
        for n in sorted(graph.nodes.values(), key=lambda n: position.get(n.node, len(order))):
            counts = report["per_node"][n.node]
            nodes.append(
                results.GraphNode(
                    node=n.node,
                    slot=n.slot,
                    name=names.get(n.slot, f"slot {n.slot}"),
                    grid=list(n.grid),
                    block=list(n.block),
                    executions=graph.executions_of(n),
                    blocks_per_execution=n.blocks_per_execution,
                    grid_ids=sorted(n.grid_ids),
                    position=position.get(n.node, len(order)),
                    executions_matched=counts["matched"],
                    executions_mismatched=counts["mismatched"],
                    executions_unrecorded=counts["unrecorded"],
                    blocks_observed=counts["blocks_observed"],
                    executions_unjoined=counts["unjoined"],
                    executions_sampled=counts["sampled"],
                )
            )
        recent = [results.Replay(**{**r, "mode": MODE_NAMES.get(r["mode"], "unknown")}) for r in report["replays"]]
        totals = report["totals"]
        return results.Graph(
            pid=process.pid,
            graph_exec=graph.graph_exec,
            instance=graph.instance,
            alive=graph.alive,
            replays=graph.replays,
            first_launch_id=graph.first_launch_id,
            last_launch_id=graph.last_launch_id,
            node_executions=graph.node_executions,
            replays_nodes_unknown=graph.replays_nodes_unknown,
            order_stable=report["order_stable"],
            device_order_stable=report["device_order_stable"],
            blocks_per_replay=sum(n.blocks_per_execution for n in nodes),
            nodes=nodes,
            executions_matched=totals["matched"],
            executions_mismatched=totals["mismatched"],
            executions_unrecorded=totals["unrecorded"],
            executions_unjoined=totals["unjoined"],
            events_unmatched=report["events_unmatched"],
            recent_replays=recent,
            executions_sampled=totals["sampled"],
        )

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
        targets = self._targets(pids, live_only=False)
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

    def ops(self, pids: list[int], top: int = 50) -> results.Ops:
        """Op labels and the kernels each launched (eager launches, and executions of the graph
        nodes captured under the op), the `top` rows with the most of both over the targeted
        processes, and every process's totals (ops seen, launches without an op)."""
        if not 0 < top <= MAX_TOP:
            raise InvalidArgument(f"top must be within 1..{MAX_TOP}")
        rows: list[results.OpKernel] = []
        totals: list[results.OpTotals] = []
        for process in sorted(self._targets(pids, live_only=False), key=process_order):
            with process.lock:
                ops = process.analyses.ops
                seen = ops.report()
                total = ops.eager_total()
                total += process.analyses.graph_join.device_total()
                totals.append(
                    results.OpTotals(
                        process.pid,
                        seen.ops,
                        seen.launches_attributed,
                        seen.launches_without_op,
                        seen.labels,
                        seen.launches_other,
                        seen.nodes_captured,
                        seen.nodes_without_op,
                        total.ns,
                        total.timed,
                        total.partial,
                        seen.timings_let_go,
                    )
                )
                held: dict[tuple[str, int], OpRow] = {}
                for label, kernels in ops.labels.items():
                    for slot, counts in kernels.items():
                        held[(label, slot)] = OpRow(
                            counts[0], counts[1], device=dataclasses.replace(ops.eager_time(label, slot))
                        )
                for label, slot, node in ops.graph_rows():
                    row = held.setdefault((label, slot), OpRow())
                    row.blocks += node.blocks
                    row.executions += node.executions
                    row.nodes += node.nodes
                    row.device += node.device
            names = {k["slot"]: k["demangled"] for k in process.segment.kernels_at(sorted({s for _, s in held}))}
            rows.extend(
                row.result(process.pid, label, names.get(slot, f"slot {slot}"), total.ns)
                for (label, slot), row in held.items()
            )
        rows.sort(key=lambda row: (-(row.launches + row.node_executions), row.pid, row.op, row.kernel))
        return results.Ops(rows[:top], totals)

    def steps(self, pids: list[int], last: int = 20, replay: int | None = None, page_token: str = "") -> results.Steps:
        """The last engine steps of each process (or the one that launched `replay`), with the
        replays they launched and what the graph join joined to those; STEPS_PAGE at most per
        reply, the rest behind next_page_token (which fixes each process's newest step at the
        page where its steps begin, so a busy engine does not make the walk endless)."""
        if not 0 < last <= StepAttribution.KEEP_STEPS:
            raise InvalidArgument(f"last must be within 1..{StepAttribution.KEEP_STEPS}")
        resume = parse_page_token(page_token, STEP_TOKEN)
        rows: list[results.Step] = []
        totals: list[results.StepTotals] = []
        token = ""
        for process in sorted(self._targets(pids, live_only=False), key=process_order):
            with process.lock:
                steps = process.analyses.steps
                seen = steps.report()
                totals.append(results.StepTotals(process.pid, seen.steps, seen.launches_before_steps))
                at = position_in(process, resume)
                if token or at is None:
                    continue
                keys = list(steps.steps)
                if replay is not None:
                    found = steps.step_of_replay(replay)
                    keys = [k for k, s in steps.steps.items() if s is found] if found else []
                elif at:
                    keys = [k for k in keys if at[0] <= k <= at[1]]
                else:
                    keys = keys[-last:]
                room = STEPS_PAGE - len(rows)
                if len(keys) > room:
                    token = page_token_of(STEP_TOKEN, process, keys[room], keys[-1])
                    keys = keys[:room]
                label = process.segment.reader.header()["label"]
                for key in keys:
                    rows.append(self._step_row(process, steps.steps[key], label))
        if replay is not None and not rows:
            raise NotFound(f"no step of the targeted processes launched replay {replay} (or it is no longer kept)")
        return results.Steps(rows, totals, token)

    @staticmethod
    def _step_row(process: ObservedProcess, step: Step, label: str) -> results.Step:
        replays = []
        for graph_exec, number, instance in step.replays:
            summary = process.analyses.graph_join.replay_summary(instance, number) or {}
            if "mode" in summary:
                summary["mode"] = MODE_NAMES.get(summary["mode"], "unknown")
            replays.append(results.StepReplay(graph_exec=graph_exec, replay=number, **summary))
        timed = [r for r in replays if r.device_start_ns]
        span = max(r.device_end_ns for r in timed) - min(r.device_start_ns for r in timed) if timed else 0
        return results.Step(
            pid=process.pid,
            label=label,
            step=step.step,
            host_time_ns=step.host_time_ns,
            thread=step.thread,
            requests=step.requests,
            tokens=step.tokens,
            request_ids=step.request_ids,
            request_ids_complete=step.ids_complete,
            kernel_launches=step.kernel_launches,
            blocks_expected=step.blocks_expected,
            replays=replays,
            device_span_ns=span,
        )

    def hangs(
        self, pids: list[int], min_age_ms: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.HungLaunch]:
        """Launches with blocks in flight at least min_age_ms, a page at a time in (pid, grid id,
        replay) order. A launch whose blocks exit between two pages is simply not on the later
        one; grid ids grow, so a new launch comes after the token."""
        if not 0 <= min_age_ms <= 86_400_000:
            raise InvalidArgument("min_age_ms must be within 0..86400000")
        if not 0 <= page_size <= MAX_HANG_PAGE:
            raise InvalidArgument(f"page_size must be within 0..{MAX_HANG_PAGE}")
        size = page_size or DEFAULT_HANG_PAGE
        now_ns = time.time_ns()

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            after = (at[0], at[1]) if at else (0, 0)
            with process.lock:
                room = size - len(rows)
                launches = process.analyses.block_pairing.in_flight(
                    now_ns, min_age_ms * 1_000_000, after=after, limit=room + 1
                )
                if not launches:
                    return None
                rows.extend(self._hung_rows(process, launches[:room]))
            return (launches[room]["grid_id"], launches[room]["replay"]) if len(launches) > room else None

        return results.Page(
            *walk_pages(
                HANG_TOKEN,
                self._targets(pids, live_only=False),
                page_token,
                take,
                lambda rows: len(rows) >= size,
                lambda process: process.analyses.block_pairing.report().blocks > 0,
            )
        )

    @staticmethod
    def _hung_rows(process: ObservedProcess, launches: list[dict]) -> list[results.HungLaunch]:
        names = {
            k["slot"]: k["demangled"]
            for k in process.segment.kernels_at(sorted({launch["slot"] for launch in launches}))
        }
        dropped = process.events_dropped_per_kernel()
        rows = []
        for launch in launches:
            slot = launch["slot"]
            graph_exec = process.analyses.graph_join.graph_exec_of(launch["grid_id"])
            rows.append(
                results.HungLaunch(
                    pid=process.pid,
                    kernel=names.get(slot, f"slot {slot}"),
                    slot=slot,
                    grid_id=launch["grid_id"],
                    graph_exec=graph_exec,
                    replay=launch["replay"] if graph_exec else 0,
                    blocks=[results.BlockIndex(x, y, z) for x, y, z in launch["blocks"]],
                    sms=launch["sms"],
                    oldest_enter_ns=launch["oldest_enter_ns"],
                    age_ns=launch["age_ns"],
                    kernel_events_dropped=int(dropped[slot]) if dropped is not None and slot < len(dropped) else 0,
                    block_count=launch["block_count"],
                )
            )
        return rows

    def hang_evidence(self, pids: list[int], min_age_ms: int = 0) -> list[results.HangEvidence]:
        """Per process: can it show blocks in flight, how many (by the counts where the producer
        counts exits), the longest a kernel in flight went without an exit, which kernels did so
        for min_age_ms, and how many block events the pairing did not look at."""
        now, now_ns = self.registry.clock(), time.time_ns()
        out = []
        for process in self._targets(pids, live_only=False):
            with process.lock:
                in_flight = process.analyses.block_pairing.report()
                unanalysed = process.analyses.block_pairing.unanalysed_total(process.segment.aggregates())
                stalls = process.stalls
                stalled = stalls.stalled(now, min_age_ms / 1000.0) if stalls.counted else []
                counted, counted_blocks, since = stalls.counted, stalls.blocks_in_flight(), stalls.oldest_since()
            if counted:
                blocks, age = counted_blocks, int((now - since) * 1e9) if since is not None else 0
            else:
                blocks = in_flight.blocks
                age = max(0, now_ns - in_flight.oldest_enter_ns) if in_flight.blocks else 0
            names = {k["slot"]: k["demangled"] for k in process.segment.kernels_at(sorted({s.slot for s in stalled}))}
            out.append(
                results.HangEvidence(
                    process.pid,
                    in_flight.exits_hooked,
                    blocks,
                    age,
                    process.alive,
                    counted,
                    unanalysed,
                    [
                        results.StalledKernel(
                            s.slot, names.get(s.slot, f"slot {s.slot}"), s.blocks_in_flight, int((now - s.since) * 1e9)
                        )
                        for s in stalled
                    ],
                )
            )
        return out

    # -- streams -----------------------------------------------------------------------------
    def open_stream(
        self, pids: list[int], queue_batches: int, *, read_only: bool
    ) -> tuple[Subscriber, SubscriberQueue]:
        """A live feed of those processes' event batches (all, when empty), through a queue of
        at most queue_batches batches; Busy when as many streams run as the daemon takes.
        Called on the event loop, whose coroutines take the batches."""
        self._targets(pids, live_only=False)  # NotFound for an unknown pid
        subscriber, queue = queue_subscriber(frozenset(pids), queue_batches)
        subscriber.read_only = read_only
        self.registry.add_subscriber(subscriber)
        return subscriber, queue

    def close_stream(self, subscriber: Subscriber) -> None:
        self.registry.remove_subscriber(subscriber)

    def stream_events_dropped(self) -> int:
        """Events that streams and recordings running now could not keep up with."""
        return sum(s.dropped for s in tuple(self.registry.subscribers))

    # -- control -----------------------------------------------------------------------------
    async def set_mode(
        self,
        mode: str,
        shift: int | None,
        pids: list[int],
        kernel_regex: str | None,
        timeout_s: float,
        *,
        ranks: list[int] | None = None,
        gpus: list[str] | None = None,
    ) -> list[results.ModeResult]:
        if mode not in MODES:
            raise InvalidArgument(f"unknown mode {quoted(mode)}; modes are {', '.join(MODES)}")
        if shift is not None and not 0 <= shift <= _native.MAX_SHIFT:
            raise InvalidArgument(f"shift {shift} out of range 0..{_native.MAX_SHIFT}")
        if kernel_regex is not None:
            problem = _native.control_request_problem(MODES[mode], shift or 0, 0, kernel_regex)
            if problem:
                raise InvalidArgument(problem)

        def request(process: ObservedProcess) -> int:
            control = process.segment.control_state()
            filter_text = kernel_regex if kernel_regex is not None else control["applied_filter"]
            shift_value = shift if shift is not None else control["applied_shift"]
            return process.segment.request_control(mode, shift_value, filter_text)

        return await self._acknowledged(pids, ranks, gpus, request, timeout_s)

    async def open_ops_window(
        self,
        steps: int,
        pids: list[int],
        timeout_s: float,
        *,
        ranks: list[int] | None = None,
        gpus: list[str] | None = None,
    ) -> list[results.ModeResult]:
        """An op window of `steps` engine steps in each selected process, the config in force kept."""
        if not 1 <= steps <= _native.MAX_OPS_STEPS:
            raise InvalidArgument(f"an op window is 1..{_native.MAX_OPS_STEPS} engine steps, not {steps}")

        def request(process: ObservedProcess) -> int | str:
            """The config in force again, with the window; a refusal (nothing written) where
            that config is not known: a request still pending would be undone by it."""
            control = process.segment.control_state()
            if control["desired_generation"] > control["applied_generation"]:
                return "a control request is still pending in this process; open the window once it is applied"
            mode = MODE_NAMES.get(control["applied_mode"])
            if mode is None:
                return f"this process runs mode {control['applied_mode']}, unknown to this gpuobsd"
            if not process.segment.reader.header().get("identity_flags", 0) & TAKES_OP_WINDOWS:
                return (
                    "no framework plugin takes op windows in this process (the vLLM plugin does, from its "
                    "first engine step)"
                )
            return process.segment.request_control(
                mode, control["applied_shift"], control["applied_filter"], ops_steps=steps
            )

        return await self._acknowledged(pids, ranks, gpus, request, timeout_s)

    async def _acknowledged(
        self,
        pids: list[int],
        ranks: list[int] | None,
        gpus: list[str] | None,
        request: Callable[[ObservedProcess], int | str],
        timeout_s: float,
    ) -> list[results.ModeResult]:
        """Writes the control request of each selected process (under its lock) and waits,
        without blocking the loop, until each acknowledged its generation or the timeout passed.
        `request` answers the generation written, or why it wrote nothing (that process's
        answer). A bad timeout or selection is refused before anything is written."""
        if not 0 < timeout_s <= 60:
            raise InvalidArgument("timeout must be within (0, 60] seconds")
        targets = self._selected(pids, ranks or [], gpus or [])  # NotFound before anything is written
        generations: dict[int, tuple[ObservedProcess, int]] = {}
        refused: list[results.ModeResult] = []
        for process in targets:
            with process.lock:
                written = request(process)
            if isinstance(written, str):
                refused.append(
                    results.ModeResult(
                        pid=process.pid, acknowledged=False, status="failed_precondition", message=written, generation=0
                    )
                )
            else:
                generations[process.pid] = (process, written)
        deadline = time.monotonic() + timeout_s
        pending = dict(generations)
        while pending and time.monotonic() < deadline:
            for pid, (process, generation) in list(pending.items()):
                if process.segment.control_state()["applied_generation"] >= generation:
                    del pending[pid]
            if pending:
                await asyncio.sleep(0.0005)
        answers = []
        for pid, (process, generation) in generations.items():
            control = process.segment.control_state()
            acknowledged = control["applied_generation"] >= generation
            answers.append(
                results.ModeResult(
                    pid=pid,
                    acknowledged=acknowledged,
                    status=STATUS_NAMES.get(control["status"], "unknown") if acknowledged else "timeout",
                    message=control["status_message"] if acknowledged else "no acknowledgement before the timeout",
                    generation=generation,
                )
            )
        return answers + refused

    async def record_to_temporary(
        self, duration_s: float, max_events: int, pids: list[int]
    ) -> tuple[tuple[Path, RecordingAllowance], list[results.RecordedFile]]:
        """A recording into a folder of the daemon's own (in its spool folder), for streaming back
        to the caller: (the folder and the recording's share of the disk cap, both handed back
        through discard_temporary once sent; its files). Its bytes count against the cap for all
        recordings until then."""
        folder = Path(tempfile.mkdtemp(prefix="gpuobs-record-", dir=self.spool_dir))
        allowance = self.recording_budget.allowance()
        try:
            files = await self.record(
                str(folder / "recording.gpuobs"), duration_s, max_events, pids, allowance=allowance
            )
            return (folder, allowance), files
        except BaseException:
            allowance.release()
            shutil.rmtree(folder, ignore_errors=True)
            raise

    @staticmethod
    def discard_temporary(spooled: tuple[Path, RecordingAllowance]) -> None:
        """A streamed recording's folder, once it is sent (or the caller went away)."""
        folder, allowance = spooled
        shutil.rmtree(folder, ignore_errors=True)
        allowance.release()

    @staticmethod
    def file_chunks(path: str, chunk_bytes: int = RECORD_CHUNK_BYTES) -> Iterator[bytes]:
        """A recorded file's bytes, in order."""
        with open(path, "rb") as handle:
            while chunk := handle.read(chunk_bytes):
                yield chunk

    async def record(
        self,
        path: str,
        duration_s: float,
        max_events: int,
        pids: list[int],
        *,
        allowance: RecordingAllowance | None = None,
    ) -> list[results.RecordedFile]:
        """Records the processes into files at `path` (one per process) for a duration or a count
        of events, within the disk caps: `allowance` is its share when the caller holds it (a
        streamed recording, until its files are sent); else one is taken and given back at the end."""
        if allowance is None:
            allowance = self.recording_budget.allowance()
            try:
                return await self.record(path, duration_s, max_events, pids, allowance=allowance)
            finally:
                allowance.release()
        if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            raise InvalidArgument(f"the record path is longer than {MAX_PATH_BYTES} bytes")
        if "\0" in path:
            raise InvalidArgument("the record path has a NUL byte")
        target = Path(path)
        if not target.is_absolute():
            raise InvalidArgument("the record path must be absolute")
        if not duration_s and not max_events:
            raise InvalidArgument("give a duration or a number of events")
        if duration_s > 3600:
            raise InvalidArgument("at most one hour per recording")
        try:
            writable = target.parent.is_dir() and os.access(target.parent, os.W_OK)
        except OSError as error:  # a name longer than the file system takes, and the like
            raise InvalidArgument(f"{quoted(target.parent)}: {error.strerror}") from None
        if not writable:
            raise InvalidArgument(f"{quoted(target.parent)} is not a directory gpuobsd can write to")
        processes = self._targets(pids, live_only=True)
        if not processes:
            raise NotFound("no live process to record")
        paths = {
            p.pid: target if len(processes) == 1 else target.with_name(f"{target.stem}-{p.pid}{target.suffix}")
            for p in processes
        }
        try:
            existing = [str(p) for p in paths.values() if p.exists()]
        except OSError as error:
            raise InvalidArgument(f"{quoted(target)}: {error.strerror}") from None
        if existing:
            raise InvalidArgument(f"would overwrite {quoted(existing[0])}")
        writers: dict[int, RecordingWriter] = {}
        try:
            for pid, path in paths.items():
                writers[pid] = RecordingWriter(path, pid, time.time_ns())
        except FileExistsError as error:
            self._abort(writers)
            raise InvalidArgument(f"would overwrite {quoted(error.filename)}") from None
        except OSError as error:
            self._abort(writers)
            raise RecordFailed(paths[pid], error) from None
        subscriber, queue = queue_subscriber(frozenset(paths), 256, wants_launches=True)
        try:
            self.registry.add_subscriber(subscriber)
        except Busy:
            self._abort(writers)
            raise
        try:
            for process in processes:  # after subscribing: no node record falls between the two
                with process.lock:
                    ops = process.analyses.ops
                    nodes = recording_prelude(
                        process.analyses.graph_join.node_records(), ops.node_labels(), ops.recent_labels(RECENT_OPS)
                    )
                fits = allowance.records(len(nodes), LAUNCH_DTYPE.itemsize)
                writers[process.pid].add_launches(nodes[:fits].tobytes(), fits)
            await self._record_into(writers, queue, processes, duration_s, max_events, allowance)
        except asyncio.CancelledError:
            # the client went away (Ctrl-C): recording stops now (no batch comes in while the
            # files are finished); what was recorded is kept
            self.registry.remove_subscriber(subscriber)
            try:
                self._finish(writers, processes, subscriber, allowance)
            except RecordFailed:
                pass  # removed; nobody is left to tell
            raise
        except OSError as error:
            self._abort(writers)
            raise RecordFailed(next(iter(paths.values())), error) from None
        except BaseException:
            self._abort(writers)
            raise
        finally:
            self.registry.remove_subscriber(subscriber)  # whatever happened: the subscription is let go
        return self._finish(writers, processes, subscriber, allowance)

    @staticmethod
    def _abort(writers: dict[int, RecordingWriter]) -> None:
        for writer in writers.values():
            writer.abort()

    def _finish(
        self,
        writers: dict[int, RecordingWriter],
        processes: list[ObservedProcess],
        subscriber: Subscriber,
        allowance: RecordingAllowance,
    ) -> list[results.RecordedFile]:
        by_pid = {p.pid: p for p in processes}
        files = []
        try:
            for pid, writer in writers.items():
                written = writer.finish(by_pid[pid].segment.kernels(), dropped=subscriber.dropped)
                files.append(
                    results.RecordedFile(
                        pid,
                        str(written),
                        writer.event_count,
                        writer.launch_count,
                        subscriber.dropped,
                        allowance.stopped,
                    )
                )
        except OSError as error:
            self._abort(writers)
            raise RecordFailed(writer.path, error) from None
        return files

    @staticmethod
    async def _record_into(
        writers: dict[int, RecordingWriter],
        queue: SubscriberQueue,
        processes: list[ObservedProcess],
        duration_s: float,
        max_events: int,
        allowance: RecordingAllowance,
    ) -> None:
        """Until the duration or the count is reached, every process is gone, or a disk cap ends
        the recording (allowance.stopped)."""
        deadline = time.monotonic() + duration_s if duration_s else float("inf")
        while time.monotonic() < deadline and not allowance.stopped:
            batch = await queue.get_within(min(0.1, max(0.001, deadline - time.monotonic())))
            if batch is None:
                if all(not p.alive for p in processes):
                    break
                continue
            kind, pid, payload, count = batch
            writer = writers[pid]
            if kind == "launches":
                writer.add_launches(payload, allowance.records(count, LAUNCH_DTYPE.itemsize))
                continue
            if max_events:
                count = max(0, min(count, max_events - writer.event_count))
            writer.add_events(payload, allowance.records(count, EVENT_DTYPE.itemsize))
            if max_events and all(w.event_count >= max_events for w in writers.values()):
                break

    def _selected(self, pids: list[int], ranks: list[int], gpus: list[str]) -> list[ObservedProcess]:
        """Live processes by pid, by the rank their plugin set, or by a GPU of theirs (ordinal, PCI
        bus id or UUID): the union; every live process when none is given. A rank or GPU that no
        live process has is NotFound, as an unknown pid is."""
        if len(ranks) > MAX_PIDS or len(gpus) > MAX_PIDS:
            raise InvalidArgument(f"at most {MAX_PIDS} ranks and {MAX_PIDS} gpus")
        if not ranks and not gpus:
            return self._targets(pids, live_only=True)
        chosen = {id(p): p for p in (self._targets(pids, live_only=True) if pids else [])}
        live = self.registry.live()
        identities = {id(p): identity_of(p.segment.reader.header()) for p in live}
        for rank in dict.fromkeys(ranks):
            found = [p for p in live if identities[id(p)]["identity_set"] and identities[id(p)]["rank"] == rank]
            if not found:
                raise NotFound(f"no live observed process has rank {rank} (set by its framework plugin)")
            chosen.update((id(p), p) for p in found)
        for gpu in dict.fromkeys(gpus):
            found = [p for p in live if matches_gpu(identities[id(p)]["gpus"], gpu)]
            if not found:
                raise NotFound(f"no live observed process has a context on GPU {quoted(gpu)}")
            chosen.update((id(p), p) for p in found)
        return list(chosen.values())

    def _targets(self, pids: list[int], *, live_only: bool) -> list[ObservedProcess]:
        if len(pids) > MAX_PIDS:
            raise InvalidArgument(f"at most {MAX_PIDS} pids")
        if not pids:
            return self.registry.live() if live_only else list(self.registry.processes.values())
        known = list(self.registry.processes.values())
        found = []
        for pid in dict.fromkeys(pids):  # each once, in the order asked
            matches = [p for p in known if p.pid == pid and (p.alive or not live_only)]
            if not matches:
                raise NotFound(f"no observed process with pid {pid}")
            found.extend(matches)
        return found
