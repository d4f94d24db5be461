"""Issue 13, item 5: every kernel of a process with tens of thousands of them comes in pages, so
no reply outgrows a client's limit and no single query holds the daemon for long."""

from __future__ import annotations

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
