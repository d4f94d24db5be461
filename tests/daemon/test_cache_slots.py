"""The KV-cache slots each request wrote (#33): gpuobs-synth plays the engine (its step text hands
each request cache blocks and sends the cache's layout) and the cache-write kernel of each layer
(one graph node a layer, a block per token, every thread storing its part of the token's key or
value), with access hooks on that kernel only, as GPUOBS_MEMORY_KERNELS gives them beside vLLM."""

from __future__ import annotations

import json

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import gpuobsctl

NODES, REPLAYS = 20, 45  # a 20-node graph of the 8-kernel catalogue: nodes 2, 10 and 18 write the cache
LAYERS = 3
THREADS = 256  # of the cache kernel: each stores 2 bytes of its token's key or value, once
BLOCK_SIZE, BLOCKS = 4, 64  # the synth's cache: request q gets blocks 2q and 2q + 1 of 64


def expected_slots(group: int, k: int) -> set[int]:
    """Request k of group g schedules k + 1 tokens, then two of one: positions 0..k + 2."""
    q = 4 * group + k
    return {((2 * q + p // BLOCK_SIZE) % BLOCKS) * BLOCK_SIZE + p % BLOCK_SIZE for p in range(k + 3)}


def start(start_synth, mode: str, *extra: str):
    return start_synth(
        "--patch-set",
        "block",
        "--memory-kernels",
        "reshape_and_cache",
        "--mode",
        mode,
        "--graph-nodes",
        str(NODES),
        "--steps",
        "--launches",
        str(NODES * REPLAYS),
        "--kernels",
        "8",
        "--rate",
        "2000000",
        "--ring-records",
        str(1 << 19),
        *extra,
    )


def slots_of(row: pb.RequestTime) -> set[int]:
    return {slot for r in row.cache_slot_ranges for slot in range(r.first, r.last + 1)}


def test_each_request_wrote_the_slots_of_its_tokens_and_no_other(start_synth, start_daemon) -> None:
    """`memory`: every store recorded, so each request's slots are exactly its tokens' (blocks
    handed out again 32 requests later go to their new owner), its stores its tokens x layers x
    threads, and no store is left without a request."""
    synth = start(start_synth, "memory")
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    (process,) = daemon.status().processes
    assert all(stage.dropped == 0 for stage in process.stages)  # else the counts below could not be exact
    groups = REPLAYS // 3
    for group in range(groups):
        for k in range(1 + group % 4):
            request = f"cmpl-synth-{group}-{k}"
            (row,) = daemon.stub.ListRequests(pb.ListRequestsRequest(request=request), timeout=10).requests
            assert slots_of(row) == expected_slots(group, k), request
            assert (row.cache_slots, row.cache_slots_complete) == (k + 3, True)
            assert row.cache_stores == row.tokens * LAYERS * THREADS == (k + 3) * LAYERS * THREADS
            assert row.cache_steps == row.steps == 3
    reply = daemon.stub.ListRequests(pb.ListRequestsRequest(), timeout=10)
    tokens = sum(k + 3 for group in range(groups) for k in range(1 + group % 4))
    assert reply.kv_cache_layouts == 1
    assert reply.cache_stores == reply.cache_stores_attributed == tokens * LAYERS * THREADS
    assert (reply.cache_stores_unattributed, reply.cache_stores_outside, reply.cache_stores_skipped) == (0, 0, 0)
    assert reply.cache_stores_dropped == reply.cache_stores_before_layout == 0
    text = gpuobsctl(daemon.address, "request", "cmpl-synth-3-3")
    assert text.returncode == 0, text.stderr
    assert "KV-cache slots of cmpl-synth-3-3" in text.stdout and "6 slots written in 3 of its 3 steps" in text.stdout
    first = min(expected_slots(3, 3))
    assert f": {first}-{first + 5}\n" in text.stdout, text.stdout  # blocks 30 and 31: slots 120-125, one run
    (listed,) = json.loads(gpuobsctl(daemon.address, "--output", "json", "request", "cmpl-synth-3-3").stdout)[
        "requests"
    ]
    assert {slot for r in listed["cache_slot_ranges"] for slot in range(int(r["first"]), int(r["last"]) + 1)} == (
        expected_slots(3, 3)
    )


def test_sampled_stores_name_a_subset_of_the_slots_and_never_another_requests(start_synth, start_daemon) -> None:
    """`sampled`: 1 in 2^4 stores recorded; what is recorded still lies in the request's own
    slots, and the memory accesses are counted whole."""
    synth = start(start_synth, "sampled", "--shift", "4")
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    seen = 0
    for group in range(REPLAYS // 3):
        for k in range(1 + group % 4):
            (row,) = daemon.stub.ListRequests(
                pb.ListRequestsRequest(request=f"cmpl-synth-{group}-{k}"), timeout=10
            ).requests
            assert slots_of(row) <= expected_slots(group, k)
            assert row.cache_stores < (k + 3) * LAYERS * THREADS
            seen += row.cache_slots
    reply = daemon.stub.ListRequests(pb.ListRequestsRequest(), timeout=10)
    assert seen > 0 and reply.cache_stores == reply.cache_stores_attributed > 0
    assert reply.cache_stores_unattributed == reply.cache_stores_outside == 0


def test_without_access_hooks_the_view_says_slots_were_not_recorded(start_synth, start_daemon) -> None:
    """`counter`: no store is read, and the request view says so rather than "no slots"."""
    synth = start(start_synth, "counter")
    daemon = start_daemon("--analysis-share", "1")
    assert synth.wait() == 0
    daemon.wait_all_gone()
    text = gpuobsctl(daemon.address, "request", "cmpl-synth-0-0")
    assert text.returncode == 0, text.stderr
    assert "KV-cache slots: not recorded: no store of a cache kernel was read" in text.stdout
