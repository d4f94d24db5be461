"""GPU time per request (#33) on hand-made steps: the split of a step's device time by tokens
is exact and conserved, the plugin's step text reads back with each request's tokens, and the
per-request rows add up to the steps'."""

from __future__ import annotations

import random

import pytest
from gpuobs.daemon.graph_exec import covered_ns
from gpuobs.daemon.request_split import split_by_tokens
from gpuobs.daemon.request_times import RequestTime, StepTime, device_busy, fold_step, step_times
from gpuobs.daemon.step_attribution import Step, StepAttribution
from gpuobs_testing.records import step_records


def test_a_split_is_proportional_and_adds_up_exactly() -> None:
    assert split_by_tokens(100, [1, 3]) == [25, 75]
    assert split_by_tokens(10, [1, 1, 1]) == [4, 3, 3]  # the remainder to the earliest of equals
    assert split_by_tokens(11, [1, 2]) == [4, 7]  # 3.67 and 7.33: the larger remainder rounds up
    assert split_by_tokens(7, [0, 0]) == [4, 3]  # no tokens: evenly, still conserved
    rng = random.Random(33)
    for _ in range(500):
        tokens = [rng.randrange(0, 9000) for _ in range(rng.randrange(1, 40))]
        total = rng.randrange(0, 10**12)
        parts = split_by_tokens(total, tokens)
        assert sum(parts) == total
        whole = sum(tokens)
        if whole:
            assert all(abs(part * whole - total * count) < whole for part, count in zip(parts, tokens, strict=True))


@pytest.mark.parametrize(("total", "tokens"), [(-1, [1]), (5, [1, -2]), (5, [])])
def test_a_split_that_cannot_be_made_is_refused(total: int, tokens: list[int]) -> None:
    with pytest.raises(ValueError):
        split_by_tokens(total, tokens)


def test_step_attribution_keeps_each_requests_tokens_across_same_request_steps() -> None:
    steps = StepAttribution()
    long_id = "cmpl-" + "x" * 70  # the text spans records
    steps.on_launches(step_records(1, f"{long_id}\t120\nb\t1".encode()))
    steps.on_launches(step_records(2, b"a\t1\nb\t1"))
    steps.on_launches(step_records(3, None))
    kept = list(steps.steps.values())
    assert [(s.request_ids, s.request_tokens) for s in kept] == [
        ([long_id, "b"], [120, 1]),
        (["a", "b"], [1, 1]),
        (["a", "b"], [1, 1]),
    ]


def request_times(steps: list[StepTime]) -> dict[str, RequestTime]:
    """One row per request over `steps`, folded as the request ledger folds settled steps."""
    rows: dict[str, RequestTime] = {}
    for timed in steps:
        fold_step(rows, timed)
    return rows


def step(number: int, ids: dict[str, int], launches: int = 4, blocks: int = 100) -> Step:
    made = Step(number, number * 1_000, 1, len(ids), sum(ids.values()), 0, False)
    made.request_ids, made.request_tokens = list(ids), list(ids.values())
    made.kernels = {0: [launches, blocks]}  # its launches and blocks are the per-kernel counts summed
    return made


def test_requests_device_time_adds_up_to_the_steps() -> None:
    kept = [step(1, {"a": 7, "b": 1}), step(2, {"a": 1, "b": 1, "c": 5}), step(3, {"c": 1}), step(4, {"c": 1})]
    spans = [801, 333, 0, 500]  # step 3 unmeasured
    timed = step_times(kept, spans)
    assert [t.host_ns for t in timed] == [1_000, 1_000, 1_000, 0]  # the newest's end is not known
    assert [t.busy_ratio for t in timed] == [0.801, 0.333, None, None]
    rows = request_times(timed)
    assert sum(r.device_ns for r in rows.values()) == sum(spans)
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.device_ns, b.device_ns, c.device_ns) == (701 + 48, 100 + 47, 238 + 500)
    assert (a.tokens, b.tokens, c.tokens) == (8, 2, 7)
    assert (c.steps, c.steps_untimed, c.first_step, c.last_step) == (3, 1, 2, 4)
    assert (a.kernel_launches, a.blocks) == (8, 200)  # the steps it took part in, whole


def test_steps_without_tokens_per_request_give_no_device_time() -> None:
    older = step(1, {"a": 1, "b": 1})
    older.request_tokens = []  # a producer before layout 7
    rows = request_times(step_times([older], [900]))
    assert [(r.device_ns, r.steps_untimed) for r in rows.values()] == [(0, 1), (0, 1)]
    with pytest.raises(ValueError):
        step_times([older], [])


@pytest.mark.parametrize(
    ("intervals", "covered"),
    [
        ([], 0),
        ([(10, 20)], 10),
        ([(10, 20), (30, 45)], 25),  # a gap counts for nothing
        ([(30, 45), (10, 20)], 25),  # in any order
        ([(10, 40), (20, 30)], 30),  # nested: once
        ([(10, 30), (20, 50), (60, 61)], 41),  # overlapping, then apart
        ([(10, 20), (20, 30)], 20),  # touching
    ],
)
def test_covered_time_counts_overlaps_once_and_gaps_not(intervals: list[tuple[int, int]], covered: int) -> None:
    assert covered_ns(intervals) == covered


def test_a_steps_busy_time_is_its_replays_only_where_each_is_known_and_none_overlap() -> None:
    assert device_busy([(40, 100, 200), (30, 300, 350)]) == 70
    assert device_busy([(40, 100, 200), (None, 300, 350)]) is None  # one replay not whole
    assert device_busy([]) is None  # no replay: nothing measured
    assert device_busy([(40, 100, 200), (30, 150, 250)]) is None  # overlapping: the sum would count twice
