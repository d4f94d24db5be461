"""Engine steps (the records the vLLM plugin writes) joined to the replays they launched:
gpuobs-synth writes a step before each replay of its graph, with the injector's writer."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import gpuobsctl

NODES, REPLAYS = 5, 30


def expected_ids(step: int) -> list[str]:
    group = (step - 1) // 3  # gpuobs-synth changes its requests every 3 steps
    return [f"cmpl-synth-{group}-{k}" for k in range(1 + group % 4)]


def expected_tokens(step: int) -> list[int]:
    """A group's first step is its prefill (request k: k + 1 tokens), then one token each."""
    ids = expected_ids(step)
    return [k + 1 for k in range(len(ids))] if (step - 1) % 3 == 0 else [1] * len(ids)


def every_step(daemon, last: int) -> list:
    """The last `last` steps, page by page (256 a reply)."""
    steps, request = [], pb.ListStepsRequest(last=last)
    while True:
        reply = daemon.stub.ListSteps(request, timeout=30)
        steps.extend(reply.steps)
        if not reply.next_page_token:
            return steps
        request.page_token = reply.next_page_token


def test_each_replay_belongs_to_its_step_and_requests(start_synth, start_daemon) -> None:
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(NODES),
        "--steps",
        "--launches",
        str(NODES * REPLAYS),
        "--rate",
        "100000",
        "--kernels",
        "8",
        "--ring-records",
        str(1 << 18),
        "--label",
        "vllm engine rank 0",
    )
    daemon = start_daemon("--analysis-share", "1")  # the join is checked here, not the daemon's budget for it
    assert synth.wait() == 0
    daemon.wait_all_gone()
    response = daemon.stub.ListSteps(pb.ListStepsRequest(last=REPLAYS), timeout=10)
    (totals,) = response.totals
    assert (totals.steps, totals.launches_before_steps) == (REPLAYS, 0)
    assert [s.step for s in response.steps] == list(range(1, REPLAYS + 1))
    graph = daemon.stub.ListGraphs(pb.ListGraphsRequest(replays=REPLAYS), timeout=10).graphs[0]
    blocks_per_replay = graph.blocks_per_replay
    graph_replays = {r.replay: r for r in graph.recent_replays}
    for step in response.steps:
        assert step.label == "vllm engine rank 0"
        ids = expected_ids(step.step)
        assert (list(step.request_ids), step.request_ids_complete) == (ids, True)
        assert (step.requests, step.tokens) == (len(ids), sum(expected_tokens(step.step)))
        assert (step.kernel_launches, step.blocks_expected) == (NODES, blocks_per_replay)
        (replay,) = step.replays
        assert (replay.graph_exec, replay.replay) == (graph.graph_exec, step.step)
        # the replay's node executions, joined to their events by the graph census
        assert (replay.node_executions, replay.nodes_matched, replay.blocks_observed, replay.mode) == (
            NODES,
            NODES,
            blocks_per_replay,
            "blocks",
        )
        # its span on the device clock, the one `graphs` shows, and the step's (one replay)
        shown = graph_replays[replay.replay]
        assert 0 < replay.device_start_ns < replay.device_end_ns
        assert (replay.device_start_ns, replay.device_end_ns) == (shown.device_start_ns, shown.device_end_ns)
        assert step.device_span_ns == shown.span_ns

    (process,) = daemon.status().processes
    assert process.engine_steps == REPLAYS
    done = gpuobsctl(daemon.address, "--output", "json", "steps", "--replay", "17")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)["steps"]
    assert (found["step"], found["request_ids"]) == (17, expected_ids(17))
    text = gpuobsctl(daemon.address, "steps", "--last", "3")
    assert text.returncode == 0 and f"{REPLAYS} steps recorded" in text.stdout
    assert "cmpl-synth-9-0" in text.stdout  # steps 28..30 are group 9


def test_steps_refuse_bad_requests(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    synth = start_synth("--mode", "counter", "--graph-nodes", "3", "--steps", "--launches", "30")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    with pytest.raises(grpc.RpcError) as error:
        daemon.stub.ListSteps(pb.ListStepsRequest(last=100000), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as error:
        daemon.stub.ListSteps(pb.ListStepsRequest(replay=999), timeout=10)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    done = gpuobsctl(daemon.address, "steps", "--pid", "1")
    assert done.returncode != 0 and "1" in done.stderr


def test_requests_device_time_adds_up_to_the_steps(start_synth, start_daemon) -> None:
    """#33: each step's device span split among its requests by tokens; over the kept steps the
    requests' device time is the steps' exactly, and each request's tokens are its steps'."""
    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", str(NODES), "--steps", "--launches", str(NODES * REPLAYS),
        "--rate", "100000", "--kernels", "8", "--ring-records", str(1 << 18),
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    steps = daemon.stub.ListSteps(pb.ListStepsRequest(last=REPLAYS), timeout=10).steps
    assert len(steps) == REPLAYS and all(s.device_span_ns for s in steps)
    response = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1000), timeout=10)
    assert response.steps_device_ns == sum(s.device_span_ns for s in steps)
    for step, after in zip(steps, steps[1:], strict=False):  # per step: host time and busy ratio
        assert step.host_step_ns == after.host_time_ns - step.host_time_ns > 0
        assert step.busy_ratio == pytest.approx(step.device_span_ns / step.host_step_ns)
    # the newest: its end not known yet, so no host time and no ratio (unset, not 0)
    assert not steps[-1].HasField("host_step_ns") and not steps[-1].HasField("busy_ratio")
    # busy time inside each span: the synth's nodes run one after another with gaps between them
    assert all(s.HasField("device_busy_ns") and 0 < s.device_busy_ns < s.device_span_ns for s in steps)
    for step in steps:
        assert step.device_busy_ns == sum(r.device_busy_ns for r in step.replays)
    assert not any(s.HasField("flops") or s.HasField("device_flops_per_s") for s in steps)  # no estimate sent
    shown = gpuobsctl(daemon.address, "steps", "--last", "2")
    assert shown.returncode == 0 and "BUSY us" in shown.stdout and "TFLOP/s" not in shown.stdout, shown.stderr
    assert f"{steps[-1].device_busy_ns / 1000:.1f}" in shown.stdout.splitlines()[-1]
    assert (response.steps_settled, response.steps_lost, response.requests_let_go) == (REPLAYS, 0, 0)
    assert sum(r.device_ns for r in response.requests) == response.steps_device_ns
    every_id = {i for s in steps for i in s.request_ids}
    assert {r.request for r in response.requests} == every_id
    for row in response.requests:
        mine = [s for s in steps if row.request in s.request_ids]
        tokens = [expected_tokens(s.step)[list(s.request_ids).index(row.request)] for s in mine]
        assert (row.steps, row.tokens, row.steps_untimed) == (len(mine), sum(tokens), 0)
        assert row.kernel_launches == sum(s.kernel_launches for s in mine)
        # its token share of each step's span, rounded: less than a nanosecond off per step
        share = sum(s.device_span_ns * t / s.tokens for s, t in zip(mine, tokens, strict=True))
        assert abs(row.device_ns - share) < len(mine)
    one = daemon.stub.ListRequests(pb.ListRequestsRequest(request="cmpl-synth-9-0"), timeout=10).requests
    assert [(r.request, r.first_step, r.last_step) for r in one] == [("cmpl-synth-9-0", 28, 30)]
    for bad, code in [
        (pb.ListRequestsRequest(request="no-such-request"), grpc.StatusCode.NOT_FOUND),
        (pb.ListRequestsRequest(request="a\tb"), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.ListRequestsRequest(top=100_001), grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            daemon.stub.ListRequests(bad, timeout=10)
        assert refused.value.code() == code
    done = gpuobsctl(daemon.address, "--output", "json", "request", "cmpl-synth-0-0")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)["requests"]
    assert (found["request"], found["steps"], found["tokens"]) == ("cmpl-synth-0-0", 3, 3)
    (second,) = daemon.stub.ListRequests(pb.ListRequestsRequest(request="cmpl-synth-1-1"), timeout=10).requests
    assert second.tokens == 2 + 1 + 1  # its prefill of 2, two decodes
    text = gpuobsctl(daemon.address, "requests", "--top", "2")
    assert text.returncode == 0 and "DEVICE MS" in text.stdout and len(text.stdout.splitlines()) == 4
    # per kernel: every execution of its steps, and its token share of their blocks, which over
    # a group's requests (steps 3g+1..3g+3 schedule exactly them) add up to the steps' blocks
    for group in (0, 5, 9):
        mine = [s for s in steps if (s.step - 1) // 3 == group]
        rows = [
            daemon.stub.ListRequests(pb.ListRequestsRequest(request=request), timeout=10).requests[0]
            for request in expected_ids(mine[0].step)
        ]
        blocks: dict[str, int] = {}
        for row in rows:
            assert {k.kernel for k in row.kernels} and sum(k.executions for k in row.kernels) == row.kernel_launches
            for kernel in row.kernels:
                blocks[kernel.kernel] = blocks.get(kernel.kernel, 0) + kernel.blocks
        assert sum(blocks.values()) == sum(s.blocks_expected for s in mine), group
        cache = [k for k in rows[0].kernels if k.kv_cache]
        assert [k.kernel.split("<")[0] for k in cache] == ["void vllm::reshape_and_cache_flash_kernel"]
        assert cache[0].executions == 3  # one node a replay, a replay a step
    top = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1000), timeout=10).requests
    assert all(not r.kernels for r in top)  # kernels come with one request only
    # every kept request, a page at a time in the order each began, each once
    walked, token = [], ""
    while True:
        page = daemon.stub.ListRequests(pb.ListRequestsRequest(every=True, page_token=token), timeout=10)
        walked.extend(r.request for r in page.requests)
        token = page.next_page_token
        if not token:
            break
    assert walked == [i for group in range(REPLAYS // 3) for i in expected_ids(3 * group + 1)]
    every = gpuobsctl(daemon.address, "--output", "json", "requests", "--all")
    assert every.returncode == 0 and len(json.loads(every.stdout)["requests"]) == len(walked)
    for bad in [
        pb.ListRequestsRequest(every=True, request="cmpl-synth-0-0"),
        pb.ListRequestsRequest(page_token="r1.1.2.3"),
        pb.ListRequestsRequest(every=True, page_token="s1.1.2.3.4"),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            daemon.stub.ListRequests(bad, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_steps_flop_estimate_gives_the_rate_achieved_over_device_and_host_time(start_synth, start_daemon) -> None:
    """#33: where the engine estimates its steps' FLOPs (vLLM --enable-mfu-metrics; the synth's
    --step-flops per token), each step carries it, divided by its device span (the rate the GPU
    achieved) and by its host time (as vLLM's own figure divides it); absent where there is none."""
    per_token = 10**9
    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", str(NODES), "--steps", "--step-flops", str(per_token),
        "--launches", str(NODES * REPLAYS), "--rate", "100000", "--kernels", "8", "--ring-records", str(1 << 18),
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    steps = daemon.stub.ListSteps(pb.ListStepsRequest(last=REPLAYS), timeout=10).steps
    assert len(steps) == REPLAYS
    for step in steps:
        assert step.flops == per_token * step.tokens
        assert step.device_flops_per_s == pytest.approx(step.flops * 1e9 / step.device_span_ns)
    for step in steps[:-1]:
        assert step.host_flops_per_s == pytest.approx(step.flops * 1e9 / step.host_step_ns)
        assert step.host_flops_per_s < step.device_flops_per_s  # the span is inside the host step
    assert not steps[-1].HasField("host_flops_per_s")  # the newest: its host time is not known yet
    shown = gpuobsctl(daemon.address, "steps", "--last", "1")
    assert shown.returncode == 0 and "DEVICE TFLOP/s" in shown.stdout, shown.stderr
    assert f"{steps[-1].device_flops_per_s / 1e12:.3f}" in shown.stdout.splitlines()[-1]


@pytest.mark.parametrize("timing", ["replay spans", "launch times", "none"])
def test_counter_mode_times_steps_by_replay_spans_or_launch_events(start_synth, start_daemon, timing: str) -> None:
    """`counter` records no block events. By default block (0,0,0)'s leaders fold each replay's
    span on the device and the injector reads it (one ReplaySpan record a replay, counted); with
    GPUOBS_LAUNCH_TIMES=1 (and no spans) block (0,0,0) records each launch as an event instead.
    Either way a step has a span (its first node's entry to its last's) and its requests device
    time, the blocks still only counted (no node judged mismatched); with neither, nothing is timed."""
    env = {
        "replay spans": {},
        "launch times": {"GPUOBS_LAUNCH_TIMES": "1", "GPUOBS_REPLAY_SPANS": "0"},
        "none": {"GPUOBS_REPLAY_SPANS": "0"},
    }[timing]
    synth = start_synth(
        "--mode", "counter", "--graph-nodes", str(NODES), "--steps", "--launches", str(NODES * REPLAYS),
        "--rate", "100000", "--kernels", "8", "--ring-records", str(1 << 18), env=env,
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    steps = daemon.stub.ListSteps(pb.ListStepsRequest(last=REPLAYS), timeout=10).steps
    requests = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1000), timeout=10)
    (process,) = daemon.stub.GetStatus(pb.GetStatusRequest(), timeout=10).processes
    assert process.accounting_errors == 0
    # every replay's span read once, none unclean: exact, as the other counts
    assert (process.injector.replay_spans, process.injector.replay_spans_unclean) == (
        REPLAYS if timing == "replay spans" else 0,
        0,
    )
    (graph,) = daemon.stub.ListGraphs(pb.ListGraphsRequest(), timeout=10).graphs
    assert graph.executions_mismatched == graph.executions_matched == 0 and graph.executions_unrecorded > 0
    assert not any(s.HasField("device_busy_ns") for s in steps)  # entries span, they do not time runs
    if timing == "none":
        assert all(s.device_span_ns == 0 and not s.HasField("busy_ratio") for s in steps)
        assert requests.steps_device_ns == 0 and all(r.steps_untimed == r.steps for r in requests.requests)
        return
    assert len(steps) == REPLAYS and all(s.device_span_ns > 0 for s in steps)
    for step in steps:
        starts = [r.device_start_ns for r in step.replays]
        ends = [r.device_end_ns for r in step.replays]
        assert step.device_span_ns == max(ends) - min(starts)
    split = requests.steps_device_ns
    assert sum(r.device_ns for r in requests.requests) == split == sum(s.device_span_ns for s in steps)
    assert all(r.steps_untimed == 0 for r in requests.requests)


def test_a_step_whose_replay_left_the_detail_window_has_no_span_not_a_short_one(start_synth, start_daemon) -> None:
    """The graph join keeps 1,024 replays an exec in detail: a step whose replay is older shows
    it without node executions and gets no span (0), nor busy time; the requests' ledger, which
    settled it while it was kept, still has its time."""
    replays = 1024 + 60
    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", "2", "--steps", "--launches", str(2 * replays),
        "--rate", "200000", "--kernels", "4", "--ring-records", str(1 << 18),
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    steps = every_step(daemon, replays)
    assert len(steps) == replays
    gone = [s for s in steps if s.replays and s.replays[0].node_executions == 0]
    kept = [s for s in steps if s.replays and s.replays[0].node_executions]
    assert len(gone) == replays - 1024 and len(kept) == 1024
    assert all(s.device_span_ns == 0 and not s.HasField("device_busy_ns") for s in gone)
    assert all(s.device_span_ns > 0 for s in kept)
    requests = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1000), timeout=10)
    assert requests.steps_settled == replays and requests.steps_lost == 0


def test_an_idle_engine_settles_its_newest_step_while_it_lives(start_synth, start_daemon) -> None:
    """The synth steps, then hangs in one eager launch (alive, no more steps): within the idle
    time and a liveness tick the newest step settles too, its requests with it."""
    import time

    from gpuobs.daemon.request_ledger import RequestLedger

    synth = start_synth(
        "--mode", "blocks", "--graph-nodes", str(NODES), "--steps", "--launches", str(NODES * REPLAYS),
        "--rate", "100000", "--kernels", "8", "--ring-records", str(1 << 18), "--hang-seconds", "30",
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    deadline = time.monotonic() + RequestLedger.IDLE_NS / 1e9 + 15
    settled = 0
    while time.monotonic() < deadline and settled < REPLAYS:
        time.sleep(0.5)
        settled = daemon.stub.ListRequests(pb.ListRequestsRequest(top=1), timeout=10).steps_settled
    (process,) = daemon.stub.GetStatus(pb.GetStatusRequest(), timeout=10).processes
    assert process.alive and synth.process.poll() is None  # still in its hang: not the exit's settling
    assert settled == REPLAYS


def test_a_step_with_replays_past_those_it_names_has_neither_span_nor_busy_time() -> None:
    """Past the replays a step names (MAX_REPLAYS_PER_STEP) its span and busy time would cover
    only some of its work: ListSteps gives neither, as the request ledger counts it untimed."""
    import types

    from gpuobs.daemon.service_steps import StepQueries
    from gpuobs.daemon.step_attribution import Step, StepAttribution

    summary = {"device_start_ns": 100, "device_end_ns": 200, "device_busy_ns": 50, "mode": 3}
    join = types.SimpleNamespace(replay_summary=lambda instance, replay: dict(summary))
    process = types.SimpleNamespace(pid=7, analyses=types.SimpleNamespace(graph_join=join))
    step = Step(1, 1_000, 1, 1, 1, 0, False)
    step.replays = [(0x70, 1, 1)]
    step.replays_launched = 1
    whole = StepQueries._step_row(process, step, "")
    assert (whole.device_span_ns, whole.device_busy_ns) == (100, 50)
    step.replays_launched = StepAttribution.MAX_REPLAYS_PER_STEP + 1
    crowded = StepQueries._step_row(process, step, "")
    assert (crowded.device_span_ns, crowded.device_busy_ns) == (0, None)


def test_replays_read_a_span_table_too_late_are_counted_unclean_and_left_untimed(start_synth, start_daemon) -> None:
    """The injector reads replay spans as often as it publishes: a reader more than a table
    (512 replays) behind finds slots that two replays folded into. Those are counted unclean,
    never published as a span, and their steps stay untimed; status says so."""
    replays = 3000
    synth = start_synth(
        "--mode", "counter", "--graph-nodes", "1", "--steps", "--launches", str(replays),
        "--rate", "10000000", "--kernels", "2", "--publish-us", "30000000", "--ring-records", str(1 << 18),
    )  # fmt: skip
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    (process,) = daemon.stub.GetStatus(pb.GetStatusRequest(), timeout=10).processes
    spans, unclean = process.injector.replay_spans, process.injector.replay_spans_unclean
    assert unclean > 0 and spans + unclean <= replays, (spans, unclean)
    assert process.accounting_errors == 0
    steps = every_step(daemon, replays)
    assert len(steps) == replays
    assert sum(1 for s in steps if s.device_span_ns) <= spans  # a step is timed only by a span read clean
    shown = gpuobsctl(daemon.address, "status")
    assert shown.returncode == 0 and f"{unclean} of {spans + unclean} graph replays read without a span" in shown.stdout


def test_a_requests_kernel_steps_never_count_a_step_its_row_has_not_settled(start_synth, start_daemon) -> None:
    """An engine's newest step settles when the next begins or it has been idle 3 s: until then a
    request's row does not have it, and neither do the steps its kernels are counted over (seen on
    an H100 at 66a890a: a request viewed right after a load had kernel_steps 64 over 63 steps)."""
    daemon = start_daemon("--analysis-share", "1")
    synth = start_synth(
        "--mode", "counter", "--graph-nodes", str(NODES), "--steps", "--launches", str(NODES * 12),
        "--rate", "100000", "--kernels", "8", "--hang-seconds", "20",
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # every step in: the engine is idle in its hang, the last step unsettled
        if len(daemon.stub.ListSteps(pb.ListStepsRequest(last=100), timeout=10).steps) == 12:
            break
        time.sleep(0.05)
    rows = daemon.stub.ListRequests(pb.ListRequestsRequest(top=100), timeout=10).requests
    views = [daemon.stub.ListRequests(pb.ListRequestsRequest(request=r.request), timeout=10).requests[0] for r in rows]
    shown = [(v.request, v.kernel_steps, v.steps) for v in views]
    assert views and all(v.kernel_steps <= v.steps for v in views), shown
    assert synth.pid  # left in its hang: the fixture stops it
