"""The request ledger and ListRequests under hostile input: garbage page tokens, odd request ids,
cut-short id lists, steps lost before they settle, exits midway, far more requests than kept,
host time going backwards, zero tokens, and a drain that folds a step between a query's lock and
its reply. Every test asserts what must hold; a failing one names the bug it found."""

from __future__ import annotations

import random
import threading
import types

import pytest
from gpuobs.daemon import service_steps
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.cache_writes import CacheWrites
from gpuobs.daemon.errors import InvalidArgument, NotFound
from gpuobs.daemon.request_ledger import RequestLedger, RequestRetention
from gpuobs.daemon.request_times import request_kernels
from gpuobs.daemon.service_steps import StepQueries
from gpuobs.daemon.step_attribution import Step, StepAttribution
from gpuobs_testing.records import step_records

MS = 1_000_000


class Steps:
    """A StepAttribution written by hand; each timed step has one replay whose span a fake graph
    join answers (None once `forget` drops it, as the join's window does)."""

    def __init__(self, retention: RequestRetention | None = None) -> None:
        self.source = StepAttribution()
        self.spans: dict[int, tuple[int, int]] = {}
        self.ledger = RequestLedger(self.source, self.summary, retention, clock_ns=lambda: 0)  # never idle
        self.key = 0
        self.at = 1_000_000 * MS

    def summary(self, instance: int, replay: int) -> dict | None:
        if replay not in self.spans:
            return None
        start, end = self.spans[replay]
        return {"device_start_ns": start, "device_end_ns": end}

    def add(
        self,
        ids: dict[str, int] | list[str],
        span_ns: int,
        host_ns: int = 10 * MS,
        kernels: dict | None = None,
        complete: bool = True,
        tokens_known: bool = True,
    ) -> Step:
        self.at += host_ns
        names = list(ids)
        tokens = list(ids.values()) if isinstance(ids, dict) and tokens_known else []
        step = Step(self.key + 1, self.at, 1, len(names), sum(tokens), 10, False)
        step.text_received = 10 if complete else 4
        if complete:
            step.request_ids, step.request_tokens = names, tokens
        step.kernels = {slot: list(counts) for slot, counts in (kernels or {}).items()}
        if span_ns:
            step.replays = [(0x70, self.key + 1, 1)]
            self.spans[self.key + 1] = (self.at, self.at + span_ns)
        self.source.steps[self.key] = step
        self.key += 1
        return step


def conserved(ledger: RequestLedger) -> bool:
    kept = sum(entry.row.device_ns for entry in ledger.rows.values())
    return kept + ledger.device_ns_let_go == ledger.steps_device_ns


def check_invariants(ledger: RequestLedger) -> None:
    assert conserved(ledger), ledger.report()
    assert list(ledger.rows) == [e.row.request for e in ledger.rows.values()]
    assert set(ledger.rows) == set(ledger.times), "rows and times out of sync"
    assert all(ledger.times[r] is e.row for r, e in ledger.rows.items())
    assert len(ledger.rows) <= max(ledger.retention.keep, ledger.batch)  # a batch keeps its rows
    seqs = [e.seq for e in ledger.rows.values()]
    assert len(set(seqs)) == len(seqs)


ODD_IDS = ["cmpl-é", "e\u0301", "\u200b", "🦀-req", "\r", " ", "a\x00b", "\ufffd", "x" * 1024, "ǅ", "\u202eevil"]


@pytest.mark.parametrize("seed", range(6))
def test_conservation_and_bounds_hold_through_hostile_churn(seed: int) -> None:
    """Random steps: odd ids, duplicates in one step, zero tokens, unknown tokens, cut-short ids,
    untimed steps, steps lost before settling, host time backwards, settles at random replays;
    after each settle the invariants hold, and at the exit every step is settled."""
    rng = random.Random(seed)
    steps = Steps(RequestRetention(keep=rng.choice([1, 3, 50]), keep_s=rng.choice([0.02, 3600.0])))
    pool = ODD_IDS + [f"r{i}" for i in range(200)]
    replay_begun = 0
    for _ in range(400):
        ids = {}
        for request in rng.sample(pool, rng.randint(0, 12)):
            ids[request] = rng.choice([0, 0, 1, 7, 300])
        listed: list[str] | dict[str, int] = ids
        if ids and rng.random() < 0.1:  # the same id twice in one step
            first = next(iter(ids))
            listed = [*ids, first]
            steps.add(listed, rng.randint(1, 5 * MS), complete=True, tokens_known=False)
        else:
            steps.add(
                ids,
                rng.choice([0, 1, 3 * MS]),
                host_ns=rng.choice([10 * MS, -5 * MS, 0, 30 * MS]),  # backwards too
                kernels={rng.randint(0, 5): (rng.randint(0, 40), rng.randint(0, 5000))},
                complete=rng.random() > 0.1,
                tokens_known=rng.random() > 0.05,
            )
        if rng.random() < 0.03:  # StepAttribution lets go of the oldest kept steps
            for key in list(steps.source.steps)[: rng.randint(1, 5)]:
                del steps.source.steps[key]
        replay_begun = max(replay_begun, steps.key - rng.randint(0, 3))
        steps.ledger.settle(replay_begun)
        check_invariants(steps.ledger)
    steps.ledger.settle(ALL_REPLAYS)
    check_invariants(steps.ledger)
    ledger = steps.ledger
    assert ledger.next_key == steps.key and ledger.steps_settled + ledger.steps_lost == steps.key
    assert all(entry.observed for entry in ledger.rows.values())


def test_each_request_is_observed_once_even_when_keep_is_below_the_batch() -> None:
    """--request-keep accepts 1; a vLLM batch holds up to 256 requests. The rows of requests still
    in the batch must not be let go and made again each step: each such cycle observes the request
    in the histogram again and splits its device time over several rows."""
    steps = Steps(RequestRetention(keep=2))
    batch = {"a": 1, "b": 1, "c": 1, "d": 1}
    for _ in range(6):
        steps.add(batch, MS)
        steps.ledger.settle(steps.key)  # a settle per pass, as the drain does
    steps.ledger.settle(ALL_REPLAYS)
    histogram = steps.ledger.histograms["request_device_seconds"]
    assert histogram.count == len(batch), (
        f"4 requests observed {histogram.count} times: request_ledger._let_go lets go rows of requests "
        f"still scheduled (keep=2 < 4 in the batch), fold_step makes them again, each let-go observes"
    )


def test_each_request_in_a_long_walk_beyond_the_count_is_observed_once() -> None:
    """5000 requests, 64 new a step, 4 steps each, kept 256: rows stay bounded and, as keep is
    above the batch, every request is observed once with its whole device time."""
    steps = Steps(RequestRetention(keep=256))
    live: list[str] = []
    made = 0
    for _ in range(5000 // 16 + 8):
        fresh = [f"req-{made + i}" for i in range(16)] if made < 5000 else []
        made += len(fresh)
        live = live[16:] + fresh if len(live) >= 64 else live + fresh
        steps.add(dict.fromkeys(live, 1), 4 * MS)
        steps.ledger.settle(steps.key)
        check_invariants(steps.ledger)
    steps.ledger.settle(ALL_REPLAYS)
    histogram = steps.ledger.histograms["request_device_seconds"]
    assert made == 5008 and histogram.count == made
    assert histogram.total == pytest.approx(steps.ledger.steps_device_ns / 1e9)


def test_a_cut_short_id_list_then_the_exit_observes_each_request_once() -> None:
    steps = Steps()
    steps.add({"a": 1, "b": 1}, MS)
    steps.add({"zz": 1}, MS, complete=False)  # its ids never all came: says nothing of who left
    steps.add({"b": 1}, MS)
    steps.add({"c": 1}, MS)
    steps.ledger.settle(replay_begun=100)
    histogram = steps.ledger.histograms["request_device_seconds"]
    # steps 1-3 settled (4, the newest, waits): a left during the cut-short step 2, unseen; b's
    # leaving shows only once step 4 settles
    assert histogram.count == 0
    assert steps.ledger.steps_device_ns == 2 * MS  # the cut-short step was not split
    steps.ledger.settle(ALL_REPLAYS)
    assert histogram.count == 3  # a and c at the exit, b not again
    assert conserved(steps.ledger)


def test_an_exit_midway_settles_everything_once_and_later_settles_change_nothing() -> None:
    steps = Steps()
    steps.add({"a": 2}, 3 * MS)
    steps.add({"a": 1, "b": 1}, 2 * MS)
    steps.add({"b": 5}, 0)  # its replay never had events
    steps.spans.pop(2)  # the join let go of step 2's replay before it settled: no span
    steps.ledger.settle(replay_begun=1)  # nothing: step 1's replay is not past
    assert steps.ledger.steps_settled == 0
    steps.ledger.settle(ALL_REPLAYS)
    before = (steps.ledger.report(), steps.ledger.histogram_counts())
    assert steps.ledger.steps_settled == 3 and steps.ledger.steps_device_ns == 3 * MS
    for _ in range(3):
        steps.ledger.settle(ALL_REPLAYS)
    assert (steps.ledger.report(), steps.ledger.histogram_counts()) == before
    # a (a timed step) once; b took part in untimed steps only: not observed as free
    assert steps.ledger.histograms["request_device_seconds"].count == 1


def test_host_time_going_backwards_is_neither_a_crash_nor_a_busy_ratio() -> None:
    steps = Steps(RequestRetention(keep=100, keep_s=1.0))
    steps.add({"a": 1}, 2 * MS)
    steps.add({"b": 1}, 2 * MS, host_ns=-500 * MS)  # before the step it follows
    steps.add({"c": 1}, 2 * MS, host_ns=-5_000 * MS)
    steps.add({"d": 1}, 2 * MS)
    steps.ledger.settle(ALL_REPLAYS)
    busy = steps.ledger.histograms["step_busy_ratio"]
    assert busy.count == 1  # only c -> d went forwards (10 ms); a -> b and b -> c have no host time
    assert conserved(steps.ledger) and steps.ledger.steps_device_ns == 8 * MS


def test_zero_tokens_split_evenly_and_conserve_time_and_kernel_blocks() -> None:
    steps = Steps()
    steps.add({"a": 0, "b": 0, "c": 0}, 10, kernels={4: (2, 11)})
    steps.ledger.settle(ALL_REPLAYS)
    rows = steps.ledger.times
    assert sum(rows[r].device_ns for r in "abc") == 10 and sorted(rows[r].device_ns for r in "abc") == [3, 3, 4]
    kernels = {r: request_kernels(steps.source.steps.values(), r) for r in "abc"}
    assert sum(kernels[r][0][4][1] for r in "abc") == 11
    assert all(kernels[r] == ({4: [2, kernels[r][0][4][1]]}, 1) and rows[r].tokens == 0 for r in "abc")


def test_a_same_requests_step_after_a_cut_short_text_does_not_take_older_ids() -> None:
    """Step 2's text was cut short (a dropped text record); step 3 says "same requests as the step
    before", i.e. step 2's, which are unknown. It must not inherit step 1's ids."""
    steps = StepAttribution()
    steps.on_launches(step_records(1, b"old-request\t4", host_time_ns=10 * MS))
    batch = "\n".join(f"new-request-{i}\t1" for i in range(8)).encode()
    steps.on_launches(step_records(2, batch, cut_short=True, host_time_ns=20 * MS))
    steps.on_launches(step_records(3, None, host_time_ns=30 * MS))
    third = steps.steps[2]
    assert not (third.ids_complete and third.request_ids == ["old-request"]), (
        "step_attribution._begin: a SAME_REQUESTS step after a step whose text never completed "
        f"copies the ids of the step before that ({third.request_ids}); the ledger then folds its "
        "device time into the wrong request"
    )


# -- ListRequests over fake processes -------------------------------------------------------------


class HookLock:
    """A process lock that lets `hook` run once as a query releases it: the drain thread taking
    the lock for its next batch between the query's lock and its reply."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.hook = None

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *_: object) -> None:
        self.lock.release()
        hook, self.hook = self.hook, None
        if hook is not None:
            with self.lock:
                hook()


def fake_process(pid: int, steps: Steps, start: int = 7) -> types.SimpleNamespace:
    segment = types.SimpleNamespace(
        header={"pid_start_ticks": start},
        kernels_at=lambda slots: [{"slot": slot, "demangled": f"kernel_{slot}"} for slot in slots],
    )
    return types.SimpleNamespace(
        pid=pid,
        segment=segment,
        lock=HookLock(),
        analyses=types.SimpleNamespace(
            requests=steps.ledger, steps=steps.source, cache_writes=CacheWrites(lambda slots: {}, lambda: None)
        ),
    )


class FakeTargets:
    def __init__(self, processes: list) -> None:
        self.list = processes

    def processes(self, pids: list[int], *, live_only: bool) -> list:
        return [p for p in self.list if not pids or p.pid in pids]


def queries_of(*processes: types.SimpleNamespace) -> StepQueries:
    return StepQueries(FakeTargets(list(processes)))  # type: ignore[arg-type]


def filled(requests: int, prefix: str = "r") -> Steps:
    steps = Steps()
    for index in range(requests):
        steps.add({f"{prefix}{index}": 1 + index % 3}, MS + index, kernels={1: (2, 3 + index)})
    steps.ledger.settle(steps.key)
    return steps


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "r1",
        "r1.1.7",
        "r1.1.7.3.4",
        "s1.1.7.3.4",  # a ListSteps token
        "k1.1.7.3",  # a ListKernels token
        "r2.1.7.3",
        "r1.-1.7.3",
        "r1.1.7.-3",
        "r1.1.7.3.",
        "r1.1.7.",
        "r1..7.3",
        "r1.1.7.3 ",
        " r1.1.7.3",
        "r1.1.7.3\n",
        "r1.1.7.0x10",
        "r1.1.7.1e3",
        "r1.1.7.1_000",
        "r1.1.7.³",  # a digit to str.isdigit, not to int()
        "r1.1.7.٣",  # an Arabic-Indic three
        "r1.1.7.３",  # a fullwidth three
        "r1.1.7." + "9" * 200,
        "r1.1.7.3\x00",
        "R1.1.7.3",
        "r1.1.7.+3",
    ],
)
def test_a_garbage_page_token_is_invalid_argument(token: str) -> None:
    queries = queries_of(fake_process(1, filled(5)))
    with pytest.raises(InvalidArgument):
        queries.requests([], every=True, page_token=token)


def test_a_page_token_without_every_or_every_with_one_request_is_invalid_argument() -> None:
    queries = queries_of(fake_process(1, filled(5)))
    with pytest.raises(InvalidArgument):
        queries.requests([], page_token="r1.1.7.3")
    with pytest.raises(InvalidArgument):
        queries.requests([], every=True, request="r1")


def test_a_well_formed_token_of_no_process_or_past_every_row_is_no_crash() -> None:
    first, second = fake_process(10, filled(4, "p")), fake_process(20, filled(3, "q"))
    queries = queries_of(first, second)
    # a process that is not there (forgotten meanwhile): the walk goes on with those after it
    reply = queries.requests([], every=True, page_token="r1.15.0.0")
    assert [(r.pid, r.request) for r in reply.requests] == [(20, q) for q in second.analyses.requests.rows]
    assert reply.next_page_token == ""
    # a position past every row of a process, and a pid past every process: empty last pages
    assert queries.requests([], every=True, page_token="r1.20.7.99999999999").requests == []
    assert queries.requests([], every=True, page_token="r1.4294967295.99.0").requests == []


def test_an_every_walk_visits_each_kept_request_once_while_rows_come_and_go(monkeypatch) -> None:
    monkeypatch.setattr(service_steps, "REQUESTS_PAGE", 5)
    a, b = Steps(RequestRetention(keep=12)), Steps(RequestRetention(keep=12))
    for index in range(10):
        a.add({f"a{index}": 1}, MS)
        b.add({f"b{index}": 1, "b-long": 1}, MS)
    a.ledger.settle(a.key)
    b.ledger.settle(b.key)
    queries = queries_of(fake_process(30, b), fake_process(3, a))
    at_start = {(p, r) for p, s in ((3, a), (30, b)) for r in s.ledger.rows}
    seen: list[tuple[int, str, int]] = []
    token, pages, added = "", 0, 0
    while True:
        reply = queries.requests([], every=True, page_token=token)
        seen += [(r.pid, r.request, r.first_step) for r in reply.requests]
        assert len(reply.requests) <= 5
        pages += 1
        for steps, prefix in ((a, "a-new"), (b, "b-new")):  # rows come, and old ones go
            steps.add({f"{prefix}{added}": 2, "b-long": 1}, MS)
            steps.ledger.settle(steps.key)
        added += 1
        token = reply.next_page_token
        if not token:
            break
        assert pages < 50, "the walk does not end"
    assert len(seen) == len(set(seen)), "a request visited twice"
    at_end = {(p, r) for p, s in ((3, a), (30, b)) for r in s.ledger.rows}
    assert at_start & at_end <= {(p, r) for p, r, _ in seen}, "a request kept all along was not visited"
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)  # process order


def test_odd_unicode_request_ids_are_found_by_exact_id_and_bad_ids_refused() -> None:
    steps = Steps()
    for index, request in enumerate(ODD_IDS):
        steps.add({request: 1 + index}, MS, kernels={2: (1, 10)})
    steps.add({"last": 1}, MS)
    steps.ledger.settle(steps.key)
    queries = queries_of(fake_process(1, steps))
    for request in ODD_IDS:
        (row,) = queries.requests([], request=request).requests
        assert row.request == request and row.device_ns == MS
        assert [(k.kernel, k.executions, k.blocks) for k in row.kernels] == [("kernel_2", 1, 10)]
    with pytest.raises(NotFound):
        queries.requests([], request="e\u0301"[:1])  # "e" without its combining accent: no row
    for bad in ["x" * 1025, "a\tb", "a\nb"]:
        with pytest.raises(InvalidArgument):
            queries.requests([], request=bad)
    every = queries.requests([], every=True)
    assert [r.request for r in every.requests] == [*ODD_IDS, "last"][: len(every.requests)]


@pytest.mark.parametrize("mode", ["top", "every", "request"])
def test_a_reply_is_conserved_even_if_the_drain_folds_a_step_as_the_lock_is_released(mode: str) -> None:
    """The drain takes the process lock between batches; a query that reads the ledger's rows
    after releasing it mixes totals from before a fold with rows from after it."""
    steps = filled(6)
    process = fake_process(1, steps)
    queries = queries_of(process)
    steps.add({"x": 1}, MS)
    steps.ledger.settle(steps.key)  # r5's step settles; x's waits
    assert steps.ledger.steps_settled == 6
    steps.add({"r5": 1, "r2": 1}, 7 * MS)
    steps.add({"r2": 1}, 0)

    def drain() -> None:
        steps.ledger.settle(steps.key + 10)

    process.lock.hook = drain
    if mode == "top":
        reply = queries.requests([], top=100)
    elif mode == "every":
        reply = queries.requests([], every=True)
    else:
        reply = queries.requests([], request="r5")
    assert steps.ledger.steps_settled == 8  # the drain did fold a step meanwhile
    if mode == "request":
        (row,) = reply.requests
        assert row.device_ns == MS + 5, (
            f"r5 shows {row.device_ns} ns though the reply's totals predate the fold that gave it more "
            "(service_steps.requests reads ledger rows after process.lock is released)"
        )
    else:
        assert sum(r.device_ns for r in reply.requests) + reply.device_ns_let_go == reply.steps_device_ns, (
            "rows + device_ns_let_go != steps_device_ns within one reply: service_steps.requests reads "
            "the ledger's mutable RequestTime rows in request_row() after releasing process.lock"
        )
