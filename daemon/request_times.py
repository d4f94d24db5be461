"""GPU time per request: the kept engine steps of a process, each with its measured device span,
folded into one row per request (the ListRequests/`gpuobsctl requests` view).

Each step's device span (first block's enter to last block's exit of its replays, where block
events exist) is split among the step's requests by their scheduled tokens
(`request_split.split_by_tokens`), so over any set of steps the requests' device times add up to
the steps' exactly. A step's kernel launches and blocks are counted whole for each request that
took part in it: the request shared those kernels, it did not run a token's share of them.

Steps whose tokens per request are unknown (a producer older than layout 7) or that have no
measured span (`counter` mode records no device timestamps) add steps and host time to their
requests but no device time; they are counted so a reader sees what the figure leaves out.
Per kernel (request_kernels, over the steps still kept in detail), a request gets every execution
of the steps it took part in (it shared them) and its token share of their blocks: exact for a
kernel that runs one block per token, such as the KV-cache write (blocks = tokens x layers); a
padded graph's spare blocks are shared out the same way. request_ledger.py folds settled steps
into rows kept for a window and a count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from .request_split import split_by_tokens
from .step_attribution import Step


@dataclasses.dataclass
class RequestTime:
    request: str
    steps: int = 0
    tokens: int = 0
    device_ns: int = 0
    steps_untimed: int = 0  # steps it took part in with no device span or no tokens per request
    kernel_launches: int = 0  # of the steps it took part in, whole
    blocks: int = 0
    first_step: int = 0
    last_step: int = 0
    last_host_ns: int = 0  # the host time of its last step: when it was last scheduled
    # KV-cache stores (as the cache kernel's memory events sampled them) to slots of blocks that
    # were its in the step that stored, the steps with any, and the slots (every one while the
    # ledger's budget of kept slots lasts; cache_slots_complete says whether it lasted)
    cache_stores: int = 0
    cache_steps: int = 0
    cache_slots: set[int] = dataclasses.field(default_factory=set)
    cache_slots_complete: bool = True


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A step with what was measured of it: its device span (0 where unmeasured) and its host
    time, up to the next step's start (0 for the newest, whose end is not known yet)."""

    step: Step
    device_ns: int
    host_ns: int

    @property
    def split(self) -> bool:
        """Whether its device time went to its requests (measured, and tokens per request known)."""
        ids = self.step.request_ids
        return bool(self.device_ns) and bool(ids) and len(self.step.request_tokens) == len(ids)

    @property
    def busy_ratio(self) -> float | None:
        """Device span over host step time: how much of the step the GPU was working on it."""
        return self.device_ns / self.host_ns if self.device_ns and self.host_ns else None


def device_span(replays: Iterable[tuple[int, int]]) -> int:
    """The first start to the last end of a step's replays, (start, end) on the device clock; the
    replays without events (start 0) leave it, and a step with none has no span (0)."""
    timed = [(start, end) for start, end in replays if start]
    return max(end for _, end in timed) - min(start for start, _ in timed) if timed else 0


def replays_known(step: Step, summaries: Sequence[dict | None]) -> bool:
    """Whether every replay of the step is named and its summary (the graph join's
    replay_summary, in the order of step.replays) still kept in detail: a span or busy time over
    some of them would be short by an unknown amount."""
    return step.replays_launched <= len(step.replays) and all(summary is not None for summary in summaries)


def step_span(step: Step, summaries: Sequence[dict | None]) -> int:
    """A step's device span from its replays' summaries; 0 unless every replay is known and every
    one that ran kernels has its span (a replay without one, say an unclean replay span, would
    leave the step's span short by an unknown amount)."""
    if not replays_known(step, summaries):
        return 0
    if any(s is not None and s.get("node_executions") and not s["device_start_ns"] for s in summaries):
        return 0
    return device_span((s["device_start_ns"], s["device_end_ns"]) for s in summaries if s is not None)


def device_busy(replays: list[tuple[int | None, int, int]]) -> int | None:
    """A step's busy time from its replays' (busy, start, end): their sum, known only where every
    replay's is and they do not overlap (the engine replays a step's graphs one after another on
    its stream; were two to overlap, the sum would count some time twice, so it is not given)."""
    if not replays or any(busy is None for busy, _, _ in replays):
        return None
    ordered = sorted((start, end) for _, start, end in replays)
    if any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:], strict=False)):
        return None
    return sum(busy or 0 for busy, _, _ in replays)


def per_second(amount: int, ns: int) -> float | None:
    """`amount` over `ns` nanoseconds, per second; None where either is unknown (0)."""
    return amount * 1e9 / ns if amount and ns else None


def step_times(steps: list[Step], spans: list[int]) -> list[StepTime]:
    """Steps in record order with their spans; host time from one step's start to the next's."""
    if len(steps) != len(spans):
        raise ValueError(f"{len(steps)} steps but {len(spans)} spans")
    times = []
    for index, (step, span) in enumerate(zip(steps, spans, strict=True)):
        following = steps[index + 1].host_time_ns if index + 1 < len(steps) else 0
        host = following - step.host_time_ns if following > step.host_time_ns else 0
        times.append(StepTime(step, span, host))
    return times


def fold_step(rows: dict[str, RequestTime], timed: StepTime) -> list[RequestTime]:
    """Adds one step to its requests' rows (made where new); returns them, in the step's order.
    Its device time is split by tokens (conserved); launches and blocks of the whole step are
    counted whole for each of its requests (per kernel: request_kernels, when asked)."""
    step = timed.step
    ids = step.request_ids
    known = len(step.request_tokens) == len(ids) and bool(ids)
    parts = split_by_tokens(timed.device_ns, step.request_tokens) if timed.split else [0] * len(ids)
    touched = []
    launches, blocks = step.kernel_launches, step.blocks_expected  # summed once, not per request
    for index, request in enumerate(ids):
        row = rows.get(request)
        if row is None:
            row = rows[request] = RequestTime(request, first_step=step.step)
        touched.append(row)
        row.steps += 1
        row.last_step = step.step
        row.last_host_ns = step.host_time_ns
        row.kernel_launches += launches
        row.blocks += blocks
        if known:
            row.tokens += step.request_tokens[index]
        if timed.split:
            row.device_ns += parts[index]
        else:
            row.steps_untimed += 1
    return touched


def request_kernels(steps: Iterable[Step], request: str) -> tuple[dict[int, list[int]], int]:
    """Per kernel slot, [executions, blocks] of one request over `steps` (those kept in detail),
    and how many of its steps that covers: every execution of its steps (it shared them) and its
    token share of their blocks (exact for a kernel that runs one block per token, the KV-cache
    write: its tokens x layers). Made per query, so that settling a step costs nothing per kernel."""
    kernels: dict[int, list[int]] = {}
    covered = 0
    for step in steps:
        if request not in step.request_ids:
            continue
        index = step.request_ids.index(request)
        known = len(step.request_tokens) == len(step.request_ids)
        covered += 1
        for slot, (executions, blocks) in step.kernels.items():
            counts = kernels.setdefault(slot, [0, 0])
            counts[0] += executions
            if known:
                counts[1] += split_by_tokens(blocks, step.request_tokens)[index]
    return kernels, covered
