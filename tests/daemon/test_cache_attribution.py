"""KV-cache stores given to requests (request_ledger + cache_writes), hand-fed: steps settle in
order, so a block handed to another request later never takes an earlier step's stores, even
when those stores are read after the later step's text; a step cut short or lost forgets the
owners instead of guessing; every bound is counted."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpuobs import step_text
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.cache_writes import CacheWrites, slots_of
from gpuobs.daemon.request_ledger import RequestLedger
from gpuobs.daemon.step_attribution import StepAttribution
from gpuobs.segment import ACCESS_WRITE, EVENT_KINDS, STEP_TEXT_DTYPE
from gpuobs.step_text import KvCacheLayout
from gpuobs_testing.records import events, step_records

WRITER, OTHER = 3, 4  # kernel slots: the cache write, and a kernel that is not one
NODE_GRID, EAGER_GRID = 0x51, 0x900  # a graph node's grid id, and an eager launch's
NAMES = {WRITER: "void vllm::reshape_and_cache_flash_kernel<bf16>(...)", OTHER: "void at::fill_kernel(...)"}
# 2 layers of 32 blocks of 4 slots; a slot's key is 16 bytes (8 two-byte elements)
LAYOUT = KvCacheLayout(4, 2, (32, 2, 4, 8), (64, 32, 8, 1), 0, 2, (0x10000, 0x20000))


def address(slot: int, layer: int = 0) -> int:
    return LAYOUT.bases[layer] + 2 * ((slot // 4) * 64 + (slot % 4) * 8)


class Engine:
    """A StepAttribution, CacheWrites and RequestLedger wired as the registry wires them."""

    def __init__(self) -> None:
        self.steps = StepAttribution()
        self.nodes = np.array([NODE_GRID], dtype=np.uint64)  # the graph join's node grid ids
        self.cache = CacheWrites(
            lambda slots: {s: NAMES[s] for s in slots if s in NAMES},
            lambda: self.steps.kv_layout,
            node_grid_ids=lambda: self.nodes,
        )
        self.ledger = RequestLedger(self.steps, lambda instance, replay: None, clock_ns=lambda: 0, cache=self.cache)
        self.step = 0

    def begin(self, text: bytes | None, *, cut_short: bool = False, replays: list[int] | None = None) -> int:
        """A step and its replays (default one, numbered as the step); returns the last."""
        self.step += 1
        self.steps.on_launches(step_records(self.step, text, cut_short=cut_short))
        numbers = [self.step] if replays is None else replays
        step = self.steps.steps[self.step - 1]
        step.replays = [(0x70, number, 1) for number in numbers]
        step.replays_launched = len(numbers)
        return numbers[-1] if numbers else 0

    def store(
        self, replay: int, slots: list[int], *, slot: int = WRITER, layer: int = 0, grid_id: int = NODE_GRID
    ) -> None:
        """Stores of a cache-write graph node (or with another grid id, a kernel outside a graph)."""
        rows = events(
            "memory_access",
            len(slots),
            address=np.array([address(s, layer) for s in slots], dtype=np.uint64),
            replay=replay,
            kernel_slot=slot,
            flags=ACCESS_WRITE,
            grid_id=grid_id,
        )
        counts = np.bincount(rows["kind"], minlength=len(EVENT_KINDS) + 1)
        self.cache.on_events(rows, counts)

    def settle(self) -> None:
        self.ledger.settle(ALL_REPLAYS)

    def slots(self, request: str) -> set[int]:
        return self.ledger.times[request].cache_slots


def test_stores_go_to_the_request_whose_block_holds_the_slot_in_that_step() -> None:
    engine = Engine()
    one = engine.begin(step_text.encode([("a", 3), ("b", 2)], {"a": [5], "b": [6]}, LAYOUT))
    engine.store(one, [20, 21, 22, 24, 25], layer=0)
    engine.store(one, [20, 21, 22, 24, 25], layer=1)  # every layer writes the same slots
    engine.store(one, [28], layer=0)  # block 7: nobody's
    engine.store(one, [20], slot=OTHER)  # not a cache writer: not read at all
    two = engine.begin(None)  # same requests, no new blocks
    engine.store(two, [23, 26])
    engine.settle()
    assert (engine.slots("a"), engine.slots("b")) == ({20, 21, 22, 23}, {24, 25, 26})
    assert (engine.ledger.times["a"].cache_stores, engine.ledger.times["b"].cache_stores) == (7, 5)
    assert (engine.ledger.times["a"].cache_steps, engine.ledger.times["b"].cache_steps) == (2, 2)
    totals = engine.ledger.report()
    assert (totals.cache_stores_attributed, totals.cache_stores_unattributed) == (12, 1)
    assert engine.cache.report().stores == 13


def test_a_block_handed_to_another_request_later_keeps_its_earlier_stores() -> None:
    """Step 2's stores are read after step 3's text handed block 5 to b: settling in step order,
    they still go to a."""
    engine = Engine()
    one = engine.begin(step_text.encode([("a", 2)], {"a": [5]}, LAYOUT))
    two = engine.begin(step_text.encode([("a", 1)]))
    three = engine.begin(step_text.encode([("b", 1)], {"b": [5]}))
    engine.store(one, [20, 21])
    engine.store(three, [20])
    engine.store(two, [22])
    engine.settle()
    assert (engine.slots("a"), engine.slots("b")) == ({20, 21, 22}, {20})


def test_a_same_step_hands_out_blocks_without_repeating_its_requests() -> None:
    engine = Engine()
    engine.begin(step_text.encode([("a", 4), ("b", 1)], {"a": [1], "b": [2]}, LAYOUT))
    two = engine.begin(step_text.encode(None, {"a": [9]}))
    engine.store(two, [36, 9])
    engine.settle()
    step = engine.steps.steps[1]
    assert (step.request_ids, step.request_tokens, step.ids_complete) == (["a", "b"], [4, 1], True)
    assert (engine.slots("a"), engine.slots("b")) == ({36}, {9})


def test_a_step_cut_short_forgets_the_owners_and_gives_no_store_to_a_guess() -> None:
    engine = Engine()
    one = engine.begin(step_text.encode([("a", 1)], {"a": [5]}, LAYOUT))
    engine.store(one, [20])
    batch = step_text.encode([(f"r{i}", 1) for i in range(6)], {"a": [6], "r0": [5]})
    two = engine.begin(batch, cut_short=True)  # r0 took block 5, but that text was lost
    engine.store(two, [20, 24])
    three = engine.begin(step_text.encode([("a", 1), ("r0", 1)], {"a": [8]}))
    engine.store(three, [32, 21])  # block 8 learned again; block 5's owner is still unknown
    engine.settle()
    assert engine.slots("a") == {20, 32}
    totals = engine.ledger.report()
    assert (totals.cache_stores_unattributed, totals.cache_owners_forgotten) == (3, 1)


def test_a_layout_that_is_not_sound_is_counted_and_the_one_before_stays() -> None:
    engine = Engine()
    engine.begin(step_text.encode([("a", 1)], {"a": [5]}, LAYOUT))
    bad = (
        step_text.encode([("a", 1)])
        + b"\n\x1fkv-cache "
        + LAYOUT.to_json().replace('"block_size":4', '"block_size":0').encode()
    )
    engine.begin(bad)
    assert (engine.steps.kv_layout, engine.steps.kv_layouts_refused) == (LAYOUT, 1)


def test_stores_before_any_layout_or_outside_it_are_counted_apart() -> None:
    engine = Engine()
    one = engine.begin(step_text.encode([("a", 1)], {"a": [5]}))  # no layout yet
    engine.store(one, [20])
    two = engine.begin(step_text.encode([("a", 1)], kv_cache=LAYOUT))
    rows = events("memory_access", 1, address=0x90000, replay=two, kernel_slot=WRITER, flags=ACCESS_WRITE)
    engine.cache.on_events(rows, np.bincount(rows["kind"], minlength=len(EVENT_KINDS) + 1))
    engine.settle()
    report = engine.cache.report()
    assert (report.stores, report.before_layout, report.outside) == (2, 1, 1) and not engine.slots("a")


def test_the_bounds_hold_and_are_counted() -> None:
    engine = Engine()
    engine.cache.MAX_REPLAYS = 2
    engine.ledger.MAX_CACHE_SLOTS = 3
    one = engine.begin(step_text.encode([("a", 8)], {"a": [0, 1]}, LAYOUT))
    for replay in (100, 101, 102):  # replays no step launched: the oldest is let go, counted
        engine.store(replay, [0])
    assert engine.cache.report().dropped == 1 and len(engine.cache.by_replay) == 2
    engine.cache.MAX_REPLAYS = 8
    engine.cache.MAX_SLOTS_HELD = engine.cache.held + 2  # room for two more pairs over all replays
    engine.store(103, [0, 1, 2])
    assert engine.cache.report().dropped == 4 and engine.cache.held <= engine.cache.MAX_SLOTS_HELD
    engine.cache.MAX_SLOTS_HELD = 1 << 20
    engine.store(one, list(range(8)))
    engine.settle()
    row = engine.ledger.times["a"]
    assert (len(row.cache_slots), row.cache_slots_complete, row.cache_stores) == (3, False, 8)
    assert engine.ledger.cache_slots_kept == 3


def test_a_step_run_without_a_graph_never_gives_its_stores_to_the_step_before() -> None:
    """vLLM runs a batch past its largest graph eagerly: its cache kernel stores under the replay
    last begun, the step before's. Step 1 (a graph): x, finishing, holds block 5. Step 2 (no
    graph): block 5 is y's now, which writes slots 20..23. The step-1 node's own store stays x's;
    the stores of kernels outside a graph under replay 1 are ambiguous, given to no one."""
    engine = Engine()
    one = engine.begin(step_text.encode([("x", 1), ("a", 1)], {"x": [5], "a": [6]}, LAYOUT))
    engine.store(one, [20])  # x's decode token, a node of replay 1
    engine.begin(step_text.encode([("y", 4), ("a", 1)], {"y": [5]}), replays=[])
    engine.store(one, [20, 21, 22, 23, 25], grid_id=EAGER_GRID)  # y's prefill and a's decode
    three = engine.begin(step_text.encode([("y", 1), ("a", 1)], {"y": [9]}))
    engine.store(three, [37], grid_id=EAGER_GRID)  # a piecewise step's eager attention: its own
    engine.settle()
    assert (engine.slots("x"), engine.slots("y")) == ({20}, {37})
    totals = engine.ledger.report()
    assert (totals.cache_stores_ambiguous, totals.cache_stores_attributed) == (5, 2)


def test_a_block_list_that_is_refused_forgets_the_owners() -> None:
    """b took block 5 in a line whose list cannot be read: the block must not stay a's."""
    engine = Engine()
    engine.begin(step_text.encode([("a", 1)], {"a": [5]}, LAYOUT))
    two = engine.begin(b"a\t1\nb\t1\t5,x")
    engine.store(two, [21])
    engine.settle()
    assert engine.steps.text_lines_refused == 1 and engine.slots("a") == set()
    assert engine.ledger.report().cache_stores_unattributed == 1


def test_every_store_read_is_in_one_count_once_the_process_is_gone() -> None:
    """Replays past those a step names, stores before the layout, outside it, and given out:
    read = before the layout + outside + skipped + dropped + attributed + unattributed + ambiguous."""
    engine = Engine()
    engine.store(0, [20])  # before any step: no layout yet
    first = engine.begin(step_text.encode([("a", 1)], {"a": [5]}, LAYOUT), replays=[])
    step = engine.steps.steps[0]
    for replay in range(1, 2 * engine.steps.MAX_REPLAYS_PER_STEP):
        if len(step.replays) < engine.steps.MAX_REPLAYS_PER_STEP:
            step.replays.append((0x70, replay, 1))
        step.replays_launched += 1
        engine.store(replay, [20])
    assert first == 0
    rows = events("memory_access", 1, address=0x90000, replay=3, kernel_slot=WRITER, flags=ACCESS_WRITE)
    engine.cache.on_events(rows, np.bincount(rows["kind"], minlength=len(EVENT_KINDS) + 1))
    engine.store(4000, [20])  # a replay no step launched
    engine.settle()
    writes, ledger = engine.cache.report(), engine.ledger.report()
    counted = (
        writes.before_layout
        + writes.outside
        + writes.skipped
        + writes.dropped
        + ledger.cache_stores_attributed
        + ledger.cache_stores_unattributed
        + ledger.cache_stores_ambiguous
    )
    assert counted == writes.stores and not engine.cache.by_replay and engine.cache.held == 0
    assert ledger.cache_stores_attributed == engine.steps.MAX_REPLAYS_PER_STEP


@pytest.mark.parametrize(
    "layout",
    [
        # a layer near the top of the address space, a stride past int64, a huge extent
        dict(bases=((1 << 64) - 0x100,)),
        dict(strides=(1 << 63, 32, 8, 1)),
        dict(shape=(1 << 47, 2, 4, 8)),
    ],
)
def test_a_layout_that_would_overflow_the_arithmetic_is_refused(layout: dict) -> None:
    with pytest.raises(ValueError, match="KV-cache layout"):
        dataclasses.replace(LAYOUT, **layout)


def test_interleaved_layers_cost_a_bounded_pass_and_tensors_of_their_own_one() -> None:
    """256 layers of tensors of their own map a batch in one pass; the same in one interleaved
    tensor (each layer's view strided by the layers) one pass a layer, each still exact."""
    row = 8
    own = KvCacheLayout(4, 2, (32, 2, 4, row), (64, 32, 8, 1), 0, 2, tuple(0x100000 + i * 4096 for i in range(256)))
    stride = 256 * 64
    mixed = KvCacheLayout(
        4, 2, (32, 2, 4, row), (stride, 32, 8, 1), 0, 2, tuple(0x100000 + i * 128 for i in range(256))
    )
    addresses = np.array([own.bases[200] + 2 * (7 * 64 + 3 * 8), mixed.bases[200] + 2 * (7 * stride + 3 * 8)])
    assert slots_of(own, addresses[:1].astype(np.uint64)).tolist() == [7 * 4 + 3]
    assert slots_of(mixed, addresses[1:].astype(np.uint64)).tolist() == [7 * 4 + 3]


def test_a_block_id_or_count_too_long_is_refused_not_raised() -> None:
    steps = StepAttribution()
    steps.on_launches(step_records(1, b"a\t1\t" + b"9" * 5000 + b"\nb\t" + b"9" * 5000))
    (step,) = steps.steps.values()
    assert (steps.text_lines_refused, step.request_ids, step.request_tokens, step.new_blocks) == (1, ["a", "b"], [], {})


def test_a_text_record_past_its_step_or_after_the_text_came_whole_is_refused() -> None:
    """An offset or length a writer never makes would have the daemon grow the text to 4 GB; a
    record after the text came whole would read it again (and drop a `same` step's ids)."""
    steps = StepAttribution()
    steps.on_launches(step_records(1, b"a\t2"))
    steps.on_launches(step_records(2, step_text.encode(None, {"a": [4]})))
    rows = step_records(2, b"x" * 56)
    rows[1:2].view(STEP_TEXT_DTYPE)["offset"] = 0xFFFFFF00
    steps.on_launches(rows[1:])
    again = step_records(2, b"zz")[1:]
    steps.on_launches(again)
    second = steps.steps[1]
    assert (second.request_ids, second.ids_complete, len(second.text)) == (["a"], True, len(second.text))
    assert len(second.text) < 100 and steps.text_records_refused == 2


def test_a_step_settled_idle_keeps_no_store_outside_a_graph_under_its_last_replay() -> None:
    """The engine went idle after step 1; it may be waking with a step run without a graph whose
    record the drain has not read yet, while that step's stores (under replay 1) are read: the
    stores outside a graph under step 1's last replay are ambiguous, its node's own are its."""
    engine = Engine()
    now = [0]
    engine.ledger.clock_ns = lambda: now[0]
    one = engine.begin(step_text.encode([("x", 1)], {"x": [5]}, LAYOUT))
    engine.store(one, [20])  # x's own token, a node
    engine.store(one, [21, 22, 23], grid_id=EAGER_GRID)  # a next step's prefill into reused block 5
    now[0] = engine.steps.steps[0].host_time_ns + RequestLedger.IDLE_NS
    engine.ledger.settle(2)
    assert engine.slots("x") == {20} and engine.ledger.report().cache_stores_ambiguous == 3
