"""Queries used to run on the loop that also drained every producer, so a long
query stopped the drain (a producer lost events to it) and a status call waited for it, and each
RPC waited for whole drain passes between its turns of the loop. Now the drain has a thread, long
queries have theirs, and status reads nothing that a batch's analysis holds."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.api.v1 import observer_pb2_grpc as pb_grpc
from gpuobs_testing.daemon import device_stage


@pytest.mark.slow
def test_status_and_the_drain_go_on_while_a_long_query_runs(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    big = start_synth("--mode", "counter", "--kernels", "120000", "--launches", "300", timeout=60)
    assert big.wait(timeout=60) == 0
    daemon.wait_all_gone(timeout=60)
    # a walk is seconds of work on a loaded 2-core machine (2 s to 18 s seen, with the machine's
    # speed); the ring holds ~1.3 s of this producer, which runs until the first walk is done
    busy = start_synth("--mode", "blocks", "--rate", "200000", "--kernels", "16", "--ring-records", str(1 << 18))
    daemon.wait_processes(1, timeout=30)
    channel = grpc.insecure_channel(daemon.address, options=[("grpc.max_receive_message_length", 1 << 30)])
    stub = pb_grpc.ObserverStub(channel)
    queries = {"done": 0, "status_during": 0}
    stop = threading.Event()

    def query() -> None:
        """Every kernel, in the largest pages the daemon gives."""
        while not stop.is_set():
            slots, token = [], ""
            while True:
                page = stub.ListKernels(
                    pb.ListKernelsRequest(pids=[big.pid], page_size=20000, page_token=token), timeout=120
                )
                slots.extend(k.slot for k in page.kernels)
                token = page.next_page_token
                if not token:
                    break
            assert slots == list(range(120000))  # each once, in order
            queries["done"] += 1

    worker = threading.Thread(target=query)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while queries["done"] < 1 and time.monotonic() < deadline:
            before = queries["done"]
            began = time.monotonic()
            stub.GetStatus(pb.GetStatusRequest(), timeout=30)
            # answered while the same long query was still being served
            if queries["done"] == before and time.monotonic() - began < 1.0:
                queries["status_during"] += 1
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(timeout=180)
    assert busy.stop() == 0
    daemon.wait_all_gone(timeout=60)
    assert queries["done"] >= 1 and queries["status_during"] >= 10, queries
    view = next(p for p in daemon.status().processes if p.pid == busy.pid)
    device = device_stage(view)
    assert device.delivered > 0 and device.produced == device.delivered + device.dropped
    assert device.dropped == 0, f"the producer lost {device.dropped} events while the daemon answered queries"
