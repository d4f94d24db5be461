"""Prometheus metrics, read from the segments at scrape time by a custom Collector (no timer
copying numbers into metric objects). Kernel labels are capped per process; the rest is summed
under kernel="other".

Which kernels get a label of their own is decided once, when a scrape first sees the kernel
(the most launched of the new ones first, while the process has room), and never changes:
a series never disappears nor restarts, "other" only ever grows, and the labelled series plus
"other" sum to the process's totals exactly at every scrape. (Choosing the top N at each scrape
made series flap: 243 distinct series in 20 minutes against 51 at any instant.)"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator

import gpuobs
import numpy as np
import structlog
from gpuobs._native import LAYOUT_VERSION
from gpuobs.segment import MODES
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from . import results
from .block_pairing import BUCKETS_PER_OCTAVE
from .registry import ObservedProcess
from .service import ObserverService

# Block-duration histogram edges: every factor of 4 from 1.024 us to 1.07 s, which are edges of
# the daemon's own log2 buckets (BUCKETS_PER_OCTAVE an octave), so the counts are exact.
DURATION_EDGE_OCTAVES = np.arange(10, 31, 2)  # log2 of each edge in ns
DURATION_EDGES_NS = (1 << DURATION_EDGE_OCTAVES).tolist()
DURATION_EDGE_BUCKETS = BUCKETS_PER_OCTAVE * DURATION_EDGE_OCTAVES

log = structlog.get_logger("gpuobsd.metrics")
OTHER = "other"

# Every per-kernel device counter (layout.h's KernelCounters, by field name) and the counter it is
# exported as, labelled (pid, kernel), or None where it is not exported per kernel. A test holds
# this table to the field table, so a counter added to layout.h fails it until it is decided here;
# exporting one is its entry alone (its family, its sums and its place follow this table's order).
KERNEL_COUNTER_METRICS: dict[str, tuple[str, str] | None] = {
    "launches": ("gpuobs_kernel_launches", "Kernel launches"),
    "blocks_expected": None,
    "blocks_observed": ("gpuobs_blocks", "Thread blocks counted on the device"),
    "blocks_unpatched": None,
    "memory_accesses": ("gpuobs_memory_accesses", "Global memory accesses counted on the device"),
    "events_produced": None,
    "events_dropped": None,
    "blocks_unobserved": None,
    "blocks_exited": None,
}
KERNEL_COUNTER_EXPORTS: dict[str, tuple[str, str]] = {
    field: metric for field, metric in KERNEL_COUNTER_METRICS.items() if metric is not None
}
# The injector's callbacks whose time is exported (label callback=): the `<name>_callback_seconds`
# of results.InjectorStats, which takes them from the global counters by name.
INJECTOR_CALLBACKS: tuple[str, ...] = tuple(
    field.name.removesuffix("_callback_seconds")
    for field in dataclasses.fields(results.InjectorStats)
    if field.name.endswith("_callback_seconds")
)


class StickyLabels:
    """One process's kernel labels. Kernel slots are numbered in the order kernels register, so
    the slots seen so far are a prefix: each gets a label index once (0 is "other"), the names
    with a label of their own are at most `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.names: list[str] = [OTHER]
        self.index: dict[str, int] = {}
        self.kernel_label = np.zeros(0, dtype=np.int64)  # label index per kernel slot

    def assign(self, launches: np.ndarray, names_of: Callable[[int, int], list[str]]) -> None:
        """Kernels first seen now (slots beyond those seen) get their label, or "other", for
        good: the most launched of them first, while there is room."""
        seen = len(self.kernel_label)
        if len(launches) <= seen:
            return
        names = [name[:200] for name in names_of(seen, len(launches) - seen)]  # unpublished: next time
        if not names:
            return
        labels = np.zeros(len(names), dtype=np.int64)
        for offset in sorted(range(len(names)), key=lambda i: (-int(launches[seen + i]), i)):
            name = names[offset]
            if name not in self.index and len(self.index) < self.limit:
                self.index[name] = len(self.names)
                self.names.append(name)
            labels[offset] = self.index.get(name, 0)
        self.kernel_label = np.concatenate([self.kernel_label, labels])

    def sums(self, column: np.ndarray) -> list[tuple[str, int]]:
        """(label, total) of one counter column, exact (integers, not floats)."""
        totals = np.zeros(len(self.names), dtype=np.uint64)
        count = min(len(column), len(self.kernel_label))
        np.add.at(totals, self.kernel_label[:count], column[:count].astype(np.uint64))
        used = np.zeros(len(self.names), dtype=bool)
        used[np.unique(self.kernel_label[:count])] = True
        return [(self.names[i], int(totals[i])) for i in np.flatnonzero(used).tolist()]


class GpuobsCollector(Collector):
    def __init__(self, service: ObserverService, kernel_label_limit: int, stall_threshold_s: float = 5.0) -> None:
        self.service = service
        self.stall_threshold_s = stall_threshold_s
        self.kernel_label_limit = kernel_label_limit
        self.labels: dict[str, StickyLabels] = {}  # per segment path, while the daemon shows it
        # per segment: the last scrape's sums, per exported counter field
        self.last_sums: dict[str, dict[str, list[tuple[str, int]]]] = {}
        # a collection at a time (metrics_server.SharedExposition serves concurrent scrapes one)
        self.lock = threading.Lock()

    def collect(self) -> Iterator:
        began = time.monotonic()
        success = GaugeMetricFamily("gpuobs_collector_success", "1 when the last scrape read every segment")
        try:
            yield from self._collect()
            success.add_metric([], 1.0)
        except Exception as error:  # a scrape must answer; the failure shows in this gauge
            log.error("scrape_failed", error=str(error))
            success.add_metric([], 0.0)
        yield success
        duration = GaugeMetricFamily(
            "gpuobs_scrape_duration_seconds", "Time this scrape took to gather gpuobs's own metrics"
        )
        duration.add_metric([], time.monotonic() - began)
        yield duration

    def _collect(self) -> Iterator:
        processes = GaugeMetricFamily("gpuobs_processes", "Observed processes that are alive")
        mode = GaugeMetricFamily("gpuobs_mode", "Mode in force (1 for the current mode)", labels=["pid", "mode"])
        shift = GaugeMetricFamily("gpuobs_sample_shift", "Sampling shift in force (1 in 2^shift)", labels=["pid"])
        fill = GaugeMetricFamily(
            "gpuobs_ring_fill_ratio", "Fullest event ring, claimed but unread / capacity", labels=["pid"]
        )
        kernel_counters = {
            field: CounterMetricFamily(name, documentation, labels=["pid", "kernel"])
            for field, (name, documentation) in KERNEL_COUNTER_EXPORTS.items()
        }
        events = CounterMetricFamily("gpuobs_events", "Events delivered to the daemon", labels=["pid"])
        dropped = CounterMetricFamily(
            "gpuobs_events_dropped",
            "Events the device dropped, the event ring full (counted, never lost)",
            labels=["pid"],
        )
        launch_dropped = CounterMetricFamily(
            "gpuobs_launch_records_dropped",
            "Host records (graph launches, engine steps, the launch trace) dropped, the launch ring full",
            labels=["pid"],
        )
        unreadable = CounterMetricFamily(
            "gpuobs_records_unreadable",
            "Event records the daemon could not read: torn by a writer that died mid-record, or corrupt",
            labels=["pid"],
        )
        stream_dropped = CounterMetricFamily(
            "gpuobs_stream_events_dropped", "Events a slow streaming or recording client missed (its queue was full)"
        )
        errors = CounterMetricFamily(
            "gpuobs_accounting_errors", "Conservation checks that failed (must stay 0)", labels=["pid"]
        )
        in_flight = GaugeMetricFamily(
            "gpuobs_blocks_in_flight",
            "Blocks that entered and have not exited, from the device's counts (processes that record block exits)",
            labels=["pid"],
        )
        oldest = GaugeMetricFamily(
            "gpuobs_oldest_block_in_flight_age_seconds",
            "The longest a kernel with blocks in flight has had no block exit (0 when none)",
            labels=["pid"],
        )
        unanalysed = CounterMetricFamily(
            "gpuobs_block_events_unanalysed",
            "Block events the daemon's analyses did not look at (its analysis share "
            "was spent): launches and blocks in flight may be missing from `hangs`, never the stalled kernels",
            labels=["pid"],
        )
        steps = CounterMetricFamily("gpuobs_engine_steps", "Engine steps recorded (vLLM plugin)", labels=["pid"])
        profilers = CounterMetricFamily(
            "gpuobs_profiler_starts",
            "Profilers started in an observed process: each recorded no GPU activity (the driver admits one tool)",
            labels=["pid"],
        )
        callbacks = CounterMetricFamily(
            "gpuobs_injector_callback_seconds",
            "Wall time the injector spent in its own callbacks",
            labels=["pid", "callback"],
        )
        info = GaugeMetricFamily(
            "gpuobs_process_info",
            "Who an observed process is: its label, the role, rank and model its plugin set, "
            "and a GPU of its contexts (one series per GPU; gpu is the ordinal as the process sees it)",
            labels=["pid", "label", "role", "rank", "world_size", "model", "gpu", "gpu_uuid", "pci_bus_id"],
        )
        alive = 0
        for view in self.service.processes():
            pid = str(view.pid)
            alive += int(view.alive)
            for name in MODES:
                mode.add_metric([pid, name], 1.0 if view.mode == name else 0.0)
            shift.add_metric([pid], float(view.shift))
            fill.add_metric([pid], view.ring_fill_ratio)
            errors.add_metric([pid], float(view.accounting_errors))
            steps.add_metric([pid], float(view.engine_steps))
            who = (
                [view.role, str(view.rank), str(view.world_size), view.model] if view.identity_set else ["", "", "", ""]
            )
            # one series per GPU, or one with empty GPU labels for a process that has none yet
            wheres = [[str(gpu.ordinal), gpu.uuid, gpu.pci_bus_id] for gpu in view.gpus] or [["", "", ""]]
            for where in wheres:
                info.add_metric([str(view.pid), view.label, *who, *where], 1.0)
            profilers.add_metric([pid], float(view.injector.profiler_starts))
            for callback in INJECTOR_CALLBACKS:
                callbacks.add_metric([pid, callback], getattr(view.injector, f"{callback}_callback_seconds"))
            for stage in view.stages:
                if stage.stage == "device":
                    events.add_metric([pid], float(stage.delivered))
                    dropped.add_metric([pid], float(stage.dropped))
                    unreadable.add_metric([pid], float(stage.torn + stage.corrupt))
                elif stage.stage == "host":
                    launch_dropped.add_metric([pid], float(stage.dropped))
        for evidence in self.service.hang_evidence([]):
            if evidence.exits_hooked and evidence.alive:
                in_flight.add_metric([str(evidence.pid)], float(evidence.blocks_in_flight))
                oldest.add_metric([str(evidence.pid)], evidence.oldest_age_ns / 1e9)
                unanalysed.add_metric([str(evidence.pid)], float(evidence.events_unanalysed))
        stream_dropped.add_metric([], float(self.service.stream_events_dropped()))
        durations = HistogramMetricFamily(
            "gpuobs_block_duration_seconds",
            "Leader thread's block enter to exit (processes that record block exits), per kernel",
            labels=["pid", "kernel"],
        )
        with self.lock:
            counts, histograms = self._kernel_series()
            for field, series in counts.items():
                for (kernel_pid, kernel), total in series.items():
                    kernel_counters[field].add_metric([str(kernel_pid), kernel], float(total))
            for (kernel_pid, kernel), (cumulative, total_ns) in histograms.items():
                durations.add_metric(
                    [str(kernel_pid), kernel],
                    buckets=[
                        *((f"{edge * 1e-9:.9g}", float(cumulative[i])) for i, edge in enumerate(DURATION_EDGES_NS)),
                        ("+Inf", float(cumulative[-1])),
                    ],
                    sum_value=total_ns * 1e-9,
                )
        processes.add_metric([], float(alive))
        build = InfoMetricFamily(
            "gpuobs_build",
            "The daemon's version and the segment layout it reads",
            value={"version": gpuobs.__version__, "layout_version": str(LAYOUT_VERSION)},
        )
        lag = GaugeMetricFamily(
            "gpuobs_drain_lag_seconds", "Time since the drain last went over every segment (grows while it stalls)"
        )
        lag.add_metric([], self.service.drain_age_seconds())
        stalled = GaugeMetricFamily(
            "gpuobs_drain_stalled",
            "1 while the drain has finished no pass for the stall "
            "threshold (--watchdog-stall-ms): the daemon answers, the rings fill",
        )
        stalled.add_metric([], 1.0 if self.service.drain_stalled(self.stall_threshold_s) else 0.0)
        yield from (
            build,
            processes,
            info,
            mode,
            shift,
            fill,
            *kernel_counters.values(),
            durations,
            events,
            dropped,
            launch_dropped,
            unreadable,
            stream_dropped,
            errors,
            in_flight,
            oldest,
            unanalysed,
            steps,
            profilers,
            callbacks,
            lag,
            stalled,
        )

    def _duration_series(
        self, process: ObservedProcess, labels: StickyLabels, out: dict[tuple[int, str], tuple[np.ndarray, int]]
    ) -> None:
        """Adds this process's block-duration histograms, per kernel label, cumulative at
        DURATION_EDGES_NS and in total (the last entry), with their sums in ns."""
        for slot, (histogram, total_ns) in self.service.block_duration_histograms(process).items():
            index = int(labels.kernel_label[slot]) if slot < len(labels.kernel_label) else 0
            cumulative = np.cumsum(histogram)
            at_edges = np.append(cumulative[DURATION_EDGE_BUCKETS - 1], cumulative[-1])
            key = (process.pid, labels.names[index])
            before, before_ns = out.get(key, (np.zeros(len(at_edges), dtype=np.uint64), 0))
            out[key] = (before + at_edges, before_ns + total_ns)

    def _kernel_series(self) -> tuple[dict[str, dict[tuple[int, str], int]], dict]:
        """Per exported counter field (KERNEL_COUNTER_EXPORTS), its total per (pid, label); and the
        block-duration histograms per (pid, label). A pid reused while its predecessor is still
        shown sums both processes into one series, as Prometheus wants series unique. A process
        whose counters could not be copied this time shows its last sums again."""
        counts: dict[str, dict[tuple[int, str], int]] = {field: {} for field in KERNEL_COUNTER_EXPORTS}
        histograms: dict[tuple[int, str], tuple[np.ndarray, int]] = {}
        shown = set()
        for process, counters in self.service.kernel_counters():
            segment = str(process.path)
            shown.add(segment)
            if counters is not None:
                labels = self.labels.setdefault(segment, StickyLabels(self.kernel_label_limit))
                labels.assign(counters["launches"], functools.partial(self.service.kernel_names, process))
                self.last_sums[segment] = {field: labels.sums(counters[field]) for field in KERNEL_COUNTER_EXPORTS}
            if segment in self.labels:
                self._duration_series(process, self.labels[segment], histograms)
            for field, sums in self.last_sums.get(segment, {}).items():
                series = counts[field]
                for name, total in sums:
                    key = (process.pid, name)
                    series[key] = series.get(key, 0) + total
        for segment in [s for s in self.labels if s not in shown]:
            del self.labels[segment]  # the process is forgotten, and its series with it
            self.last_sums.pop(segment, None)
        return counts, histograms
