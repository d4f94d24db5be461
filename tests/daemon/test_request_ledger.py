"""The request ledger on hand-made steps: when a step settles, that device time is conserved
through rows kept and let go, that the retention holds by count and by age, and what the two
histograms observe."""

from __future__ import annotations

import pytest
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.request_ledger import REQUEST_DEVICE_EDGES_S, RequestLedger, RequestRetention
from gpuobs.daemon.request_times import request_kernels
from gpuobs.daemon.step_attribution import Step, StepAttribution

MS = 1_000_000


class Steps:
    """A StepAttribution whose steps are written by hand, each with one replay whose device span
    the fake graph join answers."""

    def __init__(self, retention: RequestRetention | None = None) -> None:
        self.source = StepAttribution()
        self.spans: dict[int, tuple[int, int]] = {}  # replay -> (start, end)
        self.now_ns = 0  # the host clock the ledger reads: 0, long before any step, unless a test moves it
        self.ledger = RequestLedger(self.source, self.summary, retention, clock_ns=lambda: self.now_ns)
        self.key = 0

    def summary(self, instance: int, replay: int) -> dict | None:
        if replay not in self.spans:
            return None
        start, end = self.spans[replay]
        return {"device_start_ns": start, "device_end_ns": end}

    def add(self, ids: dict[str, int], span_ns: int, host_ns: int = 10 * MS, kernels: dict | None = None) -> Step:
        number = self.key + 1
        previous = self.source.steps.get(self.key - 1)
        at = previous.host_time_ns + host_ns if previous else 1_000 * MS
        step = Step(number, at, 1, len(ids), sum(ids.values()), 0, False)
        step.request_ids, step.request_tokens = list(ids), list(ids.values())
        step.kernels = {slot: list(counts) for slot, counts in (kernels or {}).items()}
        if span_ns:
            step.replays = [(0x70, number, 1)]
            self.spans[number] = (at, at + span_ns)
        self.source.steps[self.key] = step
        self.key += 1
        return step


def test_a_step_settles_once_the_next_began_and_the_device_ran_past_its_replays() -> None:
    steps = Steps()
    steps.add({"a": 3, "b": 1}, 4 * MS)
    steps.ledger.settle(replay_begun=5)
    assert steps.ledger.steps_settled == 0  # the newest: more launches may still be its
    steps.add({"a": 1, "b": 1}, 2 * MS)
    steps.ledger.settle(replay_begun=1)
    assert steps.ledger.steps_settled == 0  # its replay 1 not begun past: events may still come
    steps.ledger.settle(replay_begun=2)
    assert steps.ledger.steps_settled == 1
    a, b = steps.ledger.times["a"], steps.ledger.times["b"]
    assert (a.device_ns, b.device_ns, a.tokens) == (3 * MS, MS, 3)
    steps.ledger.settle(ALL_REPLAYS)  # the process exited: the newest too, without a host time
    assert steps.ledger.steps_settled == 2
    assert (a.device_ns, b.device_ns) == (4 * MS, 2 * MS)
    busy = steps.ledger.histograms["step_busy_ratio"]
    assert busy.count == 1 and busy.total == pytest.approx(0.4)  # 4 ms of its 10 ms
    requests = steps.ledger.histograms["request_device_seconds"]
    assert requests.count == 2 and requests.total == pytest.approx(0.006)  # both, at the exit


def test_a_request_is_observed_once_when_it_leaves_the_batch() -> None:
    steps = Steps()
    for ids in [{"a": 5}, {"a": 1, "b": 5}, {"b": 1}, {"b": 1, "a": 1}, {"c": 1}]:
        steps.add(ids, MS)
    steps.ledger.settle(replay_begun=100)  # steps 1-4: the newest waits for the next
    histogram = steps.ledger.histograms["request_device_seconds"]
    # a left at step 3 (observed with its time so far); b leaves at step 5, not settled yet
    assert histogram.count == 1 and histogram.total == pytest.approx((MS + MS / 6) / 1e9)
    steps.ledger.settle(ALL_REPLAYS)  # the exit: b and c observed; a came back and is not again
    assert histogram.count == 3
    assert steps.ledger.times["a"].steps == 3  # its row goes on


def test_untimed_requests_are_not_observed_as_free() -> None:
    steps = Steps()
    steps.add({"a": 1}, 0)  # counter mode: no span
    steps.add({"b": 1}, 0)
    steps.ledger.settle(ALL_REPLAYS)
    assert steps.ledger.histograms["request_device_seconds"].count == 0
    assert steps.ledger.histograms["step_busy_ratio"].count == 0
    assert steps.ledger.times["a"].steps_untimed == 1


@pytest.mark.parametrize("retention", [RequestRetention(keep=3), RequestRetention(keep=1000, keep_s=0.05)])
def test_rows_let_go_by_count_or_age_keep_the_device_time_conserved(retention: RequestRetention) -> None:
    steps = Steps(retention)
    for index in range(40):
        steps.add({f"r{index}": 2, f"r{index + 1}": 1}, 3 * MS + index, host_ns=10 * MS)
        steps.ledger.settle(replay_begun=index + 1)
    ledger = steps.ledger
    kept = sum(entry.row.device_ns for entry in ledger.rows.values())
    assert kept + ledger.device_ns_let_go == ledger.steps_device_ns == sum(3 * MS + i for i in range(39))
    assert ledger.requests_let_go > 0 and len(ledger.rows) == len(ledger.times)
    if retention.keep == 3:
        assert len(ledger.rows) == 3
    else:  # 50 ms at 10 ms a step: the requests of the last 5 or 6 steps
        newest = max(entry.row.last_host_ns for entry in ledger.rows.values())
        assert all(newest - entry.row.last_host_ns <= 50 * MS for entry in ledger.rows.values())
        assert 5 <= len(ledger.rows) <= 7
    # a row let go is observed if it had not been: every request is in the histogram once
    assert ledger.histograms["request_device_seconds"].count >= ledger.requests_let_go


def test_steps_let_go_before_they_settled_are_counted() -> None:
    steps = Steps()
    steps.source.KEEP_STEPS = 4
    for _ in range(10):
        steps.add({"a": 1}, MS)
    for key in range(6):  # StepAttribution let these go meanwhile
        del steps.source.steps[key]
    steps.ledger.settle(replay_begun=100)
    assert (steps.ledger.steps_lost, steps.ledger.steps_settled) == (6, 3)


def test_kernel_blocks_are_split_by_tokens_exactly_where_a_kernel_runs_a_block_per_token() -> None:
    steps = Steps()
    layers = 28
    # the cache write: one block per token per layer; a GEMM of a fixed 132 blocks per layer
    steps.add({"a": 7, "b": 1, "c": 4}, MS, kernels={3: (layers, 12 * layers), 9: (layers, 132 * layers)})
    steps.add({"a": 1, "b": 1, "c": 1}, MS, kernels={3: (layers, 3 * layers), 9: (layers, 132 * layers)})
    steps.ledger.settle(ALL_REPLAYS)
    kernels = {r: request_kernels(steps.source.steps.values(), r)[0] for r in "abc"}
    assert [kernels[r][3] for r in "abc"] == [
        [2 * layers, 8 * layers],
        [2 * layers, 2 * layers],
        [2 * layers, 5 * layers],
    ]
    assert sum(kernels[r][9][1] for r in "abc") == 2 * 132 * layers  # shared out, conserved


def test_histogram_counts_are_flat_counters_with_every_bucket() -> None:
    steps = Steps()
    steps.add({"a": 1}, 3 * MS)
    steps.add({"b": 1}, MS)
    steps.ledger.settle(ALL_REPLAYS)
    counts = steps.ledger.histogram_counts()
    assert sum(counts[f"request_device_seconds:{i}"] for i in range(len(REQUEST_DEVICE_EDGES_S) + 1)) == 2
    assert counts["request_device_seconds:count"] == 2 and counts["step_busy_ratio:count"] == 1
    assert counts["step_busy_ratio:2"] == 1  # 0.3: in the bucket le="0.3" (edges 0.1, 0.2, 0.3, ...)


def test_a_step_whose_replays_are_not_all_known_is_untimed_not_short() -> None:
    """A replay the graph join no longer keeps in detail, or one past the replays a step names,
    would leave the span short by an unknown amount: the step is counted untimed instead."""
    steps = Steps()
    whole = steps.add({"a": 1}, 4 * MS)
    forgotten = steps.add({"a": 1}, 4 * MS)
    crowded = steps.add({"a": 1}, 4 * MS)
    steps.add({"a": 1}, 4 * MS)
    forgotten.replays.append((0x70, 999, 1))  # a second replay, which left the join's window before the step settled
    crowded.replays_launched = StepAttribution.MAX_REPLAYS_PER_STEP + 1
    steps.ledger.settle(replay_begun=ALL_REPLAYS - 1)
    row = steps.ledger.times["a"]
    assert steps.ledger.steps_settled == 3 and (row.steps, row.steps_untimed) == (3, 2)
    assert row.device_ns == steps.ledger.steps_device_ns == 4 * MS  # the whole step's alone
    assert whole.replays_launched == 0  # hand-made: its one replay is named


def test_an_idle_engine_settles_its_newest_step_and_its_requests_leave() -> None:
    """No step after the newest for IDLE_NS: it settles without a host time, and its requests are
    observed in the histogram (they would otherwise wait for traffic that may not come)."""
    steps = Steps()
    steps.add({"a": 3, "b": 1}, 4 * MS)
    last = steps.add({"a": 1, "b": 1}, 2 * MS)
    steps.now_ns = last.host_time_ns + RequestLedger.IDLE_NS - 1
    steps.ledger.settle(replay_begun=last.step + 1)
    requests = steps.ledger.histograms["request_device_seconds"]
    assert steps.ledger.steps_settled == 1 and requests.count == 0  # busy a moment ago: may go on
    steps.now_ns += 1
    steps.ledger.settle(replay_begun=last.step + 1)
    assert steps.ledger.steps_settled == 2 and steps.ledger.steps_device_ns == 6 * MS
    assert requests.count == 2 and requests.total == pytest.approx(0.006)
    assert steps.ledger.histograms["step_busy_ratio"].count == 1  # the newest has no host time: no ratio
    steps.add({"c": 4}, MS)  # traffic again: the next step settles as usual, after its own
    steps.add({"c": 1}, MS)
    steps.ledger.settle(replay_begun=last.step + 3)
    assert steps.ledger.steps_settled == 3 and steps.ledger.times["c"].device_ns == MS
