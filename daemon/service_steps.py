"""What the served framework did, as its plugin recorded it: engine steps and the replays each
launched (ListSteps), framework ops and the kernels each launched (ListOps)."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable

from gpuobs.segment import MODE_NAMES

from . import results
from .cache_writes import KV_CACHE_KERNEL
from .errors import InvalidArgument, NotFound
from .graph_exec import DeviceTime
from .paging import REQUEST_TOKEN, STEP_TOKEN, page_token_of, parse_page_token, position_in, process_order
from .registry import ObservedProcess, kernel_names
from .request_times import RequestTime, device_busy, per_second, replays_known, request_kernels, step_span, step_times
from .service_targets import MAX_TOP, Targets
from .step_attribution import Step, StepAttribution

MAX_REQUEST_ID = 1024  # longer than any id vLLM makes
STEPS_PAGE = 256  # steps per ListSteps reply (a step of 256 requests carries their ids)
REQUESTS_PAGE = 512  # requests per ListRequests reply when walking every request


def request_row(pid: int, row: RequestTime) -> results.RequestTime:
    """A ledger row as the reply's, copied (the row goes on changing under the drain)."""
    return results.RequestTime(
        pid,
        row.request,
        row.steps,
        row.tokens,
        row.device_ns,
        row.steps_untimed,
        row.kernel_launches,
        row.blocks,
        row.first_step,
        row.last_step,
        cache_stores=row.cache_stores,
        cache_steps=row.cache_steps,
        cache_slots=len(row.cache_slots),
        cache_slots_complete=row.cache_slots_complete,
    )


def slot_ranges(slots: Iterable[int]) -> list[results.SlotRange]:
    """Slots as runs of consecutive numbers, in order."""
    ranges: list[results.SlotRange] = []
    for slot in sorted(slots):
        if ranges and ranges[-1].last + 1 == slot:
            ranges[-1].last = slot
        else:
            ranges.append(results.SlotRange(slot, slot))
    return ranges


def add_cache_totals(reply: results.Requests, process: ObservedProcess) -> None:
    """The process's KV-cache stores as read, and as the ledger gave them out (under its lock)."""
    writes = process.analyses.cache_writes.report()
    ledger = process.analyses.requests.report()
    reply.cache_stores += writes.stores
    reply.cache_stores_outside += writes.outside
    reply.cache_stores_before_layout += writes.before_layout
    reply.cache_stores_skipped += writes.skipped
    reply.cache_stores_dropped += writes.dropped
    reply.cache_stores_attributed += ledger.cache_stores_attributed
    reply.cache_stores_unattributed += ledger.cache_stores_unattributed
    reply.cache_owners_forgotten += ledger.cache_owners_forgotten
    reply.cache_stores_ambiguous += ledger.cache_stores_ambiguous
    steps = process.analyses.steps
    reply.kv_cache_layouts += steps.kv_layout is not None
    reply.kv_cache_layouts_refused += steps.kv_layouts_refused
    reply.step_text_refused += steps.text_lines_refused + steps.text_records_refused


def kernel_rows(kernels: dict[int, list[int]], names: dict[int, str]) -> list[results.RequestKernel]:
    """A request's kernels by name, most blocks first, the KV-cache writers flagged."""
    rows = [
        results.RequestKernel(name, executions, blocks, bool(KV_CACHE_KERNEL.search(name)))
        for slot, (executions, blocks) in kernels.items()
        if (name := names.get(slot)) is not None
    ]
    rows.sort(key=lambda k: (-k.blocks, -k.executions, k.kernel))
    return rows


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


def busy(step: Step, span: int, following: Step | None) -> tuple[int | None, float | None]:
    """The step's host time (to the next step's start; None for the newest) and the share of it
    its device span covers: how busy the GPU kept on this step's work (None where unmeasured)."""
    timed = step_times([step] + ([following] if following else []), [span] + ([0] if following else []))[0]
    return (timed.host_ns if following else None), timed.busy_ratio


class StepQueries:
    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def ops(self, pids: list[int], top: int = 50) -> results.Ops:
        """Op labels and the kernels each launched (eager launches, and executions of the graph
        nodes captured under the op), the `top` rows with the most of both over the targeted
        processes, and every process's totals (ops seen, launches without an op)."""
        if not 0 < top <= MAX_TOP:
            raise InvalidArgument(f"top must be within 1..{MAX_TOP}")
        rows: list[results.OpKernel] = []
        totals: list[results.OpTotals] = []
        for process in sorted(self.targets.processes(pids, live_only=False), key=process_order):
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
            names = kernel_names(process.segment, (s for _, s in held))
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
        for process in sorted(self.targets.processes(pids, live_only=False), key=process_order):
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
                    following = steps.steps.get(key + 1)  # keys are consecutive in record order
                    rows.append(self._step_row(process, steps.steps[key], label, following))
        if replay is not None and not rows:
            raise NotFound(f"no step of the targeted processes launched replay {replay} (or it is no longer kept)")
        return results.Steps(rows, totals, token)

    def requests(
        self, pids: list[int], top: int = 20, request: str = "", every: bool = False, page_token: str = ""
    ) -> results.Requests:
        """GPU time per request, from each process's ledger of settled steps (request_ledger.py
        says when a step settles and how long a request is kept): the `top` by device time, every
        process's row of `request` with its kernels, or `every` kept request a page at a time in
        the order each began (the token holds a process and a row's begin number, which only grow)."""
        if not 0 < top <= MAX_TOP:
            raise InvalidArgument(f"top must be within 1..{MAX_TOP}")
        if len(request) > MAX_REQUEST_ID or "\n" in request or "\t" in request:
            raise InvalidArgument(f"a request id is at most {MAX_REQUEST_ID} characters, without a tab or newline")
        if request and every:
            raise InvalidArgument("ask for one request or for every request, not both")
        if page_token and not every:
            raise InvalidArgument("a page token goes with every (top and one request come in one reply)")
        resume = parse_page_token(page_token, REQUEST_TOKEN)
        reply = results.Requests([], 0)
        for process in sorted(self.targets.processes(pids, live_only=False), key=process_order):
            with process.lock:
                ledger = process.analyses.requests
                totals = ledger.report()
                reply.steps_device_ns += totals.steps_device_ns
                reply.requests_let_go += totals.requests_let_go
                reply.device_ns_let_go += totals.device_ns_let_go
                reply.steps_settled += totals.steps_settled
                reply.steps_lost += totals.steps_lost
                add_cache_totals(reply, process)
                if every:
                    at = position_in(process, resume)
                    if reply.next_page_token or at is None:
                        continue
                    entries = [e for e in ledger.rows.values() if not at or e.seq >= at[0]]
                    entries.sort(key=lambda e: e.seq)
                    room = REQUESTS_PAGE - len(reply.requests)
                    if len(entries) > room:
                        reply.next_page_token = page_token_of(REQUEST_TOKEN, process, entries[room].seq)
                        entries = entries[:room]
                    rows = [e.row for e in entries]
                elif request:
                    entry = ledger.rows.get(request)
                    rows = [entry.row] if entry else []
                else:
                    rows = heapq.nlargest(top, (e.row for e in ledger.rows.values()), key=lambda r: r.device_ns)
                # copied under the lock: the drain folds steps into these rows
                made = [request_row(process.pid, row) for row in rows]
                if made and request:
                    made[0].cache_slot_ranges = slot_ranges(rows[0].cache_slots)
                # over the steps its row has settled (an engine's newest step settles when the next
                # begins or it goes idle), so that kernel_steps never counts a step `steps` does not
                settled = (s for key, s in process.analyses.steps.steps.items() if key < ledger.next_key)
                kernels, covered = request_kernels(settled, request) if made and request else ({}, 0)
            if made and request:
                names = kernel_names(process.segment, kernels)
                made[0].kernels = kernel_rows(kernels, names)
                made[0].kernel_steps = covered
            reply.requests.extend(made)
        if request and not reply.requests:
            raise NotFound(f"no kept request of the targeted processes is {request!r}")
        if not every:
            reply.requests.sort(key=lambda row: (-row.device_ns, row.pid, row.request))
            reply.requests = reply.requests if request else reply.requests[:top]
        return reply

    @staticmethod
    def request_histogram_counts(process: ObservedProcess) -> dict[str, float]:
        """The process's device time per request and busy ratio per step histograms, as the flat
        counters metrics carry per identity (request_ledger.RequestLedger.histogram_counts)."""
        with process.lock:
            return process.analyses.requests.histogram_counts()

    @staticmethod
    def _step_row(process: ObservedProcess, step: Step, label: str, following: Step | None = None) -> results.Step:
        summaries = [
            process.analyses.graph_join.replay_summary(instance, number) for _, number, instance in step.replays
        ]
        span = step_span(step, summaries)  # as the request ledger's: 0 unless every replay is known
        replays = []
        for (graph_exec, number, _), summary in zip(step.replays, summaries, strict=True):
            shown = dict(summary or {}, graph_exec=graph_exec, replay=number)
            if "mode" in shown:
                shown["mode"] = MODE_NAMES.get(shown["mode"], "unknown")
            replays.append(results.StepReplay(**shown))
        host_ns, ratio = busy(step, span, following)
        busy_ns = (
            device_busy([(r.device_busy_ns, r.device_start_ns, r.device_end_ns) for r in replays])
            if replays_known(step, summaries)
            else None
        )
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
            host_step_ns=host_ns,
            busy_ratio=ratio,
            device_busy_ns=busy_ns,
            flops=step.flops or None,
            device_flops_per_s=per_second(step.flops, span),
            host_flops_per_s=per_second(step.flops, host_ns or 0),
        )
