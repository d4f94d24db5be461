"""CUDA graphs under the injector, observed through a real gpuobsd: (a) a 40-layer decode graph,
(c) two streams and a graph captured in one mode and replayed in another, (d) mode switches while
graphs replay; (b), eager counts against torch.profiler, is in test_torch.py.

The report of (a) is written to $GPUOBS_REPORT_DIR/graphs-40x7.json when that is set (the GPU
suite sets it; the committed copy is bench/results/graphs-40x7.json)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from gpuobs.segment import EVENT_KINDS, LAUNCH_KINDS, REPLAY_SPAN_DTYPE
from gpuobs_testing.daemon import DaemonProcess, device_stage, free_port, gpuobsctl
from harness import WORKLOADS, InjectedRun, keep_report

DECODE = [sys.executable, str(WORKLOADS / "decode_graph40.py")]
CACHE_KERNEL = "kv_cache_write_kernel"
LAYERS, REPLAYS = 40, 7


def cli_json(daemon: DaemonProcess, *args: str) -> list[dict]:
    """The rows of a list command (`kernels`, `graphs`): its JSON object's key of the same name."""
    done = gpuobsctl(daemon.address, "--output", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[args[0]]


def unexplained_blocks(kernels: list[dict]) -> dict[str, int]:
    """Per kernel, blocks the geometry promised that were neither counted nor accounted for."""
    out = {}
    for kernel in kernels:
        missing = (
            int(kernel["blocks_expected"])
            - int(kernel["blocks_observed"])
            - int(kernel["blocks_unpatched"])
            - int(kernel["blocks_unobserved"])
        )
        if missing:
            out[kernel["name"]] = missing
    return out


def the_graph(graphs: list[dict]) -> dict:
    replayed = [g for g in graphs if int(g["replays"]) > 0]
    assert len(replayed) == 1, [(g["graph_exec"], g["replays"]) for g in graphs]
    return replayed[0]


def test_a_decode_graph_40_layers_7_replays_every_node_execution_matched(shm_dir: Path, tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port())
    try:
        run = InjectedRun(
            DECODE + ["--layers", str(LAYERS), "--replays", str(REPLAYS)],
            shm_dir,
            mode="blocks",
            drain=False,
            ring_records=1 << 22,
        )
        out = run.finish()
        daemon.wait_all_gone()
        graphs = cli_json(daemon, "graphs", "--replays", str(REPLAYS))
        kernels = cli_json(daemon, "kernels", "--top", "0")
        process = daemon.status().processes[0]
        mismatches = [line for line in daemon.log().splitlines() if "accounting_mismatch" in line]
    finally:
        daemon.stop()
    assert not mismatches, mismatches[:3]
    assert out["replays"] == REPLAYS
    graph = the_graph(graphs)
    cache_nodes = [n for n in graph["nodes"] if CACHE_KERNEL in n["name"]]
    cache_executions = sum(int(n["executions"]) for n in cache_nodes)
    cache_matched = sum(int(n["executions_matched"]) for n in cache_nodes)
    replays = graph["recent_replays"]
    summary = {
        "graph_execs_replayed": 1,
        "replays": int(graph["replays"]),
        "cache_kernel_nodes": len(cache_nodes),
        "cache_node_executions": cache_executions,
        "cache_node_executions_matched": cache_matched,
        "node_executions": int(graph["node_executions"]),
        "node_executions_matched": int(graph["executions_matched"]),
        "node_executions_mismatched": int(graph["executions_mismatched"]),
        "node_executions_unrecorded": int(graph["executions_unrecorded"]),
        "events_unmatched": int(graph["events_unmatched"]),
        "order_stable": graph["order_stable"],
        "device_order_stable": graph["device_order_stable"],
        "events_dropped": int(device_stage(process).dropped),
        "accounting_errors": int(process.accounting_errors),
        "unexplained_blocks": unexplained_blocks(kernels),
        "replay_span_us": [round(int(r["span_ns"]) / 1000, 1) for r in replays],
        "gap_between_replays_us": [round(int(r["gap_ns"]) / 1000, 1) for r in replays[1:]],
    }
    keep_report("graphs-40x7.json", {"summary": summary, "graph": graph, "kernels": kernels})
    assert (summary["replays"], summary["cache_kernel_nodes"]) == (REPLAYS, LAYERS), summary
    assert (cache_executions, cache_matched) == (LAYERS * REPLAYS, LAYERS * REPLAYS), summary
    assert summary["node_executions_matched"] == summary["node_executions"], summary
    assert summary["events_unmatched"] == 0 and summary["events_dropped"] == 0, summary
    assert summary["order_stable"] and summary["device_order_stable"], summary
    assert summary["unexplained_blocks"] == {} and summary["accounting_errors"] == 0, summary
    assert [int(r["replay"]) for r in replays] == sorted(int(r["replay"]) for r in replays)
    for replay in replays:
        assert int(replay["nodes_matched"]) == int(replay["node_executions"]) == len(graph["nodes"])
        assert int(replay["span_ns"]) > 0
    assert all(int(r["gap_ns"]) > 0 for r in replays[1:])  # replays run one after another on one stream
    # every cache node execution's blocks are its grid: tokens x column tiles
    for node in cache_nodes:
        assert int(node["blocks_observed"]) == REPLAYS * int(node["blocks_per_execution"])


def test_c_two_streams_and_a_graph_captured_in_counter_replayed_in_blocks(shm_dir: Path, tmp_path: Path) -> None:
    # the join of every execution is what is checked here, not the daemon's budget for it
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port(), "--analysis-share", "1")
    try:
        run = InjectedRun(
            DECODE + ["--layers", "6", "--replays", "5", "--two-streams", "--wait-before-replays"],
            shm_dir,
            mode="counter",
            drain=False,
            ring_records=1 << 22,
        )
        assert run.read_json_line() == {"captured": True}
        switched = gpuobsctl(daemon.address, "set-mode", "blocks")
        assert switched.returncode == 0, switched.stderr
        run.send_line()
        out = run.finish()
        daemon.wait_all_gone()
        graph = the_graph(cli_json(daemon, "graphs", "--replays", "5"))
        kernels = cli_json(daemon, "kernels", "--top", "0")
    finally:
        daemon.stop()
    keep_report("graphs-c-two-streams.json", graph)
    assert out["replays"] == 5
    grid_ids = {int(n["grid_ids"][0]) for n in graph["nodes"]}
    assert len(grid_ids) == len(graph["nodes"])  # every node has a grid id of its own, on either stream
    assert [r["mode"] for r in graph["recent_replays"]] == ["blocks"] * 5
    totals = {k: graph[k] for k in graph if k.startswith("executions_") or k == "node_executions"}
    assert int(graph["executions_matched"]) == int(graph["node_executions"]) == 5 * len(graph["nodes"]), totals
    assert int(graph["events_unmatched"]) == 0
    assert len([n for n in graph["nodes"] if CACHE_KERNEL in n["name"]]) == 6
    assert unexplained_blocks(kernels) == {}


def test_d_mode_switches_while_graphs_replay_in_a_loop(shm_dir: Path, tmp_path: Path) -> None:
    argv = DECODE + ["--layers", "8", "--loop-seconds", "6"]
    reference = InjectedRun(argv, shm_dir, inject=False).finish()
    # the join of every execution is checked, not the daemon's budget for it (at the default
    # share, thousands of replays a second leave most of them unjoined: counted as such)
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port(), "--analysis-share", "1")
    failures: list[str] = []
    try:
        run = InjectedRun(argv, shm_dir, mode="counter", drain=False, ring_records=1 << 22)
        daemon.wait_processes(1, timeout=120)
        stop = threading.Event()

        def switch() -> None:
            modes = ["blocks", "noop", "counter", "off", "blocks", "counter"]
            index = 0
            while not stop.is_set():
                done = gpuobsctl(daemon.address, "set-mode", modes[index % len(modes)], timeout=30)
                if done.returncode != 0 and any(p.alive for p in daemon.status().processes):
                    failures.append(done.stderr)
                index += 1
                time.sleep(0.2)

        switcher = threading.Thread(target=switch)
        switcher.start()
        try:
            out = run.finish()
        finally:
            stop.set()
            switcher.join()
        daemon.wait_all_gone()
        kernels = cli_json(daemon, "kernels", "--top", "0")
        graph = the_graph(cli_json(daemon, "graphs", "--replays", "64"))
        process = daemon.status().processes[0]
    finally:
        daemon.stop()
    assert not failures, failures[:3]
    assert out["loop_iterations"] > 20 and out["mismatches"] == 0, out
    assert out["checksum"] == reference["checksum"]
    assert unexplained_blocks(kernels) == {}  # host counts and device counters: exact whatever the rings did
    # This loop replays as fast as the GPU goes (thousands of replays a second): the rings may
    # overflow. Then events are dropped and counted, never lost, and executions whose events
    # were dropped are mismatched; without drops every recorded execution must match.
    stage = device_stage(process)
    assert process.accounting_errors == 0
    assert stage.produced == stage.delivered + stage.dropped + stage.torn + stage.corrupt and stage.in_flight == 0
    host = next(s for s in process.stages if s.stage == "host")
    assert host.produced == host.delivered + host.dropped
    judged = sum(int(graph[f"executions_{status}"]) for status in ("matched", "mismatched", "unrecorded", "unjoined"))
    assert judged == int(graph["node_executions"]) > 0
    if stage.dropped == 0 and host.dropped == 0:
        assert int(graph["executions_mismatched"]) == 0 and int(graph["events_unmatched"]) == 0, {
            key: graph[key]
            for key in (
                "replays",
                "executions_matched",
                "executions_mismatched",
                "executions_unrecorded",
                "events_unmatched",
            )
        }
    assert judged - int(graph["executions_unrecorded"]) > 0  # the switches reached the replays: some ran in blocks


@pytest.mark.parametrize("mode", ["counter", "blocks"])
def test_e_every_replay_has_its_device_span_from_block_zero_entries(shm_dir: Path, mode: str) -> None:
    """Replay spans (replay_spans.h): block (0,0,0)'s leaders fold each replay's first and last
    entry into a slot in device memory, and the tool thread reads it once the replay is done:
    every replay read once, none unclean, each with as many launches as the exec has kernel
    nodes, eager launches (warm-up, capture, the check after) in none. In `blocks` the same
    launches also record launch events: a span's ends are its replay's first and last launch
    event's times, taken a few instructions apart in the same thread."""
    run = InjectedRun(DECODE + ["--layers", "4", "--replays", "20"], shm_dir, mode=mode, ring_records=1 << 22)
    out = run.finish()
    launches, events = run.all_launches(), run.all_events()
    counters = run.global_counters()
    spans = launches[launches["kind"] == LAUNCH_KINDS["replay_span"]].view(REPLAY_SPAN_DTYPE)
    graph_launches = launches[launches["kind"] == LAUNCH_KINDS["graph_launch"]]
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]
    first_recorded = int(nodes["replay"].min())
    kernel_nodes = int((nodes["replay"] == first_recorded).sum())
    node_grids = set(nodes["grid_id"].tolist())
    finding = {
        "replays": len(graph_launches),
        "spans": len(spans),
        "spans_counted": int(counters["replay_spans"]),
        "unclean": int(counters["replay_spans_unclean"]),
        "kernel_nodes": kernel_nodes,
        "launches_per_span": sorted(set(spans["launches"].tolist())),
        "span_us": [round((int(s["last_entry_ns"]) - int(s["first_entry_ns"])) / 1000, 1) for s in spans[:5]],
    }
    print(finding)
    assert out["replays"] == 20 and finding["replays"] >= 20, finding
    assert finding["spans"] == finding["spans_counted"] == finding["replays"] and finding["unclean"] == 0, finding
    assert finding["launches_per_span"] == [kernel_nodes], finding
    assert sorted(spans["replay"].tolist()) == sorted(graph_launches["replay"].tolist())
    assert all(int(s["last_entry_ns"]) > int(s["first_entry_ns"]) > 0 for s in spans)
    if mode == "counter":
        assert len(events) == 0
        return
    launch_events = events[events["kind"] == EVENT_KINDS["launch"]]
    for span in spans:
        mine = launch_events[
            (launch_events["replay"] == (int(span["replay"]) & 0xFFFFFFFF))
            & np.isin(launch_events["grid_id"], list(node_grids))
        ]
        times = mine["globaltimer_ns"].astype(np.int64)
        assert len(mine) == int(span["launches"]), (int(span["replay"]), len(mine))
        assert abs(int(times.min()) - int(span["first_entry_ns"])) < 20_000, int(span["replay"])
        assert abs(int(times.max()) - int(span["last_entry_ns"])) < 20_000, int(span["replay"])
