"""Prometheus metrics, read from the segments at scrape time by a custom Collector (no timer
copying numbers into metric objects). Kernel labels are capped per process; the rest is summed
under kernel="other".

Which kernels get a label of their own is decided once, when a scrape first sees the kernel
(the most launched of the new ones first, while the process has room), and never changes:
a series never disappears nor restarts, "other" only ever grows, and the labelled series plus
"other" sum to the process's totals exactly at every scrape. (Choosing the top N at each scrape
made series flap: 243 distinct series in 20 minutes against 51 at any instant.)"""

from __future__ import annotations

from typing import Iterator

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuobs.segment import MODES

from .service import ObserverService

log = structlog.get_logger("gpuobsd.metrics")
OTHER = "other"


class StickyLabels:
    """One process's kernel labels: kernel slots are numbered in the order kernels register, so
    the slots seen so far are a prefix, and the names that got a label are at most `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen_slots = 0
        self.labelled: set[str] = set()

    def assign(self, rows: list[dict]) -> None:
        """Kernels first seen in this scrape get their label, or "other", for good."""
        new = sorted((r for r in rows if r["slot"] >= self.seen_slots), key=lambda r: (-r["launches"], r["slot"]))
        for row in new:
            if len(self.labelled) < self.limit:
                self.labelled.add(row["name"][:200])
        if rows:
            self.seen_slots = max(self.seen_slots, max(r["slot"] for r in rows) + 1)

    def label(self, name: str) -> str:
        return name if name in self.labelled else OTHER


class GpuobsCollector(Collector):
    def __init__(self, service: ObserverService, kernel_label_limit: int) -> None:
        self.service = service
        self.kernel_label_limit = kernel_label_limit
        self.labels: dict[str, StickyLabels] = {}  # per segment path, while the daemon shows it

    def collect(self) -> Iterator:
        success = GaugeMetricFamily("gpuobs_collector_success", "1 when the last scrape read every segment")
        try:
            yield from self._collect()
            success.add_metric([], 1.0)
        except Exception as error:  # a scrape must answer; the failure shows in this gauge
            log.error("scrape_failed", error=str(error))
            success.add_metric([], 0.0)
        yield success

    def _collect(self) -> Iterator:
        processes = GaugeMetricFamily("gpuobs_processes", "Observed processes that are alive")
        mode = GaugeMetricFamily("gpuobs_mode", "Mode in force (1 for the current mode)", labels=["pid", "mode"])
        shift = GaugeMetricFamily("gpuobs_sample_shift", "Sampling shift in force (1 in 2^shift)", labels=["pid"])
        fill = GaugeMetricFamily("gpuobs_ring_fill_ratio", "Fullest event ring, claimed but unread / capacity",
                                 labels=["pid"])
        launches = CounterMetricFamily("gpuobs_kernel_launches", "Kernel launches", labels=["pid", "kernel"])
        blocks = CounterMetricFamily("gpuobs_blocks", "Thread blocks counted on the device", labels=["pid", "kernel"])
        accesses = CounterMetricFamily("gpuobs_memory_accesses", "Global memory accesses counted on the device",
                                       labels=["pid", "kernel"])
        events = CounterMetricFamily("gpuobs_events", "Events delivered to the daemon", labels=["pid"])
        dropped = CounterMetricFamily("gpuobs_events_dropped", "Events or records dropped, by stage",
                                      labels=["pid", "stage"])
        errors = CounterMetricFamily("gpuobs_accounting_errors", "Conservation checks that failed (must stay 0)",
                                     labels=["pid"])
        in_flight = GaugeMetricFamily("gpuobs_blocks_in_flight",
                                      "Blocks that entered and have not exited (processes that record block exits)",
                                      labels=["pid"])
        oldest = GaugeMetricFamily("gpuobs_oldest_block_in_flight_age_seconds",
                                   "Age of the oldest block in flight (0 when none)", labels=["pid"])
        steps = CounterMetricFamily("gpuobs_engine_steps", "Engine steps recorded (vLLM plugin)", labels=["pid"])
        callbacks = CounterMetricFamily("gpuobs_injector_callback_seconds",
                                        "Wall time the injector spent in its own callbacks", labels=["pid", "callback"])
        alive = 0
        for view in self.service.processes():
            pid = str(view["pid"])
            alive += int(view["alive"])
            for name in MODES:
                mode.add_metric([pid, name], 1.0 if view["mode"] == name else 0.0)
            shift.add_metric([pid], float(view["shift"]))
            fill.add_metric([pid], view["ring_fill_ratio"])
            errors.add_metric([pid], float(view["accounting_errors"]))
            steps.add_metric([pid], float(view["engine_steps"]))
            for callback in ("resource", "launch", "graph"):
                callbacks.add_metric([pid, callback], view["injector"][f"{callback}_callback_seconds"])
            for stage in view["stages"]:
                dropped.add_metric([pid, stage["stage"]], float(stage["dropped"]))
                if stage["stage"] == "device":
                    events.add_metric([pid], float(stage["delivered"]))
                    dropped.add_metric([pid, "reader"], float(stage["torn"] + stage["corrupt"]))
        for evidence in self.service.hang_evidence([]):
            if evidence["exits_hooked"] and evidence["alive"]:
                in_flight.add_metric([str(evidence["pid"])], float(evidence["blocks_in_flight"]))
                oldest.add_metric([str(evidence["pid"])], evidence["oldest_age_ns"] / 1e9)
        subscribers_dropped = sum(s.dropped for s in self.service.registry.subscribers)
        dropped.add_metric(["", "stream"], float(subscribers_dropped))
        rows = self.service.kernel_totals()
        by_segment: dict[str, list[dict]] = {}
        for row in rows:
            by_segment.setdefault(row["segment"], []).append(row)
        for segment in list(self.labels):
            if segment not in by_segment:
                del self.labels[segment]  # the process is forgotten, and its series with it
        # one series per (pid, label): the same name can live in several modules
        merged: dict[tuple[int, str], dict] = {}
        for segment, segment_rows in by_segment.items():
            labels = self.labels.setdefault(segment, StickyLabels(self.kernel_label_limit))
            labels.assign(segment_rows)
            for row in segment_rows:
                key = (row["pid"], labels.label(row["name"][:200]))
                into = merged.setdefault(key, {"launches": 0, "blocks_observed": 0, "memory_accesses": 0})
                for field in ("launches", "blocks_observed", "memory_accesses"):
                    into[field] += row[field]
        for (pid, name), row in merged.items():
            label = [str(pid), name]
            launches.add_metric(label, float(row["launches"]))
            blocks.add_metric(label, float(row["blocks_observed"]))
            accesses.add_metric(label, float(row["memory_accesses"]))
        processes.add_metric([], float(alive))
        yield from (processes, mode, shift, fill, launches, blocks, accesses, events, dropped, errors, in_flight, oldest,
                    steps, callbacks)
