"""Live feeds of event batches: streams to a client (StreamEvents) and recordings into files
(Record, RecordStream). Both subscribe to the drain's batches (Registry.add_subscriber), which
caps how many run at once and counts what a slow one missed."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gpuobs.op_labels import recording_prelude
from gpuobs.recording import RecordingWriter, process_of
from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE

from . import results
from .errors import Busy, InvalidArgument, NotFound, RecordFailed, quoted
from .identity import identity_of
from .recording_budget import RecordingAllowance, RecordingBudget
from .registry import ObservedProcess, Registry, Subscriber, SubscriberQueue, queue_subscriber
from .service_targets import Targets

RECENT_OPS = 256  # labels of the last ops read that a recording begins with (an op open as it begins)
RECORD_CHUNK_BYTES = 1 << 20  # a streamed recording's chunk: under every client's default message limit
MAX_PATH_BYTES = 4096  # PATH_MAX


class Recordings:
    def __init__(
        self, registry: Registry, targets: Targets, recording_budget: RecordingBudget, spool_dir: Path | None
    ) -> None:
        self.registry = registry
        self.targets = targets
        self.recording_budget = recording_budget
        self.spool_dir = spool_dir  # where streamed recordings are written first (None: the system's temporary folder)

    # -- streams -----------------------------------------------------------------------------
    def open_stream(
        self, pids: list[int], queue_batches: int, *, read_only: bool
    ) -> tuple[Subscriber, SubscriberQueue]:
        """A live feed of those processes' event batches (all, when empty), through a queue of
        at most queue_batches batches; Busy when as many streams run as the daemon takes.
        Called on the event loop, whose coroutines take the batches."""
        self.targets.processes(pids, live_only=False)  # NotFound for an unknown pid
        subscriber, queue = queue_subscriber(frozenset(pids), queue_batches)
        subscriber.read_only = read_only
        self.registry.add_subscriber(subscriber)
        return subscriber, queue

    def close_stream(self, subscriber: Subscriber) -> None:
        self.registry.remove_subscriber(subscriber)

    def stream_events_dropped(self) -> int:
        """Events that streams and recordings running now could not keep up with."""
        return sum(s.dropped for s in tuple(self.registry.subscribers))

    # -- recordings --------------------------------------------------------------------------
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
        processes = self.targets.processes(pids, live_only=True)
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
        by_pid = {p.pid: p for p in processes}
        try:
            for pid, file_path in paths.items():
                header = by_pid[pid].segment.reader.header()
                started = time.monotonic_ns(), time.time_ns()  # a host clock pair the file keeps
                about = process_of(header, identity_of(header), started[0])
                writers[pid] = RecordingWriter(file_path, pid, started[1], about)
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
                dropped = subscriber.dropped_of.get(pid, 0)  # this process's events the recording missed
                written = writer.finish(by_pid[pid].segment.kernels(), dropped=dropped)
                files.append(
                    results.RecordedFile(
                        pid,
                        str(written),
                        writer.event_count,
                        writer.launch_count,
                        dropped,
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
