"""Step attribution: per process, the serving engine's steps (records the vLLM plugin writes through the injector)
and the launches each step made: which step, and which requests, a graph replay belongs to.

A step record is written by the engine thread before it launches the step's work, into the same
ring as the launch records, so a launch belongs to the last step that began before it (host
clock). Launches before the first step (start-up, warm-up, graph capture) belong to none and are
counted apart. Request ids, each with its scheduled tokens (layout 7), travel only when they
changed from the step before; so do the KV-cache blocks that became a request's, and now and then
the KV cache's layout (gpuobs.step_text), which the request ledger reads to attribute cache slots.

The injector makes a host record per graph replay but none per eager launch (unless its launch
trace is on): a step's kernel launches are its replays' node executions (the graph join knows
each exec's nodes) plus the eager launch records there are.

Memory is bounded: the last KEEP_STEPS steps are kept in detail, with the replays they launched;
totals count every step.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import numpy as np
from gpuobs import step_text
from gpuobs.segment import LAUNCH_KINDS, STEP_DTYPE, STEP_SAME_REQUESTS, STEP_TEXT_DTYPE

from .analysis import Analysis
from .graph_exec import NO_REPLAY, ReplayShape

STEP = LAUNCH_KINDS["step"]
STEP_TEXT = LAUNCH_KINDS["step_text"]
TEXT_RECORD_BYTES = STEP_TEXT_DTYPE["text"].itemsize  # text a StepText record carries at most
GRAPH_LAUNCH = LAUNCH_KINDS["graph_launch"]
EAGER = LAUNCH_KINDS["eager"]
KERNEL_LAUNCHES = (EAGER, LAUNCH_KINDS["graph_node"])
# what one replay of a graph exec runs, as far as the graph join knows
ReplayShapeOf = Callable[[int], ReplayShape]


@dataclasses.dataclass
class Step:
    step: int
    host_time_ns: int
    thread: int
    requests: int
    tokens: int
    text_bytes: int
    same_requests: bool
    flops: int = 0  # the engine's FLOP estimate per GPU (vLLM --enable-mfu-metrics); 0: none
    text: bytearray = dataclasses.field(default_factory=bytearray)
    text_received: int = 0
    request_ids: list[str] = dataclasses.field(default_factory=list)
    request_tokens: list[int] = dataclasses.field(default_factory=list)  # per id; empty where unknown
    replays: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)  # (graph exec, replay, instance)
    replays_launched: int = 0  # its replays, those past MAX_REPLAYS_PER_STEP (not named in `replays`) too
    # per kernel slot: [executions, blocks] of its eager launches and replays' node executions
    kernels: dict[int, list[int]] = dataclasses.field(default_factory=dict)

    ids_known: bool = True  # false: a same-requests step after a step whose id text was cut short
    # KV-cache blocks that became each request's in this step (its text's block lists)
    new_blocks: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    # the ids, tokens and whether known of the step before, for a text that says `same`
    prior: tuple[list[str], list[int], bool] | None = None
    text_refused: int = 0  # lines of its text that were neither a request nor a directive

    @property
    def text_whole(self) -> bool:
        """Whether its text, if it has one, arrived whole."""
        return self.text_received == self.text_bytes

    @property
    def blocks_complete(self) -> bool:
        """Whether new_blocks is every block it handed out: its text arrived whole and every line
        of it was read."""
        return self.text_whole and not self.text_refused

    @property
    def kernel_launches(self) -> int:
        """Its eager launches and node executions: the per-kernel counts summed (one tally)."""
        return sum(executions for executions, _ in self.kernels.values())

    @property
    def blocks_expected(self) -> int:
        return sum(blocks for _, blocks in self.kernels.values())

    @property
    def ids_complete(self) -> bool:
        return self.ids_known and self.text_whole


@dataclasses.dataclass(frozen=True)
class StepTotals:
    """Engine steps of one process: step records seen, and the recorded kernel launches before
    the first of them."""

    steps: int
    launches_before_steps: int


class StepAttribution(Analysis):
    """`replay_shape`: what one replay of a graph exec runs (the graph join's, which sees each
    launch batch first)."""

    KEEP_STEPS = 4096
    MAX_REPLAYS_PER_STEP = 128  # a piecewise graph of a model of up to 127 layers

    def __init__(self, replay_shape: ReplayShapeOf = lambda graph_exec: NO_REPLAY) -> None:
        self.replay_shape = replay_shape
        self.steps: collections.OrderedDict[int, Step] = collections.OrderedDict()  # by record order
        self.steps_seen = 0
        self.launches_before_steps = 0
        self.replay_step: dict[tuple[int, int], int] = {}  # (graph exec, replay) -> step key
        self._times = np.empty(0, dtype=np.uint64)
        self._keys: list[int] = []
        self._next_key = 0
        self._last_ids: list[str] = []
        self._last_tokens: list[int] = []
        self._last_known = True  # the last ids arrived whole (a same-requests step may repeat them)
        self.kv_layout: step_text.KvCacheLayout | None = None  # the last layout a step's text gave
        self.kv_layouts_refused = 0  # layouts that were not sound: the one before stays
        self.text_lines_refused = 0
        self.text_records_refused = 0

    def on_launches(self, rows: np.ndarray) -> None:
        """One launch ring batch, in ring order (after the graph join has seen it)."""
        if not len(rows):
            return
        kinds = rows["kind"]
        annotated = (kinds == STEP) | (kinds == STEP_TEXT)
        # steps and their text, in order (a step's text follows it)
        began = False
        for index in np.flatnonzero(annotated).tolist():
            raw = rows[index : index + 1]
            if int(kinds[index]) == STEP:
                self._begin(raw.view(STEP_DTYPE)[0])
                began = True
            else:
                self._text(raw.view(STEP_TEXT_DTYPE)[0])
        if began:  # the time index, once per batch rather than once per step
            self._keys = list(self.steps)
            self._times = np.fromiter(
                (s.host_time_ns for s in self.steps.values()), dtype=np.uint64, count=len(self.steps)
            )
        self._attribute(rows[~annotated], self.replay_shape)

    def _begin(self, record: np.void) -> None:
        same = bool(int(record["flags"]) & STEP_SAME_REQUESTS)
        step = Step(
            int(record["step"]),
            int(record["host_time_ns"]),
            int(record["thread"]),
            int(record["requests"]),
            int(record["tokens"]),
            int(record["text_bytes"]),
            same,
            int(record["flops"]),
        )
        if same and self._last_known:
            step.request_ids = list(self._last_ids)
            step.request_tokens = list(self._last_tokens)
        elif same:  # the ids it repeats never arrived whole: not those of an older step
            step.ids_known = False
        key = self._next_key
        self._next_key += 1
        self.steps[key] = step
        self.steps_seen += 1
        while len(self.steps) > self.KEEP_STEPS:
            _, old = self.steps.popitem(last=False)
            for graph_exec, replay, _ in old.replays:
                self.replay_step.pop((graph_exec, replay), None)
        if step.text_bytes == 0 and not same:
            self._last_ids, self._last_tokens, self._last_known = [], [], True
        elif step.text_bytes:
            step.prior = (self._last_ids, self._last_tokens, self._last_known)
            self._last_known = False  # until its text arrives whole

    def _text(self, record: np.void) -> None:
        step = next((s for s in reversed(self.steps.values()) if s.step == int(record["step"])), None)
        if step is None:
            return
        offset, length = int(record["offset"]), int(record["length"])
        if length > TEXT_RECORD_BYTES or offset + length > step.text_bytes or step.text_received >= step.text_bytes:
            self.text_records_refused += 1  # past its step's text, or after the text came whole
            return
        piece = bytes(record["text"])[:length].ljust(length, b"\0")
        if len(step.text) < offset + length:
            step.text.extend(b"\0" * (offset + length - len(step.text)))
        step.text[offset : offset + length] = piece
        step.text_received += length
        if step.text_whole:
            self._read_text(step)

    def _read_text(self, step: Step) -> None:
        parsed = step_text.parse(step.text.decode("utf-8", "replace"))
        if parsed.same:
            ids, tokens, known = step.prior or ([], [], False)
            step.request_ids, step.request_tokens, step.ids_known = list(ids), list(tokens), known
        else:
            step.request_ids, step.request_tokens = parsed.ids, parsed.tokens
        step.prior = None
        step.new_blocks = parsed.blocks
        step.text_refused = parsed.refused
        self.text_lines_refused += parsed.refused
        if parsed.kv_cache:
            try:
                self.kv_layout = step_text.KvCacheLayout.from_json(parsed.kv_cache)
            except ValueError:
                self.kv_layouts_refused += 1
        self._last_ids, self._last_tokens, self._last_known = step.request_ids, step.request_tokens, step.ids_known

    def _attribute(self, rows: np.ndarray, replay_shape: ReplayShapeOf) -> None:
        """Each launch to the last step that began before it: eager launch records one by one,
        a graph replay with all its nodes (node records are not counted apart)."""
        kinds = rows["kind"]
        relevant = rows[(kinds == EAGER) | (kinds == GRAPH_LAUNCH)]
        if not len(relevant):
            return
        is_kernel = relevant["kind"] == EAGER
        shapes = {
            graph_exec: replay_shape(graph_exec)
            for graph_exec in np.unique(relevant["graph_exec"][~is_kernel]).tolist()
        }
        launches = np.ones(len(relevant), dtype=np.uint64)
        blocks = relevant["grid_x"].astype(np.uint64) * relevant["grid_y"] * relevant["grid_z"]
        for index in np.flatnonzero(~is_kernel).tolist():
            shape = shapes[int(relevant["graph_exec"][index])]
            launches[index], blocks[index] = shape.nodes, shape.blocks
        if not len(self._times):
            self.launches_before_steps += int(launches.sum())
            return
        positions = np.searchsorted(self._times, relevant["host_time_ns"], side="right") - 1
        before = positions < 0
        self.launches_before_steps += int(launches[before].sum())
        kept = ~before
        for index in np.flatnonzero(kept & is_kernel).tolist():
            counts = self.steps[self._keys[int(positions[index])]].kernels.setdefault(
                int(relevant["kernel_slot"][index]), [0, 0]
            )
            counts[0] += 1
            counts[1] += int(blocks[index])
        for index in np.flatnonzero(kept & ~is_kernel).tolist():
            step_key = self._keys[int(positions[index])]
            step = self.steps[step_key]
            graph_exec = int(relevant["graph_exec"][index])
            replay = (graph_exec, int(relevant["replay"][index]))
            for slot, (executions, node_blocks) in shapes[graph_exec].kernels.items():
                counts = step.kernels.setdefault(slot, [0, 0])
                counts[0] += executions
                counts[1] += node_blocks
            step.replays_launched += 1
            if len(step.replays) < self.MAX_REPLAYS_PER_STEP:  # the rest: counted in the step, not named
                step.replays.append((*replay, shapes[graph_exec].instance))
                self.replay_step[replay] = step_key

    def step_of_replay(self, replay: int) -> Step | None:
        """The step that launched this replay number (any graph exec of the process)."""
        for (_, number), key in self.replay_step.items():
            if number == replay:
                return self.steps.get(key)
        return None

    def report(self) -> StepTotals:
        return StepTotals(self.steps_seen, self.launches_before_steps)
