"""The processes gpuobsd observes: discovery of segments, continuous draining, and what has been
read from each. All reading is batched in the native reader; nothing here loops over events.

Discovery and draining run on one thread of their own (DrainThread); the API and the metrics
scrape read from others. What a process's analysis holds is guarded by that process's lock, taken
by the drain for one process's pass and by a query for one process's view: a query never waits
for a whole pass, and the drain never waits for a whole query.

Segments are opened as their single consumer (an flock in the native reader), so a restarted
daemon continues from the tails stored in the segments and counts nothing twice.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import structlog
from gpuobs.segment import STATE_EXITED, Accounting, Segment, SegmentError, segment_paths

from .analysis import ALL_REPLAYS, Analysis
from .analysis_budget import BEHIND_SHARE, AnalysisBudget
from .block_pairing import BlockPairing
from .cache_writes import CacheWrites, KernelNames
from .errors import Busy
from .graph_join import GraphJoin
from .hot_pcs import HotPcs
from .kernel_stalls import KernelStalls
from .op_attribution import OpAttribution
from .request_ledger import RequestLedger, RequestRetention
from .step_attribution import StepAttribution
from .time_budget import TimeBudget

log = structlog.get_logger("gpuobsd.registry")

ACCOUNTING_CHECK_S = 0.05  # conservation is checked at most this often per process, and at the end
HANG_CHECK_S = 0.5  # blocks in flight are compared with the hang threshold at most this often
LIVENESS_S = 1.0  # a producer's liveness (/proc) and its segment's size checked at most this often
MAX_WARNED = 4096  # launches remembered as already reported, per process
# Any local user can fill the segment directory with files named like segments: the daemon
# remembers this many rejected ones (path and reason) and opens at most MAX_TRIES_PER_PASS
# files it does not know per discovery pass, in turn, so junk costs bounded memory and time.
MAX_REJECTED = 4096
MAX_TRIES_PER_PASS = 1024
QUERY_SHARE = 0.4  # of the daemon's time, for every query thread together
QUERY_BURST_S = 0.5  # of query work answered at full speed after an idle spell


MAX_SUBSCRIBERS = 16  # streams and recordings at once: each may hold a full queue
MAX_READ_ONLY_SUBSCRIBERS = 8  # of which through the read-only --listen address (the socket keeps 8)


@dataclasses.dataclass
class Subscriber:
    """A consumer of drained batches (StreamEvents, Record): a bounded queue; what does not fit
    is dropped and counted here, so a slow consumer never slows the drain."""

    pids: frozenset[int]
    put: Callable[[tuple[str, int, bytes, int]], bool]  # (kind, pid, bytes, count); False when full
    wants_launches: bool = False
    dropped: int = 0
    dropped_of: dict[int, int] = dataclasses.field(default_factory=dict)  # the same, per pid: a recording's file each
    read_only: bool = False  # came through the read-only --listen address


class SubscriberQueue:
    """Batches from the drain thread to one consumer on the event loop, at most max_batches and
    MAX_QUEUED_BYTES in the queue at once: a put beyond that is refused (and counted by the
    caller), never waits. A stalled client costs the daemon this much, never more."""

    MAX_QUEUED_BYTES = 64 << 20

    def __init__(self, loop: asyncio.AbstractEventLoop, max_batches: int) -> None:
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._max = max_batches
        self._held = 0  # put and not yet taken; changed under _lock from both sides
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, item: tuple[str, int, bytes, int]) -> bool:
        size = len(item[2])
        with self._lock:
            if self._held >= self._max or (self._held and self._bytes + size > self.MAX_QUEUED_BYTES):
                return False
            self._held += 1
            self._bytes += size
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closing: nobody will take it
            with self._lock:
                self._held -= 1
                self._bytes -= size
            return False
        return True

    async def get(self) -> tuple[str, int, bytes, int]:
        item = await self._queue.get()
        with self._lock:
            self._held -= 1
            self._bytes -= len(item[2])
        return item

    async def get_within(self, timeout_s: float) -> tuple[str, int, bytes, int] | None:
        """The next batch, or None after timeout_s. Not asyncio.wait_for: before Python 3.12 it
        can swallow a cancellation that arrives as the batch does (a recording whose client went
        away would then run on to its deadline)."""
        getter = asyncio.ensure_future(self.get())
        try:
            done, _ = await asyncio.wait({getter}, timeout=timeout_s)
        finally:
            if not getter.done():
                getter.cancel()
        return getter.result() if done else None


def queue_subscriber(
    pids: frozenset[int], max_batches: int, *, wants_launches: bool = False
) -> tuple[Subscriber, SubscriberQueue]:
    """A Subscriber whose batches a coroutine of the running loop takes from the returned queue."""
    queue = SubscriberQueue(asyncio.get_running_loop(), max_batches)
    return Subscriber(pids, queue.put, wants_launches=wants_launches), queue


def kernel_names(segment: Segment, slots: Iterable[int]) -> dict[int, str]:
    """slot -> demangled name of those kernel slots the segment's kernel table has published."""
    return {kernel["slot"]: kernel["demangled"] for kernel in segment.kernels_at(sorted(set(slots)))}


@dataclasses.dataclass
class ProcessAnalyses:
    """The analyses of one process, in the order the drain feeds them: the graph join first,
    whose node grid ids and replay shapes the others read."""

    graph_join: GraphJoin
    block_pairing: BlockPairing
    steps: StepAttribution
    ops: OpAttribution
    hot_pcs: HotPcs
    cache_writes: CacheWrites  # the KV-cache slots stored to, per replay, until the ledger takes them
    requests: RequestLedger  # after the steps and the graph join, whose settled results it folds

    @classmethod
    def create(
        cls,
        budget: TimeBudget | None = None,
        *,
        exits_hooked: bool = False,
        retention: RequestRetention | None = None,
        kernel_names: KernelNames = lambda slots: {},
    ) -> ProcessAnalyses:
        """Every analysis of a new process, sharing `budget` (all processes share one);
        `kernel_names`: the names of kernel slots, from its segment's kernel table."""
        budget = budget or AnalysisBudget()
        graph_join = GraphJoin(budget, exits_hooked=exits_hooked)
        ops = OpAttribution(
            graph_join.by_handle.get, graph_join.node_device_times, budget=budget, exits_hooked=exits_hooked
        )
        steps = StepAttribution(graph_join.replay_shape)
        cache_writes = CacheWrites(kernel_names, lambda: steps.kv_layout, budget, graph_join.node_grid_ids)
        return cls(
            graph_join,
            BlockPairing(budget, exits_hooked, graph_join.node_grid_ids),
            steps,
            ops,
            HotPcs(budget),
            cache_writes,
            RequestLedger(steps, graph_join.replay_summary, retention, cache=cache_writes),
        )

    def __iter__(self) -> Iterator[Analysis]:
        return (getattr(self, field.name) for field in dataclasses.fields(self))


@dataclasses.dataclass
class ObservedProcess:
    path: Path
    segment: Segment
    alive: bool = True
    final_drained: bool = False
    accounting_errors: int = 0
    last_errors: tuple[str, ...] = ()
    last_check: float = 0.0
    last_accounting: Accounting | None = None
    # the registry passes its budget
    analyses: ProcessAnalyses = dataclasses.field(default_factory=ProcessAnalyses.create)
    stalls: KernelStalls = dataclasses.field(default_factory=KernelStalls)  # hang evidence from counts
    seen_dead: bool = False  # the producer was found dead on an idle pass
    last_liveness: float = 0.0  # registry clock of the last liveness check (producer alive, segment whole)
    unsettled: bool = False  # records read since the analyses last settled
    settled_at: int = -1  # the replay_begun they settled at
    replay_begun: int = 0  # the last device_replay_begun read (GlobalCounters)
    gone_at: float = 0.0  # registry clock at the final drain
    # the drain (one pass of this process) and each query (one view of it) hold it; reentrant
    # because a view may call a helper that takes it again
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock, repr=False, compare=False)

    @property
    def pid(self) -> int:
        return self.segment.pid

    def events_dropped_per_kernel(self) -> np.ndarray | None:
        """Device-stage drops per kernel slot from one counters snapshot; None when no
        consistent snapshot could be read this time."""
        snapshot = self.segment.counters()
        return snapshot[1]["events_dropped"] if snapshot else None


class Registry:
    def __init__(
        self,
        segment_dir: Path,
        *,
        owners: list[int],
        torn_timeout_s: float,
        exited_retention_s: float = 300.0,
        exited_max: int = 32,
        clock: Callable[[], float] = time.monotonic,
        hang_threshold_s: float = 10.0,
        analysis_share: float = 0.3,
        request_retention: RequestRetention | None = None,
    ) -> None:
        self.segment_dir = Path(segment_dir)
        self.owners = owners
        self.torn_timeout_s = torn_timeout_s
        # A process that restarts daily for months must not leave a segment (tens of MiB of tmpfs)
        # and its series behind each time: final counts are kept this long, then let go.
        self.exited_retention_s = exited_retention_s
        self.exited_max = exited_max  # and at most this many at once, however fast they come and go
        self.clock = clock
        self.processes: dict[Path, ObservedProcess] = {}
        self.rejected: dict[Path, str] = {}  # at most MAX_REJECTED, while the file is there
        self.rejected_forgotten = 0  # rejections not remembered (MAX_REJECTED were): tried again in turn
        self.unattached = 0  # files of the directory not attached, at the last discovery
        self._tried_up_to: Path | None = None  # where the last pass's tries stopped
        self.subscribers: list[Subscriber] = []
        self.last_pass_at = clock()
        self.analysis_budget = AnalysisBudget(analysis_share)
        self.hang_threshold_s = hang_threshold_s
        self.request_retention = request_retention or RequestRetention()
        self.last_hang_check = 0.0
        self.pass_fullest = self.last_pass_fullest = 0.0
        self.query_budget = TimeBudget(QUERY_SHARE, QUERY_BURST_S)

    # -- discovery ---------------------------------------------------------------------------
    def discover(self) -> None:
        present = set(segment_paths(self.segment_dir))
        for path in list(self.rejected):
            if path not in present:
                del self.rejected[path]  # gone, or replaced: look again next time
        for path in self._in_turn(sorted(present - self.processes.keys() - self.rejected.keys())):
            try:
                segment = Segment(path, owners=self.owners)
            except SegmentError as error:
                self._reject(path, str(error).split(": ", 1)[-1])
                continue
            segment.reader.set_torn_timeout(self.torn_timeout_s)
            analyses = ProcessAnalyses.create(
                self.analysis_budget,
                exits_hooked=bool(segment.header.get("block_exits_hooked")),
                retention=self.request_retention,
                kernel_names=functools.partial(kernel_names, segment),
            )
            process = ObservedProcess(path, segment, analyses=analyses)
            self._check(process, self.clock())  # a status seeing the process sees its accounting too
            self.processes[path] = process
            log.info(
                "process_attached",
                pid=segment.pid,
                producer=segment.header["producer"],
                label=segment.header["label"],
                path=str(path),
            )
        self.unattached = len(present - self.processes.keys())
        now = self.clock()
        for path in list(self.processes):
            process = self.processes[path]
            if not process.final_drained:
                continue
            if path not in present:
                del self.processes[path]
            elif now - process.gone_at >= self.exited_retention_s:
                self._forget(process)
        self._trim_exited()

    def _in_turn(self, unknown: list[Path]) -> list[Path]:
        """At most MAX_TRIES_PER_PASS of these (sorted) files, starting after the last one tried,
        so that every file gets its turn however many there are."""
        if len(unknown) > MAX_TRIES_PER_PASS:
            start = bisect.bisect_right(unknown, self._tried_up_to) if self._tried_up_to is not None else 0
            unknown = (unknown[start:] + unknown[:start])[:MAX_TRIES_PER_PASS]
        if unknown:
            self._tried_up_to = unknown[-1]
        return unknown

    def _reject(self, path: Path, reason: str, *, keep: bool = False) -> None:
        """Remembered (named in status, not opened again while it is there), or, once
        MAX_REJECTED are, counted and tried again in its turn. `keep`: remembered whatever, the
        longest remembered file making room (a segment the daemon must not open again)."""
        if keep and len(self.rejected) >= MAX_REJECTED:
            del self.rejected[next(iter(self.rejected))]
            self.rejected_forgotten += 1
        if len(self.rejected) < MAX_REJECTED:
            self.rejected[path] = reason
            log.warning("segment_rejected", path=str(path), reason=reason)
            return
        if not self.rejected_forgotten:
            log.warning("rejected_segments_not_remembered", remembered=MAX_REJECTED, path=str(path), reason=reason)
        self.rejected_forgotten += 1

    def _trim_exited(self) -> None:
        """At most exited_max exited processes, the oldest forgotten first."""
        exited = sorted((p for p in self.processes.values() if p.final_drained), key=lambda p: p.gone_at)
        for process in exited[: max(0, len(exited) - self.exited_max)]:
            self._forget(process)

    def _forget(self, process: ObservedProcess) -> None:
        """An exited process's retention is over: its segment file goes, and with the last
        reference its mapping, its descriptor and its series."""
        try:
            os.unlink(process.path)
        except FileNotFoundError:
            pass
        except OSError as error:  # not ours to delete: forget it anyway, and say so
            log.warning("segment_not_deleted", pid=process.pid, path=str(process.path), error=str(error))
            self._reject(process.path, "exited, retention over, not deletable", keep=True)
        del self.processes[process.path]
        log.info("process_forgotten", pid=process.pid, path=str(process.path))

    # -- draining ----------------------------------------------------------------------------
    def drain_pass(self, max_batches: int = 8) -> int:
        """Reads what is available from every process (bounded per process so one busy
        producer cannot starve the others). Returns the number of records read."""
        total = 0
        now = self.clock()
        failures = 0
        self.last_pass_fullest = self.pass_fullest
        self.pass_fullest = 0.0  # the fullest ring's share as this pass found it (the drain thread's pace)
        for process in list(self.processes.values()):
            if process.final_drained:
                continue
            try:
                read = self._drain_process(process, max_batches)
                total += read
                # checked while records flow, and once a liveness tick when they do not (a
                # quiet producer's counters change little, and an idle pass costs next to nothing)
                if (read or now - process.last_check >= LIVENESS_S) and now - process.last_check >= ACCOUNTING_CHECK_S:
                    self._check(process, now)
            except Exception:  # one bad segment must not stop the others being drained
                failures += 1
                log.exception("drain_process_failed", pid=process.pid)
        if failures == 0 or total > 0:
            self.last_pass_at = self.clock()  # a pass that only failed is a stall
        if now - self.last_hang_check >= HANG_CHECK_S:
            self.last_hang_check = now
            self.report_hangs()
        return total

    def report_hangs(self) -> None:
        """Blocks in flight per kernel from the published counts (no budget skips them), and one
        structured warning per kernel whose blocks in flight saw no exit for the threshold, busy
        kernels and kernels with dropped events included; the launch and blocks named where the
        pairing holds their enters."""
        now, now_ns = self.clock(), time.time_ns()
        for process in list(self.processes.values()):
            if not process.alive or not process.segment.header.get("block_exits_hooked"):
                continue  # without exit hooks there is nothing to tell from (hangs says so)
            snapshot = process.segment.counters()
            if snapshot is None:
                continue  # the producer kept publishing: next time
            with process.lock:
                self._report_hangs_of(process, snapshot[1], now, now_ns)

    def _report_hangs_of(self, process: ObservedProcess, kernels: np.ndarray, now: float, now_ns: int) -> None:
        stalls = process.stalls
        stalls.update(kernels, now)
        threshold_ns = int(self.hang_threshold_s * 1e9)
        pairing = process.analyses.block_pairing
        # enters held for kernels with no block in flight by the counts, older than the threshold:
        # their exits were lost (dropped, or a sampled exit more than an epoch after its enter)
        pairing.drop_stale(set(stalls.stalls), now_ns - threshold_ns)
        fresh = [s for s in stalls.stalled(now, self.hang_threshold_s) if not s.reported]
        if not fresh:
            return
        names = kernel_names(process.segment, (s.slot for s in fresh))
        launches: dict[int, dict] = {}  # slot -> its oldest launch in flight
        for in_flight in pairing.in_flight(now_ns, threshold_ns):
            launches.setdefault(in_flight["slot"], in_flight)
        for stall in fresh:
            stall.reported = True
            launch = launches.get(stall.slot)
            detail = (
                {
                    "grid_id": launch["grid_id"],
                    "replay": launch["replay"],
                    "first_blocks": launch["blocks"][:8],
                    "sms": launch["sms"][:32],
                }
                if launch
                else {"launch": "not seen in events"}
            )
            log.warning(
                "kernel_hang_suspected",
                pid=process.pid,
                kernel=names.get(stall.slot, "?"),
                slot=stall.slot,
                blocks_in_flight=stall.blocks_in_flight,
                no_exit_for_s=round(now - stall.since, 3),
                **detail,
            )

    def _drain_process(self, process: ObservedProcess, max_batches: int) -> int:
        segment = process.segment
        now = self.clock()
        tick = now - process.last_liveness >= LIVENESS_S  # the checks whose rate must not follow the passes'
        if tick:
            process.last_liveness = now
            if not segment.reader.size_intact():
                log.error("segment_shrunk", pid=process.pid, path=str(process.path))
                process.final_drained = True
                process.alive = False
                process.gone_at = self.clock()
                return 0
        # Sampled before reading: a producer seen exited here has committed all it will; if this
        # pass then reads nothing, everything is in. (/proc is only asked on an idle segment.)
        exited = segment.reader.state() == STATE_EXITED
        _, fullest, ready = segment.reader.backlog()
        self.pass_fullest = max(self.pass_fullest, fullest)
        if not exited and not tick and not process.unsettled and not ready:
            return 0  # nothing waits: a few loads from the segment, no copy, no analysis, no system call
        # Sampled before reading too: every replay below the one the device had begun then has
        # its events in the rings, so once the rings are read to their end those are final.
        counters = segment.global_counters()
        if counters is not None:
            process.replay_begun = max(process.replay_begun, int(counters["device_replay_begun"]))
        replay_begun = ALL_REPLAYS if exited or process.seen_dead else process.replay_begun
        read = 0
        # Launches first: a launch record is written before its kernel runs, so the events read
        # next find their launch (graph node) already known. They are few (one per launch, none
        # per block) and every join keys on them: only the share limits their analysis, never a
        # ring's backlog (that is for the events' analyses, set per batch below).
        self.analysis_budget.behind = False
        caught_up = True
        for _ in range(max_batches):
            launches = segment.read_launches()
            if not len(launches):
                break
            read += len(launches)
            with process.lock:  # per batch: a query waits for one batch's analysis at most
                for analysis in process.analyses:
                    analysis.on_launches(launches)
            self._publish("launches", process.pid, launches)
        else:
            # launch records may still wait (a replay's span among them): settling now would fix
            # replays before their records are read
            caught_up = False
        for ring in range(segment.event_rings):
            for _ in range(max_batches):
                # the analyses wait when the drain is behind (AnalysisBudget.behind): judged by
                # what waited in this ring before this batch was read and in the fullest ring of the
                # last pass, as time spent on one process's analyses is time every ring fills
                self.analysis_budget.behind = max(self.last_pass_fullest, segment.reader.backlog()[1]) > BEHIND_SHARE
                batch = segment.read_events(ring)
                if not len(batch):
                    break
                read += len(batch)
                # counted by the reader as it read them; shared by every analysis
                kind_counts = np.frombuffer(segment.reader.last_read_kinds(), dtype=np.uint64)
                with process.lock:
                    for analysis in process.analyses:
                        analysis.on_events(batch, kind_counts)
                self._publish("events", process.pid, batch)
            else:
                caught_up = False  # max_batches read and maybe more waiting
                self.pass_fullest = 1.0  # the pass left records: the next follows at once
        if read:
            process.unsettled = True
        # on a liveness tick too: an engine gone idle settles its newest step (RequestLedger.IDLE_NS)
        if caught_up and (process.unsettled or replay_begun != process.settled_at or tick):
            with process.lock:
                for analysis in process.analyses:
                    analysis.settle(replay_begun)
            process.unsettled = False
            process.settled_at = replay_begun
        if read == 0 and not exited and tick and not segment.reader.producer_alive():
            # died without marking the segment: its last claims are settled by the torn timeout,
            # so look again on the next pass before declaring it drained
            exited = process.seen_dead
            process.seen_dead = True
        if exited and read == 0:
            # the producer is done and everything it committed has been read
            process.alive = False
            process.final_drained = True
            process.gone_at = self.clock()
            self._check(process, process.gone_at)
            log.info(
                "process_gone",
                pid=process.pid,
                accounting_errors=process.accounting_errors,
                retained_s=self.exited_retention_s,
            )
            self._trim_exited()  # at once: a status right after must not show one too many
        return read

    def _publish(self, kind: str, pid: int, batch: np.ndarray) -> None:
        if not self.subscribers:
            return
        payload = batch.tobytes()
        for subscriber in tuple(self.subscribers):  # the API adds and removes them on its thread
            if (subscriber.pids and pid not in subscriber.pids) or (
                kind == "launches" and not subscriber.wants_launches
            ):
                continue
            if not subscriber.put((kind, pid, payload, len(batch))) and kind == "events":
                subscriber.dropped += len(batch)
                subscriber.dropped_of[pid] = subscriber.dropped_of.get(pid, 0) + len(batch)

    def _check(self, process: ObservedProcess, now: float) -> None:
        process.last_check = now
        with process.lock:  # accounting() keeps the last snapshot's floor in the Segment
            account = process.segment.accounting()
        if not account.complete:
            return  # no consistent snapshot this time: check again on the next pass
        process.last_accounting = account
        if account.errors and account.errors != process.last_errors:
            process.accounting_errors += len(account.errors)
            log.error("accounting_mismatch", pid=process.pid, errors=list(account.errors))
        process.last_errors = account.errors

    # -- queries -----------------------------------------------------------------------------
    def yield_to_drain(self, worked_s: float) -> None:
        """Called by a long query between chunks of its work. Queries together may use
        QUERY_SHARE of the daemon's time (a token bucket, so an idle daemon answers a burst at
        full speed); beyond that they sleep, off the CPU and off the GIL, so that the daemon's
        own queries never cost a producer its events. On a loaded host both threads want the
        GIL, and without a bound the drain would get it only between the query's switch
        intervals."""
        self.query_budget.pace(worked_s)

    def add_subscriber(self, subscriber: Subscriber) -> None:
        if len(self.subscribers) >= MAX_SUBSCRIBERS:
            raise Busy(f"{MAX_SUBSCRIBERS} streams and recordings are running: at most that many at once")
        if subscriber.read_only and sum(s.read_only for s in self.subscribers) >= MAX_READ_ONLY_SUBSCRIBERS:
            raise Busy(f"{MAX_READ_ONLY_SUBSCRIBERS} streams run through this address: at most that many at once")
        self.subscribers.append(subscriber)

    def remove_subscriber(self, subscriber: Subscriber) -> None:
        """Removes that one (by identity; absent is fine: every way out of a stream calls this)."""
        for index, existing in enumerate(self.subscribers):
            if existing is subscriber:
                del self.subscribers[index]
                return

    def live(self) -> list[ObservedProcess]:
        return [p for p in list(self.processes.values()) if p.alive]
