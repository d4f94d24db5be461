"""Every kernel of a process with tens of thousands of them comes in pages, so
no reply outgrows a client's limit and no single query holds the daemon for long."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.daemon.errors import InvalidArgument


def walk(stub, pids: list[int], page_size: int) -> tuple[list[tuple[int, int]], int]:
    seen, pages, token = [], 0, ""
    while True:
        page = stub.ListKernels(pb.ListKernelsRequest(pids=pids, page_size=page_size, page_token=token), timeout=60)
        assert len(page.kernels) <= (page_size or 5000)
        seen.extend((k.pid, k.slot) for k in page.kernels)
        pages += 1
        token = page.next_page_token
        if not token:
            return seen, pages


def test_pages_visit_every_kernel_of_every_process_once(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    first = start_synth("--mode", "counter", "--kernels", "12000", "--launches", "100", timeout=60)
    second = start_synth("--mode", "counter", "--kernels", "3", "--launches", "10")
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    daemon.wait_all_gone(timeout=60)
    seen, pages = walk(daemon.stub, [], 5000)
    expected = sorted([(first.pid, slot) for slot in range(12000)] + [(second.pid, slot) for slot in range(3)])
    assert seen == expected and pages == 3
    seen, pages = walk(daemon.stub, [second.pid], 0)  # the default page holds a small process whole
    assert seen == [(second.pid, slot) for slot in range(3)] and pages == 1
    # top stays one reply, most launched first
    top = daemon.stub.ListKernels(pb.ListKernelsRequest(top=10), timeout=60).kernels
    assert len(top) == 10 and [k.launches for k in top] == sorted((k.launches for k in top), reverse=True)
    assert not daemon.stub.ListKernels(pb.ListKernelsRequest(top=10), timeout=60).next_page_token


@pytest.mark.parametrize(
    "request_fields, reason",
    [
        ({"page_token": "nonsense"}, "page_token is not one this daemon gave out"),
        ({"page_token": "k1.1.2.3.4"}, "page_token is not one this daemon gave out"),
        ({"page_token": "k1." + "9" * 100 + ".0.0"}, "page_token is not one this daemon gave out"),
        ({"top": 5, "page_token": "k1.1.0.0"}, "does not go with top"),
        ({"page_size": 20001}, "page_size must be within"),
        ({"top": 100001}, "top must be within"),
    ],
)
def test_a_bad_page_request_is_refused_clearly(start_synth, start_daemon, request_fields: dict, reason: str) -> None:
    daemon = start_daemon()
    synth = start_synth("--mode", "counter", "--kernels", "3", "--launches", "10")
    assert synth.wait(timeout=60) == 0
    daemon.wait_all_gone()
    with pytest.raises(grpc.RpcError) as failure:
        daemon.stub.ListKernels(pb.ListKernelsRequest(**request_fields), timeout=10)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason in failure.value.details()


class _Segment:
    """What ObserverService reads of a segment for graph rows: its header and kernel names."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.header = {"pid_start_ticks": 7}

    def kernels_at(self, slots: list[int]) -> list[dict]:
        return [{"slot": slot, "demangled": f"kernel_{slot}"} for slot in slots]


class _Registry:
    def __init__(self, processes: list) -> None:
        self.processes = {Path(f"/segments/{p.pid}"): p for p in processes}

    def live(self) -> list:
        return list(self.processes.values())

    def yield_to_drain(self, worked_s: float) -> None:
        pass


def test_graph_pages_visit_every_graph_of_every_process_once() -> None:
    """In-process: three processes with 0, 5 and 3 graph execs, in pages of 2: every graph exec
    once, in (pid, graph exec) order, wherever a page ends (inside a process or at its end);
    a token of another kind is refused."""
    from gpuobs.daemon.registry import ObservedProcess, ProcessAnalyses
    from gpuobs.daemon.service import ObserverService
    from gpuobs_testing.records import graph_launches

    processes = []
    for pid, count in ((300, 0), (100, 5), (200, 3)):
        analyses = ProcessAnalyses.create()
        for index in range(count):
            analyses.graph_join.on_launches(graph_launches(range(1, 3), graph_exec=0x7000 + 16 * index))
        process = ObservedProcess(Path(f"/segments/{pid}"), _Segment(pid), analyses=analyses)
        processes.append(process)
    service = ObserverService(_Registry(processes), "/segments")
    try:
        seen, token, pages = [], "", 0
        while True:
            page = service.graphs([], 4, page_size=2, page_token=token)
            rows, token = page.rows, page.next_page_token
            assert len(rows) <= 2
            seen.extend((row.pid, row.graph_exec) for row in rows)
            pages += 1
            if not token:
                break
        expected = [(100, 0x7000 + 16 * i) for i in range(5)] + [(200, 0x7000 + 16 * i) for i in range(3)]
        assert seen == expected and pages == 4
        assert all(len(row.nodes) == 2 for row in service.graphs([100], 4).rows)
        with pytest.raises(InvalidArgument):
            service.graphs([], 4, page_token="k1.100.7.0")
        with pytest.raises(InvalidArgument):
            service.graphs([], 4, page_size=100_000)
    finally:
        service.close()


def test_a_graph_exec_first_seen_after_a_page_is_on_a_later_one() -> None:
    """Graphs page in the order first seen, not by handle: a new exec whose handle sorts below
    the page token's (a handle the driver reused, or just a lower address) is not missed."""
    from gpuobs.daemon.registry import ObservedProcess, ProcessAnalyses
    from gpuobs.daemon.service import ObserverService
    from gpuobs_testing.records import graph_launches

    analyses = ProcessAnalyses.create()
    process = ObservedProcess(Path("/segments/100"), _Segment(100), analyses=analyses)

    def add(graph_exec: int) -> None:
        analyses.graph_join.on_launches(graph_launches(range(1, 2), graph_exec=graph_exec))

    add(0x7000)
    add(0x7010)
    service = ObserverService(_Registry([process]), "/segments")
    try:
        page = service.graphs([], 1, page_size=1)
        rows = list(page.rows)
        add(0x10)
        while page.next_page_token:
            page = service.graphs([], 1, page_size=1, page_token=page.next_page_token)
            rows.extend(page.rows)
    finally:
        service.close()
    assert [(row.graph_exec, row.instance) for row in rows] == [(0x7000, 1), (0x7010, 2), (0x10, 3)]


@pytest.mark.slow
def test_step_pages_hold_every_step_asked_for_once(start_synth, start_daemon) -> None:
    """An engine's last 1,000 steps come in pages of 256, each once, in order, though the engine
    keeps stepping while they are read."""
    from gpuobs_testing.daemon import gpuobsctl

    synth = start_synth("--mode", "counter", "--graph-nodes", "3", "--steps", "--rate", "20000")
    daemon = start_daemon()
    daemon.wait_processes(1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        totals = daemon.stub.ListSteps(pb.ListStepsRequest(last=1), timeout=10).totals
        if totals and totals[0].steps >= 1500:
            break
        time.sleep(0.2)
    request = pb.ListStepsRequest(last=1000)
    steps, pages = [], 0
    while True:
        page = daemon.stub.ListSteps(request, timeout=30)
        assert len(page.steps) <= 256
        steps.extend(page.steps)
        pages += 1
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    numbers = [s.step for s in steps]
    assert len(numbers) == 1000 and pages == 4 and numbers == sorted(numbers) and len(set(numbers)) == 1000
    assert all(s.pid == synth.pid for s in steps)
    with pytest.raises(grpc.RpcError) as caught:
        daemon.stub.ListSteps(pb.ListStepsRequest(last=10, page_token="k1.1.2.3"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    done = gpuobsctl(daemon.address, "--output", "json", "steps", "--last", "600")
    assert done.returncode == 0 and len(json.loads(done.stdout)["steps"]) == 600, done.stderr


def walk_service(list_page, page_size: int, token: str = "") -> tuple[list, int]:
    """Every row of a paged service list from `token` on, and the pages it took; list_page(size,
    token) returns (rows, next_page_token)."""
    rows, pages = [], 0
    while True:
        page, token = list_page(page_size, token)
        assert len(page) <= page_size
        rows.extend(page)
        pages += 1
        if not token:
            return rows, pages


def test_hang_pages_visit_every_hung_launch_once(written) -> None:
    """In-process, on a written segment: 70 launches with blocks in flight, in pages of 32: each
    once, in grid id order; a launch whose blocks exit between two pages is on neither later
    page, and nothing else goes missing."""
    from gpuobs_testing.records import events
    from gpuobs_testing.written import device_now_ns

    t0 = device_now_ns(seconds_ago=5)
    done = events("block_enter", 2, grid_id=1, block_x=[0, 1], globaltimer_ns=t0)
    written.put_events(
        np.concatenate([done, events("block_exit", 2, grid_id=1, block_x=[0, 1], globaltimer_ns=t0 + 10)])
    )
    for grid_id in range(100, 170):
        written.put_events(
            events(
                "block_enter", 2, grid_id=grid_id, block_x=[0, 1], kernel_slot=grid_id % 4, globaltimer_ns=t0 + grid_id
            )
        )
    written.drain()

    def hangs(size: int, token: str) -> tuple[list, str]:
        page = written.service.hangs([], 1000, size, token)
        return page.rows, page.next_page_token

    launches, pages = walk_service(hangs, 32)
    assert [row.grid_id for row in launches] == list(range(100, 170)) and pages == 3
    assert all(row.block_count == 2 for row in launches)

    first, token = hangs(32, "")
    written.put_events(events("block_exit", 2, grid_id=140, block_x=[0, 1], globaltimer_ns=t0 + 500))
    written.drain()
    rest, _ = walk_service(hangs, 32, token)
    assert [row.grid_id for row in first + rest] == [g for g in range(100, 170) if g != 140]
    with pytest.raises(InvalidArgument):
        written.service.hangs([], 1000, page_token="k1.1.2.3")
    with pytest.raises(InvalidArgument):
        written.service.hangs([], 1000, page_size=5000)


def test_hot_pc_pages_visit_every_pc_once_and_new_ones_after(written) -> None:
    """In-process: 300 PCs in pages of 128, each once in the order first seen; PCs seen between
    two pages come at the end of the walk; top stays one reply, most events first."""
    from gpuobs_testing.records import events

    pcs = np.arange(300, dtype=np.uint64) * 16 + 0x1000
    written.put_events(events("memory_access", 300, pc=pcs, kernel_slot=1, access_bytes=4))
    written.put_events(events("memory_access", 50, pc=pcs[7], kernel_slot=1, access_bytes=4))
    written.drain()

    def hot(size: int, token: str) -> tuple[list, str]:
        page = written.service.hot_pcs([], 0, size, token)
        return page.pcs, page.next_page_token

    rows, pages = walk_service(hot, 128)
    assert [row.pc for row in rows] == pcs.tolist() and pages == 3
    assert rows[7].events == 51 and rows[7].kernel == "kernel_1()"

    first, token = hot(128, "")
    written.put_events(events("memory_access", 2, pc=[0x10, 0x20], kernel_slot=2, access_bytes=4))
    written.drain()
    rest, _ = walk_service(hot, 128, token)
    assert [row.pc for row in first + rest] == pcs.tolist() + [0x10, 0x20]
    top = written.service.hot_pcs([], 3)
    assert [row.pc for row in top.pcs][:1] == [int(pcs[7])] and len(top.pcs) == 3 and not top.next_page_token
    assert (top.events_counted, top.events_skipped) == (352, 0)
    with pytest.raises(InvalidArgument):
        written.service.hot_pcs([], 5, page_token="p1.1.0.0")
