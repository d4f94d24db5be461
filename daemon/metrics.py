"""Prometheus metrics, read from the segments at scrape time by a custom Collector (no timer
copying numbers into metric objects). Kernel labels are capped per process; the rest is summed
under kernel="other"."""

from __future__ import annotations

from typing import Iterator

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuobs.segment import MODES

from .service import ObserverService

log = structlog.get_logger("gpuobsd.metrics")
OTHER = "other"


class GpuobsCollector(Collector):
    def __init__(self, service: ObserverService, kernel_label_limit: int) -> None:
        self.service = service
        self.kernel_label_limit = kernel_label_limit

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
        # one series per (pid, kernel name): the same name can live in several modules
        merged: dict[tuple[int, str], dict] = {}
        for row in rows:
            key = (row["pid"], row["name"][:200])
            into = merged.setdefault(key, {"name": key[1], "launches": 0, "blocks_observed": 0, "memory_accesses": 0})
            for field in ("launches", "blocks_observed", "memory_accesses"):
                into[field] += row[field]
        per_pid: dict[int, list[dict]] = {}
        for (pid, _), row in sorted(merged.items(), key=lambda item: -item[1]["launches"]):
            per_pid.setdefault(pid, []).append(row)
        for pid, kernel_rows in per_pid.items():
            named = kernel_rows[: self.kernel_label_limit]
            rest = kernel_rows[self.kernel_label_limit:]
            for row in named:
                label = [str(pid), row["name"]]
                launches.add_metric(label, float(row["launches"]))
                blocks.add_metric(label, float(row["blocks_observed"]))
                accesses.add_metric(label, float(row["memory_accesses"]))
            if rest:
                label = [str(pid), OTHER]
                launches.add_metric(label, float(sum(r["launches"] for r in rest)))
                blocks.add_metric(label, float(sum(r["blocks_observed"] for r in rest)))
                accesses.add_metric(label, float(sum(r["memory_accesses"] for r in rest)))
        processes.add_metric([], float(alive))
        yield from (processes, mode, shift, fill, launches, blocks, accesses, events, dropped, errors, in_flight, oldest,
                    steps, callbacks)
