"""KV-cache stores given to requests (request_ledger + cache_writes), hand-fed: steps settle in
order, so a block handed to another request later never takes an earlier step's stores, even
when those stores are read after the later step's text; a step cut short or lost forgets the
owners instead of guessing; every bound is counted."""

from __future__ import annotations

import numpy as np
from gpuobs import step_text
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.cache_writes import CacheWrites
from gpuobs.daemon.request_ledger import RequestLedger
from gpuobs.daemon.step_attribution import StepAttribution
from gpuobs.segment import ACCESS_WRITE, EVENT_KINDS
from gpuobs.step_text import KvCacheLayout
from gpuobs_testing.records import events, step_records

WRITER, OTHER = 3, 4  # kernel slots: the cache write, and a kernel that is not one
NAMES = {WRITER: "void vllm::reshape_and_cache_flash_kernel<bf16>(...)", OTHER: "void at::fill_kernel(...)"}
# 2 layers of 32 blocks of 4 slots; a slot's key is 16 bytes (8 two-byte elements)
LAYOUT = KvCacheLayout(4, 2, (32, 2, 4, 8), (64, 32, 8, 1), 0, 2, (0x10000, 0x20000))


def address(slot: int, layer: int = 0) -> int:
    return LAYOUT.bases[layer] + 2 * ((slot // 4) * 64 + (slot % 4) * 8)


class Engine:
    """A StepAttribution, CacheWrites and RequestLedger wired as the registry wires them."""

    def __init__(self) -> None:
        self.steps = StepAttribution()
        self.cache = CacheWrites(lambda slots: {s: NAMES[s] for s in slots if s in NAMES}, lambda: self.steps.kv_layout)
        self.ledger = RequestLedger(self.steps, lambda instance, replay: None, clock_ns=lambda: 0, cache=self.cache)
        self.step = 0

    def begin(self, text: bytes | None, *, cut_short: bool = False) -> int:
        """A step and its one replay (numbered as the step); returns the replay."""
        self.step += 1
        self.steps.on_launches(step_records(self.step, text, cut_short=cut_short))
        self.steps.steps[self.step - 1].replays = [(0x70, self.step, 1)]
        return self.step

    def store(self, replay: int, slots: list[int], *, slot: int = WRITER, layer: int = 0) -> None:
        rows = events(
            "memory_access",
            len(slots),
            address=np.array([address(s, layer) for s in slots], dtype=np.uint64),
            replay=replay,
            kernel_slot=slot,
            flags=ACCESS_WRITE,
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
    engine.store(one, list(range(8)))
    engine.settle()
    row = engine.ledger.times["a"]
    assert (len(row.cache_slots), row.cache_slots_complete, row.cache_stores) == (3, False, 8)
    assert engine.ledger.cache_slots_kept == 3
