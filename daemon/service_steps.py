"""What the served framework did, as its plugin recorded it: engine steps and the replays each
launched (ListSteps), framework ops and the kernels each launched (ListOps)."""

from __future__ import annotations

import dataclasses

from gpuobs.segment import MODE_NAMES

from . import results
from .errors import InvalidArgument, NotFound
from .graph_exec import DeviceTime
from .paging import STEP_TOKEN, page_token_of, parse_page_token, position_in, process_order
from .registry import ObservedProcess
from .request_times import request_times, step_times
from .service_targets import MAX_TOP, Targets
from .step_attribution import Step, StepAttribution

MAX_REQUEST_ID = 1024  # longer than any id vLLM makes
STEPS_PAGE = 256  # steps per ListSteps reply (a step of 256 requests carries their ids)


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


def busy(step: Step, span: int, following: Step | None) -> tuple[int, float]:
    """The step's host time (to the next step's start) and the share of it its device span
    covers: how busy the GPU kept on this step's work (request_times.StepTime's ratio)."""
    timed = step_times([step] + ([following] if following else []), [span] + ([0] if following else []))[0]
    return timed.host_ns, timed.busy_ratio or 0.0


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

    def requests(self, pids: list[int], top: int = 20, request: str = "") -> results.Requests:
        """GPU time per request over each process's kept steps (request_times says the model); the
        `top` by device time, or every process's row of `request`."""
        if not 0 < top <= MAX_TOP:
            raise InvalidArgument(f"top must be within 1..{MAX_TOP}")
        if len(request) > MAX_REQUEST_ID or "\n" in request or "\t" in request:
            raise InvalidArgument(f"a request id is at most {MAX_REQUEST_ID} characters, without a tab or newline")
        rows: list[results.RequestTime] = []
        split_ns = 0
        for process in sorted(self.targets.processes(pids, live_only=False), key=process_order):
            with process.lock:
                kept = list(process.analyses.steps.steps.values())
                spans = [self._step_row(process, step, "").device_span_ns for step in kept]
            timed = step_times(kept, spans)
            split_ns += sum(t.device_ns for t in timed if t.split)
            for row in request_times(timed).values():
                if not request or row.request == request:
                    rows.append(results.RequestTime(process.pid, **dataclasses.asdict(row)))
        if request and not rows:
            raise NotFound(f"no kept step of the targeted processes scheduled request {request!r}")
        rows.sort(key=lambda row: (-row.device_ns, row.pid, row.request))
        return results.Requests(rows if request else rows[:top], split_ns)

    @staticmethod
    def _step_row(process: ObservedProcess, step: Step, label: str, following: Step | None = None) -> results.Step:
        replays = []
        for graph_exec, number, instance in step.replays:
            summary = process.analyses.graph_join.replay_summary(instance, number) or {}
            if "mode" in summary:
                summary["mode"] = MODE_NAMES.get(summary["mode"], "unknown")
            replays.append(results.StepReplay(graph_exec=graph_exec, replay=number, **summary))
        timed = [r for r in replays if r.device_start_ns]
        span = max(r.device_end_ns for r in timed) - min(r.device_start_ns for r in timed) if timed else 0
        host_ns, ratio = busy(step, span, following)
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
        )
