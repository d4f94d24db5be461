"""What gpuobsd answers, apart from how (gRPC, metrics): plain methods over the registry that
return typed results (daemon/results.py) and raise typed errors (daemon/errors.py). The
transport maps results to messages in one place (daemon/messages.py) and errors to status
codes, and reaches the registry only through these methods.

ObserverService is that one surface, composed of parts that each serve one kind of question
and share how a request names its processes (service_targets.py):

- service_processes.py: status, the processes' views, the drain's age
- service_control.py: SetMode and op windows, written and acknowledged
- service_kernels.py: kernels, their counters for the metrics, hot PCs
- service_graphs.py: graph execs; service_hangs.py: blocks in flight
- service_steps.py: engine steps and framework ops
- service_recordings.py: event streams and recordings

Its methods only hand the request to the part that answers it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from . import results
from .recording_budget import RecordingAllowance, RecordingBudget
from .registry import ObservedProcess, Registry, Subscriber, SubscriberQueue
from .service_control import Control
from .service_graphs import GraphQueries
from .service_hangs import HangQueries
from .service_kernels import KernelQueries
from .service_processes import ProcessViews
from .service_recordings import RECORD_CHUNK_BYTES, Recordings
from .service_steps import StepQueries
from .service_targets import Targets

QUERY_THREADS = 4


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
        targets = Targets(registry)
        self.views = ProcessViews(registry, segment_dir)
        self.control = Control(targets)
        self.kernel_queries = KernelQueries(registry, targets, cubin_dir)
        self.graph_queries = GraphQueries(registry, targets)
        self.hang_queries = HangQueries(registry, targets)
        self.step_queries = StepQueries(targets)
        self.recordings = Recordings(
            registry, targets, recording_budget or RecordingBudget(1 << 30, 4 << 30), spool_dir
        )
        # Queries run here, not on the event loop: a long one (every kernel of a big process)
        # must not hold up a status call, nor the loop's turns that every RPC needs.
        self.executor = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="gpuobsd-query")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- processes and the drain ---------------------------------------------------------------
    def status(self) -> results.Status:
        return self.views.status()

    def processes(self) -> list[results.Process]:
        return self.views.processes()

    def process_view(self, process: ObservedProcess) -> results.Process:
        return self.views.process_view(process)

    def drain_age_seconds(self) -> float:
        return self.views.drain_age_seconds()

    def drain_stalled(self, threshold_s: float) -> bool:
        """The drain has not finished a pass for threshold_s (what the status line, the log and
        gpuobs_drain_stalled say; the daemon keeps answering). Measured by drain_age_seconds, as
        the drain-lag metric and the watchdog's status line are."""
        return self.drain_age_seconds() > threshold_s

    # -- control ------------------------------------------------------------------------------
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
        return await self.control.set_mode(mode, shift, pids, kernel_regex, timeout_s, ranks=ranks, gpus=gpus)

    async def open_ops_window(
        self,
        steps: int,
        pids: list[int],
        timeout_s: float,
        *,
        ranks: list[int] | None = None,
        gpus: list[str] | None = None,
    ) -> list[results.ModeResult]:
        return await self.control.open_ops_window(steps, pids, timeout_s, ranks=ranks, gpus=gpus)

    # -- kernels, graphs, hangs ---------------------------------------------------------------
    def kernels(
        self, pids: list[int], top: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Kernel]:
        return self.kernel_queries.kernels(pids, top, page_size, page_token)

    def kernel_counters(self) -> list[tuple[ObservedProcess, np.ndarray | None]]:
        return self.kernel_queries.kernel_counters()

    def kernel_names(self, process: ObservedProcess, first_slot: int, count: int) -> list[tuple[str, str]]:
        return self.kernel_queries.kernel_names(process, first_slot, count)

    def block_duration_histograms(self, process: ObservedProcess) -> dict[int, tuple[np.ndarray, int]]:
        return self.kernel_queries.block_duration_histograms(process)

    def request_histogram_counts(self, process: ObservedProcess) -> dict[str, float]:
        return self.step_queries.request_histogram_counts(process)

    def cubin_path(self, process: ObservedProcess, entry: dict) -> str:
        return self.kernel_queries.cubin_path(process, entry)

    def hot_pcs(self, pids: list[int], top: int, page_size: int = 0, page_token: str = "") -> results.HotPcs:
        return self.kernel_queries.hot_pcs(pids, top, page_size, page_token)

    def graphs(
        self, pids: list[int], replays: int = 16, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Graph]:
        return self.graph_queries.graphs(pids, replays, page_size, page_token)

    def hangs(
        self, pids: list[int], min_age_ms: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.HungLaunch]:
        return self.hang_queries.hangs(pids, min_age_ms, page_size, page_token)

    def hang_evidence(self, pids: list[int], min_age_ms: int = 0) -> list[results.HangEvidence]:
        return self.hang_queries.hang_evidence(pids, min_age_ms)

    # -- steps and ops ------------------------------------------------------------------------
    def ops(self, pids: list[int], top: int = 50) -> results.Ops:
        return self.step_queries.ops(pids, top)

    def steps(self, pids: list[int], last: int = 20, replay: int | None = None, page_token: str = "") -> results.Steps:
        return self.step_queries.steps(pids, last, replay, page_token)

    def requests(
        self, pids: list[int], top: int = 20, request: str = "", every: bool = False, page_token: str = ""
    ) -> results.Requests:
        return self.step_queries.requests(pids, top, request, every, page_token)

    # -- streams and recordings ---------------------------------------------------------------
    def open_stream(
        self, pids: list[int], queue_batches: int, *, read_only: bool
    ) -> tuple[Subscriber, SubscriberQueue]:
        return self.recordings.open_stream(pids, queue_batches, read_only=read_only)

    def close_stream(self, subscriber: Subscriber) -> None:
        self.recordings.close_stream(subscriber)

    def stream_events_dropped(self) -> int:
        return self.recordings.stream_events_dropped()

    async def record(
        self,
        path: str,
        duration_s: float,
        max_events: int,
        pids: list[int],
        *,
        allowance: RecordingAllowance | None = None,
    ) -> list[results.RecordedFile]:
        return await self.recordings.record(path, duration_s, max_events, pids, allowance=allowance)

    async def record_to_temporary(
        self, duration_s: float, max_events: int, pids: list[int]
    ) -> tuple[tuple[Path, RecordingAllowance], list[results.RecordedFile]]:
        return await self.recordings.record_to_temporary(duration_s, max_events, pids)

    def discard_temporary(self, spooled: tuple[Path, RecordingAllowance]) -> None:
        self.recordings.discard_temporary(spooled)

    def file_chunks(self, path: str, chunk_bytes: int = RECORD_CHUNK_BYTES) -> Iterator[bytes]:
        return self.recordings.file_chunks(path, chunk_bytes)
