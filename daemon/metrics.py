"""Prometheus metrics, read from the segments at scrape time by a custom Collector (no timer
copying numbers into metric objects).

Series are keyed by who a process is (metric_identity.py: host, GPU UUID, rank, model, pod), not
by its pid, so that a restarted rank continues its series; the pid is only on
`gpuobs_process_info`. Per kernel, only the kernels that matter now have series of their own,
within a budget per identity (kernel_budget.py), the rest summed under kernel="other", exactly
(metric_series.py). docs/metrics.md states the budget and its series counts."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gpuobs
import structlog
from gpuobs._native import LAYOUT_VERSION
from gpuobs.segment import MODES
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from . import results
from .identity import pci_address
from .metric_identity import (
    DRIVER_GPUS,
    IDENTITY_LABELS,
    PROC,
    DriverGpu,
    Pod,
    SeriesIdentity,
    driver_gpus,
    host_name,
    pod_of,
    series_identity,
)
from .metric_series import DURATION_BUCKETS, DURATION_EDGES_NS, IdentitySeries, ProcessInput, SeriesBook
from .registry import ObservedProcess
from .request_ledger import HISTOGRAMS
from .service import ObserverService

log = structlog.get_logger("gpuobsd.metrics")
KERNEL_LABELS = ["kernel", "kernel_id"]
DRIVER_REREAD_S = 60.0  # the driver's GPU list is read again at most this often, when a GPU is not in it

# Every per-kernel device counter (layout.h's KernelCounters, by field name) and the counter it is
# exported as, labelled by identity and kernel, or None where it is not exported per kernel. A test
# holds this table to the field table, so a counter added to layout.h fails it until it is decided
# here; exporting one is its entry alone (its family, its sums and its place follow this order).
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
# Whole-process counters: their family and help. Summed per identity over its processes, and
# carried over when one exits (metric_series.py), so they never fall.
PROCESS_COUNTERS: dict[str, tuple[str, str]] = {
    "events": ("gpuobs_events", "Events delivered to the daemon"),
    "events_dropped": ("gpuobs_events_dropped", "Events the device dropped, the event ring full (counted, never lost)"),
    "launch_records_dropped": (
        "gpuobs_launch_records_dropped",
        "Host records (graph launches, engine steps, the launch trace) dropped, the launch ring full",
    ),
    "records_unreadable": (
        "gpuobs_records_unreadable",
        "Event records the daemon could not read: torn by a writer that died mid-record, or corrupt",
    ),
    "accounting_errors": ("gpuobs_accounting_errors", "Conservation checks that failed (must stay 0)"),
    "engine_steps": ("gpuobs_engine_steps", "Engine steps recorded (vLLM plugin)"),
    "profiler_starts": (
        "gpuobs_profiler_starts",
        "Profilers started in an observed process: each recorded no GPU activity (the driver admits one tool)",
    ),
}
# The histograms a process's request ledger keeps (request_ledger.HISTOGRAMS): their family and
# help. Labelled by identity only (model and rank among it): never a request id.
REQUEST_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "request_device_seconds": (
        "gpuobs_request_device_seconds",
        "Device time per request (vLLM plugin): its token share of each settled step's device span, "
        "observed once it leaves the batch",
    ),
    "step_busy_ratio": (
        "gpuobs_step_busy_ratio",
        "Per engine step, its device span over its host time (to the next step's start): "
        "how busy its work kept the GPU",
    ),
}
UNANALYSED = (
    "gpuobs_block_events_unanalysed",
    "Block events the daemon's analyses did not look at (its analysis share was spent): launches and "
    "blocks in flight may be missing from `hangs`, never the stalled kernels",
)


def process_counts(view: results.Process) -> dict[str, float]:
    """A process's whole-process counters by PROCESS_COUNTERS key, the callbacks' seconds as
    `callback:<name>`, and the block events its analyses skipped."""
    counts: dict[str, float] = {
        "accounting_errors": view.accounting_errors,
        "engine_steps": view.engine_steps,
        "profiler_starts": view.injector.profiler_starts,
        "unanalysed": view.block_events_unanalysed,
    }
    for stage in view.stages:
        if stage.stage == "device":
            counts.update(
                events=stage.delivered, events_dropped=stage.dropped, records_unreadable=stage.torn + stage.corrupt
            )
        elif stage.stage == "host":
            counts["launch_records_dropped"] = stage.dropped
    for callback in INJECTOR_CALLBACKS:
        counts[f"callback:{callback}"] = getattr(view.injector, f"{callback}_callback_seconds")
    return counts


def histogram_of(totals: dict[str, float], key: str) -> tuple[list[tuple[str, float]], float]:
    """(cumulative buckets, sum) of one request histogram from its flat counters."""
    edges = HISTOGRAMS[key]
    buckets, running = [], 0.0
    for index, edge in enumerate([*map(str, edges), "+Inf"]):
        running += totals.get(f"{key}:{index}", 0)
        buckets.append((edge, running))
    return buckets, totals.get(f"{key}:sum", 0.0)


def counts_accesses(view: results.Process) -> bool:
    """Whether a process counts memory accesses per kernel: the memory patch set, or kernels
    chosen for the access hooks in the block set (GPUOBS_MEMORY_KERNELS)."""
    return view.patch_set == "memory" or bool(view.memory_kernels)


# A per-kernel counter exported only for identities where it can count: one of its processes
# counts it (or it counted before). Memory accesses need the access hooks; in the block set
# without chosen kernels they were a series per kernel that was always 0.
KERNEL_COUNTER_APPLIES: dict[str, Callable[[results.Process], bool]] = {"memory_accesses": counts_accesses}


class GpuobsCollector(Collector):
    def __init__(
        self,
        service: ObserverService,
        kernel_label_limit: int,
        stall_threshold_s: float = 5.0,
        *,
        histogram_limit: int = 8,
        rerank_s: float = 60.0,
        grace_s: float = 1800.0,
        host: str | None = None,
        driver_dir: Path = DRIVER_GPUS,
        proc: Path = PROC,
    ) -> None:
        self.service = service
        self.stall_threshold_s = stall_threshold_s
        self.book = SeriesBook(tuple(KERNEL_COUNTER_EXPORTS), kernel_label_limit, histogram_limit, rerank_s, grace_s)
        self.host = host or host_name()
        self.driver_dir = driver_dir
        self.proc = proc
        self.gpus: dict[tuple[int, int, int, int], DriverGpu] = driver_gpus(driver_dir)
        self.gpus_read_at = time.monotonic()
        self.pods: dict[str, Pod] = {}  # per segment shown: read once, while its process lives
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

    def _pod(self, process: ObservedProcess, view: results.Process) -> Pod:
        """The process's pod, read once while it lives (and kept only if it still lived after:
        its pid was not reused meanwhile)."""
        segment = str(process.path)
        if segment not in self.pods and view.alive:
            pod = pod_of(process.pid, self.proc)
            if process.segment.reader.producer_alive():
                self.pods[segment] = pod
        return self.pods.get(segment, Pod())

    def _driver_gpus(self, views: list[results.Process]) -> dict[tuple[int, int, int, int], DriverGpu]:
        """The driver's GPU list, read again (at most every DRIVER_REREAD_S) when a process names
        a GPU that is not in it."""
        unknown = any(pci_address(gpu.pci_bus_id) not in self.gpus for view in views for gpu in view.gpus)
        if unknown and time.monotonic() - self.gpus_read_at >= DRIVER_REREAD_S:
            self.gpus = driver_gpus(self.driver_dir)
            self.gpus_read_at = time.monotonic()
        return self.gpus

    def inputs(self) -> list[ProcessInput]:
        """What this scrape knows of every shown process: its view, identity and counters."""
        shown = self.service.kernel_counters()
        views = {view.segment: view for view in self.service.processes()}
        gpus = self._driver_gpus(list(views.values()))
        inputs = []
        for process, counters in shown:
            view = views.get(str(process.path))
            if view is None:  # came between the two reads: next scrape
                continue
            inputs.append(
                ProcessInput(
                    segment=view.segment,
                    view=view,
                    identity=series_identity(view, self.host, gpus, self._pod(process, view)),
                    counters=counters,
                    durations=self.service.block_duration_histograms(process),
                    names=functools.partial(self.service.kernel_names, process),
                    counts=process_counts(view) | self.service.request_histogram_counts(process),
                )
            )
        for segment in [segment for segment in self.pods if segment not in views]:
            del self.pods[segment]
        return inputs

    def _collect(self) -> Iterator:
        identity_labels = list(IDENTITY_LABELS)
        processes = GaugeMetricFamily("gpuobs_processes", "Observed processes that are alive")
        info = GaugeMetricFamily(
            "gpuobs_process_info",
            "Who an observed process is: its pid, label, role and world size, and a GPU of its contexts "
            "(one series per GPU), beside the labels its series carry",
            labels=[
                *identity_labels,
                "pid",
                "label",
                "role",
                "world_size",
                "cuda_ordinal",
                "pci_bus_id",
                "device",
                "pod_uid",
            ],
        )
        mode = GaugeMetricFamily(
            "gpuobs_mode", "Processes in each mode (1 for the mode in force)", labels=[*identity_labels, "mode"]
        )
        shift = GaugeMetricFamily(
            "gpuobs_sample_shift", "Sampling shift in force (1 in 2^shift)", labels=identity_labels
        )
        fill = GaugeMetricFamily(
            "gpuobs_ring_fill_ratio", "Fullest event ring, claimed but unread / capacity", labels=identity_labels
        )
        kernel_labels = [*identity_labels, *KERNEL_LABELS]
        kernel_counters = {
            field: CounterMetricFamily(name, documentation, labels=kernel_labels)
            for field, (name, documentation) in KERNEL_COUNTER_EXPORTS.items()
        }
        durations = HistogramMetricFamily(
            "gpuobs_block_duration_seconds",
            "Leader thread's block enter to exit (processes that record block exits), per kernel",
            labels=kernel_labels,
        )
        counters = {
            key: CounterMetricFamily(name, documentation, labels=identity_labels)
            for key, (name, documentation) in PROCESS_COUNTERS.items()
        }
        request_histograms = {
            key: HistogramMetricFamily(name, documentation, labels=identity_labels)
            for key, (name, documentation) in REQUEST_HISTOGRAMS.items()
        }
        unanalysed = CounterMetricFamily(*UNANALYSED, labels=identity_labels)
        callbacks = CounterMetricFamily(
            "gpuobs_injector_callback_seconds",
            "Wall time the injector spent in its own callbacks",
            labels=[*identity_labels, "callback"],
        )
        in_flight = GaugeMetricFamily(
            "gpuobs_blocks_in_flight",
            "Blocks that entered and have not exited, from the device's counts (processes that record block exits)",
            labels=identity_labels,
        )
        oldest = GaugeMetricFamily(
            "gpuobs_oldest_block_in_flight_age_seconds",
            "The longest a kernel with blocks in flight has had no block exit (0 when none)",
            labels=identity_labels,
        )
        stream_dropped = CounterMetricFamily(
            "gpuobs_stream_events_dropped", "Events a slow streaming or recording client missed (its queue was full)"
        )
        with self.lock:
            inputs = self.inputs()
            self.book.update(inputs, time.monotonic())
            evidence = {e.pid: e for e in self.service.hang_evidence([]) if e.exits_hooked and e.alive}
            for item in inputs:
                self._add_info(info, item)
            for series in self.book.series():
                labels = series.identity.values()
                self._add_gauges(series, labels, mode, shift, fill, in_flight, oldest, evidence)
                totals = series.counts()
                for key, family in counters.items():
                    family.add_metric(labels, float(totals.get(key, 0)))
                for callback in INJECTOR_CALLBACKS:
                    callbacks.add_metric([*labels, callback], float(totals.get(f"callback:{callback}", 0)))
                for key, histogram in request_histograms.items():
                    if totals.get(f"{key}:count", 0):  # only identities with steps: no empty histograms
                        buckets, total = histogram_of(totals, key)
                        histogram.add_metric(labels, buckets, total)
                views = [m.view for m in series.members.values() if m.view is not None]
                if totals.get("unanalysed", 0) or any(v.pid in evidence for v in views):
                    unanalysed.add_metric(labels, float(totals.get("unanalysed", 0)))
                self._add_kernel_series(series, labels, views, kernel_counters, durations)
        processes.add_metric([], float(sum(item.view.alive for item in inputs)))
        stream_dropped.add_metric([], float(self.service.stream_events_dropped()))
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
            *counters.values(),
            *request_histograms.values(),
            stream_dropped,
            in_flight,
            oldest,
            unanalysed,
            callbacks,
            lag,
            stalled,
        )

    def _add_info(self, info: GaugeMetricFamily, item: ProcessInput) -> None:
        """One series per GPU of the process (one with empty GPU labels while it has none), with
        its identity's labels, the GPU's own where it has several."""
        view, who = item.view, item.identity
        pod = self.pods.get(item.segment, Pod())
        named = [view.role, str(view.world_size)] if view.identity_set else ["", ""]
        gpus: list[results.Gpu | None] = list(view.gpus) or [None]
        for gpu in gpus:
            address = pci_address(gpu.pci_bus_id) if gpu is not None else None
            listed = self.gpus.get(address) if address is not None else None
            where = SeriesIdentity(
                who.hostname,
                gpu.uuid if gpu is not None else "",
                str(listed.index) if listed is not None else "",
                who.model,
                who.rank,
                who.namespace,
                who.pod,
                who.container,
            )
            info.add_metric(
                [
                    *where.values(),
                    str(view.pid),
                    view.label,
                    *named,
                    str(gpu.ordinal) if gpu is not None else "",
                    gpu.pci_bus_id if gpu is not None else "",
                    listed.device if listed is not None else "",
                    pod.uid,
                ],
                1.0,
            )

    @staticmethod
    def _add_gauges(
        series: IdentitySeries,
        labels: list[str],
        mode: GaugeMetricFamily,
        shift: GaugeMetricFamily,
        fill: GaugeMetricFamily,
        in_flight: GaugeMetricFamily,
        oldest: GaugeMetricFamily,
        evidence: dict[int, results.HangEvidence],
    ) -> None:
        """Gauges of an identity's current processes (none for one kept after its last exited)."""
        current = series.current()
        if not current:
            return
        for name in MODES:
            mode.add_metric([*labels, name], float(sum(view.mode == name for view in current)))
        shift.add_metric(labels, float(max(view.shift for view in current)))
        fill.add_metric(labels, max(view.ring_fill_ratio for view in current))
        hooked = [evidence[view.pid] for view in current if view.pid in evidence]
        if hooked:
            in_flight.add_metric(labels, float(sum(e.blocks_in_flight for e in hooked)))
            oldest.add_metric(labels, max(e.oldest_age_ns for e in hooked) / 1e9)

    def _add_kernel_series(
        self,
        series: IdentitySeries,
        labels: list[str],
        views: list[results.Process],
        kernel_counters: dict[str, CounterMetricFamily],
        durations: HistogramMetricFamily,
    ) -> None:
        """The named kernels and `other`, for the families that apply to this identity."""
        named = series.kernel_series("counters", self.book.counter_columns)
        for column, (field, family) in enumerate(kernel_counters.items()):
            applies = KERNEL_COUNTER_APPLIES.get(field)
            counted = sum(kernel.values[column] for kernel in named)
            if applies is not None and not counted and not any(applies(view) for view in views):
                continue
            for kernel in named:
                family.add_metric([*labels, kernel.label, kernel.kid], float(kernel.values[column]))
        histograms = series.kernel_series("histograms", self.book.histogram_columns)
        if not any(sum(kernel.values[:DURATION_BUCKETS]) for kernel in histograms):
            return  # no block duration measured: the family does not apply here
        for kernel in histograms:
            cumulative = 0
            buckets = []
            for index, edge in enumerate(DURATION_EDGES_NS):
                cumulative += kernel.values[index]
                buckets.append((f"{edge * 1e-9:.9g}", float(cumulative)))
            cumulative += kernel.values[DURATION_BUCKETS - 1]
            buckets.append(("+Inf", float(cumulative)))
            durations.add_metric(
                [*labels, kernel.label, kernel.kid], buckets=buckets, sum_value=kernel.values[DURATION_BUCKETS] * 1e-9
            )
