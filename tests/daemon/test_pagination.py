"""Issue 13, item 5: every kernel of a process with tens of thousands of them comes in pages, so
no reply outgrows a client's limit and no single query holds the daemon for long."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest

from daemon_support import pb


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


@pytest.mark.parametrize("request_fields, reason", [
    ({"page_token": "nonsense"}, "page_token is not one this daemon gave out"),
    ({"page_token": "k1.1.2.3.4"}, "page_token is not one this daemon gave out"),
    ({"page_token": "k1." + "9" * 100 + ".0.0"}, "page_token is not one this daemon gave out"),
    ({"top": 5, "page_token": "k1.1.0.0"}, "does not go with top"),
    ({"page_size": 20001}, "page_size must be within"),
    ({"top": 100001}, "top must be within"),
])
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
    from gpuobs.daemon.graph_census import GraphCensuses
    from gpuobs.daemon.registry import ObservedProcess
    from gpuobs.daemon.service import InvalidArgument, ObserverService
    from test_census_join import graph_launches

    processes = []
    for pid, count in ((300, 0), (100, 5), (200, 3)):
        censuses = GraphCensuses()
        for index in range(count):
            launches = graph_launches(range(1, 3))
            launches["graph_exec"] = 0x7000 + 16 * index
            censuses.update(launches)
        process = ObservedProcess(Path(f"/segments/{pid}"), _Segment(pid), graphs=censuses)
        processes.append(process)
    service = ObserverService(_Registry(processes), "/segments")
    try:
        seen, token, pages = [], "", 0
        while True:
            rows, token = service.graphs([], 4, page_size=2, page_token=token)
            assert len(rows) <= 2
            seen.extend((row["pid"], row["graph_exec"]) for row in rows)
            pages += 1
            if not token:
                break
        expected = [(100, 0x7000 + 16 * i) for i in range(5)] + [(200, 0x7000 + 16 * i) for i in range(3)]
        assert seen == expected and pages == 4
        assert all(len(row["nodes"]) == 2 for row in service.graphs([100], 4)[0])
        with pytest.raises(InvalidArgument):
            service.graphs([], 4, page_token="k1.100.7.0")
        with pytest.raises(InvalidArgument):
            service.graphs([], 4, page_size=100_000)
    finally:
        service.close()


def test_step_pages_hold_every_step_asked_for_once(start_synth, start_daemon) -> None:
    """An engine's last 1,000 steps come in pages of 256, each once, in order, though the engine
    keeps stepping while they are read."""
    from daemon_support import gpuobsctl

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
