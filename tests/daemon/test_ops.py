"""Which layer's op launched each kernel: op records (as a plugin writes them through the injector)
joined to the eager launch records that name them. gpuobs-synth writes an op before every N
launches with the injector's writer: op k has label (k - 1) % 3 of its three and launches kernel
(k - 1) % K, so the expected table follows from the launches it made."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from gpuobs.daemon.analysis import ALL_REPLAYS
from gpuobs.daemon.graph_exec import GraphExec
from gpuobs.daemon.graph_join import GraphJoin
from gpuobs.daemon.op_attribution import OpAttribution
from gpuobs.daemon.time_budget import UNLIMITED_SHARE, TimeBudget
from gpuobs.op_labels import LABEL_LOST
from gpuobs.segment import (
    EVENT_KINDS,
    GRAPH_NODES_RECORDED,
    LAUNCH_DTYPE,
    LAUNCH_KINDS,
    OP_DTYPE,
    OP_NODES_DTYPE,
    STEP_TEXT_DTYPE,
    Segment,
)
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.records import block_events
from gpuobs_testing.synth import SYNTH_OP_LABELS, SynthProcess

LABELS = SYNTH_OP_LABELS
PER_OP, LAUNCHES, KERNELS = 4, 600, 5


def test_every_launch_is_its_ops_and_the_table_is_exact(start_synth, start_daemon) -> None:
    synth = start_synth(
        "--mode",
        "counter",
        "--launch-trace",
        "--ops",
        str(PER_OP),
        "--launches",
        str(LAUNCHES),
        "--kernels",
        str(KERNELS),
        "--launch-ring-records",
        str(1 << 14),
    )
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone(10)
    done = gpuobsctl(daemon.address, "--output", "json", "ops", "--top", "1000")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    (totals,) = out["totals"]
    ops = -(-LAUNCHES // PER_OP)
    assert (totals["ops"], totals["launches_attributed"], totals["launches_without_op"], totals["labels"]) == (
        ops,
        LAUNCHES,
        0,
        len(LABELS),
    )
    kernels = {
        k["slot"]: k
        for k in json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"]
    }
    names = [k["name"] for k in sorted(kernels.values(), key=lambda k: k["slot"])]
    per_launch_blocks = {k["name"]: k["blocks_expected"] // k["launches"] for k in kernels.values()}
    expected: collections.Counter = collections.Counter()
    for launch in range(LAUNCHES):
        op = launch // PER_OP + 1
        expected[(LABELS[(op - 1) % 3], names[(op - 1) % KERNELS])] += 1
    got = {(row["op"], row["kernel"]): row for row in out["ops"]}
    assert {key: row["launches"] for key, row in got.items()} == dict(expected)
    for (_label, kernel), row in got.items():
        assert row["blocks"] == row["launches"] * per_launch_blocks[kernel]
    text = gpuobsctl(daemon.address, "ops", "--top", "3")
    assert text.returncode == 0 and f"{ops} ops recorded, {LAUNCHES} launches attributed" in text.stdout
    assert len([line for line in text.stdout.splitlines() if "model.layers." in line]) == 3


def rows_of(*records: np.ndarray) -> np.ndarray:
    """Launch ring rows as the drain hands them over (whole 128-byte records; np.concatenate would
    drop the padding of the structured dtypes)."""
    rows = np.zeros(len(records), dtype=LAUNCH_DTYPE)
    raw = rows.view(np.uint8).reshape(len(records), LAUNCH_DTYPE.itemsize)
    for index, record in enumerate(records):
        raw[index] = record.view(np.uint8)
    return rows


def op_row(op: int, thread: int, label: bytes, text_bytes: int | None = None) -> list[np.ndarray]:
    """An op record and its label's text records, as the injector writes them."""
    head = np.zeros(1, dtype=OP_DTYPE)
    head["kind"], head["op"], head["thread"] = LAUNCH_KINDS["op"], op, thread
    head["text_bytes"] = len(label) if text_bytes is None else text_bytes
    pieces = [head]
    for offset in range(0, len(label), 56):
        text = np.zeros(1, dtype=STEP_TEXT_DTYPE)
        text["kind"], text["step"], text["offset"] = LAUNCH_KINDS["op_text"], op, offset
        text["length"] = len(label[offset : offset + 56])
        text["text"] = label[offset : offset + 56]
        pieces.append(text)
    return pieces


def launch(op: int, slot: int, grid: int = 2, thread: int = 7) -> np.ndarray:
    row = np.zeros(1, dtype=LAUNCH_DTYPE)
    row["kind"], row["op"], row["thread"], row["kernel_slot"] = LAUNCH_KINDS["eager"], op, thread, slot
    row["grid_x"], row["grid_y"], row["grid_z"] = grid, 1, 1
    return row


def test_each_launch_goes_to_the_op_it_names_whatever_the_ring_dropped() -> None:
    ops = OpAttribution()
    long_label = b"model.layers.7.mlp.down_proj aten::mm " + b"x" * 100  # three text records
    ops.on_launches(
        rows_of(
            launch(0, 0),
            *op_row(1, 1, long_label),
            *op_row(2, 2, b"other thread"),
            launch(2, 5, thread=2),
            launch(1, 3),
            launch(0, 4),
            launch(1, 3, grid=4),
        )
    )
    # op 3's text was dropped; op 4's record itself was dropped; op 5 claims a 1 MiB label
    ops.on_launches(
        rows_of(
            *op_row(3, 1, b"lost", text_bytes=200)[:1],
            launch(3, 9),
            launch(4, 9),
            *op_row(5, 1, b"huge", text_bytes=1 << 20),
            launch(5, 9),
        )
    )
    assert ops.labels == {long_label.decode(): {3: [2, 6]}, "other thread": {5: [1, 2]}, LABEL_LOST: {9: [3, 6]}}
    totals = ops.report()
    assert (totals.ops, totals.launches_attributed, totals.launches_without_op, totals.labels) == (4, 6, 2, 3)


def test_labels_beyond_the_bound_go_to_other() -> None:
    ops = OpAttribution()
    ops.MAX_LABELS = 2
    for op in range(1, 5):
        ops.on_launches(rows_of(*op_row(op, 7, f"label {op}".encode()), launch(op, op)))
    assert set(ops.labels) == {"label 1", "label 2", "(other ops)"}
    assert ops.report().launches_other == 2


def test_only_the_last_ops_labels_are_kept() -> None:
    ops = OpAttribution()
    ops.KEEP_OPS = 3
    ops.on_launches(rows_of(*[piece for op in range(1, 6) for piece in op_row(op, 7, f"op {op}".encode())]))
    assert list(ops.ops) == [3, 4, 5]
    ops.on_launches(rows_of(launch(1, 0), launch(5, 0)))  # op 1's label is no longer held
    assert ops.labels == {LABEL_LOST: {0: [1, 2]}, "op 5": {0: [1, 2]}}


def test_ops_refuses_a_bad_top(start_daemon) -> None:
    daemon = start_daemon()
    done = gpuobsctl(daemon.address, "ops", "--top", "100001")
    assert done.returncode == 1 and "top must be within" in done.stderr


GRAPH_NODES, NODES_PER_OP, REPLAYS = 10, 3, 40


def test_graph_nodes_carry_the_labels_of_the_ops_that_captured_them(start_synth, start_daemon) -> None:
    """gpuobs-synth captures its graph with an op for every NODES_PER_OP nodes (op k: nodes
    (k - 1) * 3 to k * 3, label (k - 1) % 3), then replays it: every node execution goes to the
    label of its node's op, with no record per replay."""
    synth = start_synth(
        "--mode",
        "counter",
        "--graph-nodes",
        str(GRAPH_NODES),
        "--ops",
        str(NODES_PER_OP),
        "--launches",
        str(GRAPH_NODES * REPLAYS),
        "--kernels",
        str(KERNELS),
    )
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone(10)
    out = json.loads(gpuobsctl(daemon.address, "--output", "json", "ops", "--top", "1000").stdout)
    (totals,) = out["totals"]
    ops = -(-GRAPH_NODES // NODES_PER_OP)
    assert (totals["ops"], totals["nodes_captured"], totals["nodes_without_op"], totals["launches_attributed"]) == (
        ops,
        GRAPH_NODES,
        0,
        0,
    )
    kernels = {
        k["slot"]: k
        for k in json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"]
    }
    names = [k["name"] for k in sorted(kernels.values(), key=lambda k: k["slot"])]
    per_launch_blocks = {k["name"]: k["blocks_expected"] // k["launches"] for k in kernels.values()}
    expected: dict[tuple[str, str], list[int]] = {}
    for node in range(GRAPH_NODES):  # node i runs kernel i % KERNELS in every replay
        op = node // NODES_PER_OP + 1
        row = expected.setdefault((LABELS[(op - 1) % 3], names[node % KERNELS]), [0, 0])
        row[0] += 1
        row[1] += REPLAYS
    got = {(row["op"], row["kernel"]): row for row in out["ops"]}
    assert {key: [row["graph_nodes"], row["node_executions"]] for key, row in got.items()} == expected
    for (_label, kernel), row in got.items():
        assert row["launches"] == 0 and row["blocks"] == row["node_executions"] * per_launch_blocks[kernel]
    text = gpuobsctl(daemon.address, "ops")
    assert f"{GRAPH_NODES} graph nodes captured under an op" in text.stdout and "NODE RUNS" in text.stdout


def op_nodes(op: int, graph: int, nodes: list[int], capture: int = 1) -> np.ndarray:
    """An op nodes record as the injector writes it (every node a kernel node)."""
    row = np.zeros(1, dtype=OP_NODES_DTYPE)
    row["kind"], row["op"], row["graph"], row["count"] = LAUNCH_KINDS["op_nodes"], op, graph, len(nodes)
    row["capture_id"], row["kernel_mask"] = capture, (1 << len(nodes)) - 1
    row["nodes"]["node"][0, : len(nodes)] = nodes
    return row


def exec_created(graph_exec: int, graph: int) -> np.ndarray:
    row = np.zeros(1, dtype=LAUNCH_DTYPE)
    row["kind"], row["graph_exec"], row["graph_node"] = LAUNCH_KINDS["graph_exec_created"], graph_exec, graph
    return row


class JoinedOps:
    """The graph join and the op attribution fed the same launch ring rows, as the drain feeds a
    process's analyses (the join first)."""

    def __init__(self) -> None:
        self.join = GraphJoin()
        self.ops = OpAttribution(self.join.by_handle.get)

    def feed(self, *records: np.ndarray) -> None:
        rows = rows_of(*records)
        self.join.on_launches(rows)
        self.ops.on_launches(rows)

    def node_rows(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(label, slot) -> (graph nodes, their executions)."""
        return {(label, slot): (row.nodes, row.executions) for label, slot, row in self.ops.graph_rows()}


def replay(graph_exec: int, number: int, nodes: list[tuple[int, int]], recorded: bool = True) -> list[np.ndarray]:
    """A graph launch record and, when it is recorded node by node, a node launch record per
    (node, kernel slot), as the injector writes a replay (a node keeps one grid id)."""
    launch_row = np.zeros(1, dtype=LAUNCH_DTYPE)
    launch_row["kind"], launch_row["graph_exec"], launch_row["replay"] = (
        LAUNCH_KINDS["graph_launch"],
        graph_exec,
        number,
    )
    launch_row["flags"] = GRAPH_NODES_RECORDED if recorded else 0
    rows = [launch_row]
    for node, slot in nodes if recorded else []:
        row = np.zeros(1, dtype=LAUNCH_DTYPE)
        row["kind"], row["graph_exec"], row["graph_node"], row["kernel_slot"] = (
            LAUNCH_KINDS["graph_node"],
            graph_exec,
            node,
            slot,
        )
        row["grid_x"] = row["grid_y"] = row["grid_z"] = 1
        row["grid_id"], row["replay"] = graph_exec * 100 + node, number
        rows.append(row)
    return rows


def test_an_exec_takes_the_labels_of_the_graph_it_was_made_from() -> None:
    """Through the real graph join: labels go to the exec made from the labelled graph, not to an
    exec of another graph with the same node handles, nor to a later exec that reuses the handle."""
    joined = JoinedOps()
    joined.feed(
        *op_row(1, 7, b"layer.0 aten::mm"),
        op_nodes(1, 0x900, [0xA1]),
        *op_row(2, 7, b"layer.0 aten::silu"),
        op_nodes(2, 0x900, [0xA2, 0xA3]),
        exec_created(0xE1, 0x900),
        exec_created(0xE2, 0x901),
    )
    nodes = [(0xA1, 4), (0xA2, 5), (0xA3, 5)]
    joined.feed(*replay(0xE1, 1, nodes), *replay(0xE1, 2, nodes, False), *replay(0xE2, 3, nodes))
    assert joined.node_rows() == {("layer.0 aten::mm", 4): (1, 2), ("layer.0 aten::silu", 5): (2, 4)}
    grid_id = {node: 0xE1 * 100 + node for node in (0xA1, 0xA2, 0xA3)}  # as replay() gives them
    assert joined.ops.node_labels() == {
        grid_id[0xA1]: "layer.0 aten::mm",
        grid_id[0xA2]: "layer.0 aten::silu",
        grid_id[0xA3]: "layer.0 aten::silu",
    }
    joined.feed(exec_created(0xE1, 0x902), *replay(0xE1, 4, nodes))  # the handle reused for another graph
    assert joined.node_rows() == {("layer.0 aten::mm", 4): (1, 2), ("layer.0 aten::silu", 5): (2, 4)}
    assert joined.ops.node_labels() == {}  # a recording now must not give the new exec's nodes the old labels
    ops = joined.ops
    assert (ops.report().nodes_captured, ops.report().nodes_without_op) == (3, 0)
    assert (ops.bound_by_graph, ops.bound_by_order, ops.matched_by_position) == (1, 0, 0)


def test_captures_and_bound_execs_are_bounded() -> None:
    ops = OpAttribution(lambda handle: GraphExec(handle, instance=handle))
    ops.KEEP_GRAPHS, ops.KEEP_EXECS = 2, 3
    records = [piece for op in range(1, 4) for piece in op_row(op, 7, f"op {op}".encode())]
    records += [op_nodes(op, 0x900 + op, [op], capture=op) for op in range(1, 4)] + [op_nodes(0, 0x900, [9], capture=9)]
    ops.on_launches(rows_of(*records))
    assert list(ops.captured) == [3, 9] and ops.report().nodes_without_op == 1
    for n in range(5):  # each made right after a capture of its own
        ops.on_launches(
            rows_of(
                *op_row(10 + n, 7, b"x"),
                op_nodes(10 + n, 0x800 + n, [n], capture=10 + n),
                exec_created(0xE0 + n, 0x800 + n),
            )
        )
    assert list(ops.bound) == [0xE2, 0xE3, 0xE4] and ops.bound_by_graph == 5


def test_an_exec_whose_creation_names_no_captured_graph_takes_the_capture_made_before_it() -> None:
    """If the graph in the creation record is not the capture's, the exec made right after a
    capture takes that capture's labels; an exec made after it, with no capture between, none;
    and a capture binds one exec only (a later exec of a reused graph handle takes none)."""
    ops = OpAttribution(lambda handle: GraphExec(handle, instance=handle))
    ops.on_launches(
        rows_of(
            *op_row(1, 7, b"a aten::mm"),
            op_nodes(1, 0x900, [0xA1, 0xA2]),
            exec_created(0xE1, 0),
            exec_created(0xE2, 0),
            exec_created(0xE3, 0x900),
        )
    )
    assert list(ops.bound) == [0xE1] and ops.bound[0xE1].capture.labels == {0xA1: "a aten::mm", 0xA2: "a aten::mm"}
    assert (ops.bound_by_graph, ops.bound_by_order) == (0, 1)


def test_nodes_whose_handles_differ_are_matched_by_position_in_the_first_replay() -> None:
    """Should the replay's node handles not be the captured ones, the k-th kernel node of the first
    recorded replay takes the label of the k-th kernel node captured (op 0's nodes keep their place
    and take none); with another count of nodes, no label is guessed."""
    joined = JoinedOps()
    joined.feed(
        *op_row(1, 7, b"a aten::mm"),
        op_nodes(1, 0x900, [0xA1], capture=5),
        op_nodes(0, 0x900, [0xA2], capture=5),
        *op_row(2, 7, b"a aten::silu"),
        op_nodes(2, 0x900, [0xA3], capture=5),
        exec_created(0xE1, 0x900),
        *op_row(3, 7, b"b aten::mm"),
        op_nodes(3, 0x901, [0xB1], capture=6),
        exec_created(0xE2, 0x901),
    )
    joined.feed(*replay(0xE1, 1, [(0xF1, 0), (0xF2, 1), (0xF3, 2)]), *replay(0xE2, 2, [(0xF7, 0), (0xF8, 1)]))
    assert joined.node_rows() == {}  # no later launch yet: the first replays may still be arriving
    joined.feed(*replay(0xE1, 3, [], recorded=False), *replay(0xE2, 4, [], recorded=False))
    # e2: 2 nodes against 1 captured
    assert joined.node_rows() == {("a aten::mm", 0): (1, 2), ("a aten::silu", 2): (1, 2)}
    assert joined.ops.matched_by_position == 1


# -- device time (blocks mode) -----------------------------------------------------------------
BLOCK_ENTER, BLOCK_EXIT = EVENT_KINDS["block_enter"], EVENT_KINDS["block_exit"]
FIRST_NODE = 0xA000  # gpuobs-synth's graph node handles: FIRST_NODE + node index


def written_records(synth: SynthProcess, directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every event and launch record an exited gpuobs-synth left in its segment, read from a copy
    (the daemon drains the segment itself afterwards): what the expected times come from."""
    copy = directory / synth.segment.name
    shutil.copy(synth.segment, copy)  # its mode too: the reader refuses a world-readable segment
    segment = Segment(copy, exclusive=False)
    events = [segment.read_events(ring).copy() for ring in range(segment.event_rings) for _ in range(64)]
    launches = [segment.read_launches().copy() for _ in range(64)]
    return np.concatenate(events), np.concatenate(launches)


def spans_written(events: np.ndarray, blocks: dict[tuple[int, int], int]) -> dict[tuple[int, int], int | None]:
    """(grid id, replay) -> its first block enter to its last block event when every block of it
    entered and exited, None when some of its block events are missing; event by event."""
    seen: dict[tuple[int, int], list[int]] = {}  # enters, exits, first enter, last event
    for kind, grid_id, replay, at in events[["kind", "grid_id", "replay", "globaltimer_ns"]].tolist():
        if kind in (BLOCK_ENTER, BLOCK_EXIT):
            span = seen.setdefault((grid_id, replay), [0, 0, 1 << 63, 0])
            span[0 if kind == BLOCK_ENTER else 1] += 1
            span[2] = min(span[2], at) if kind == BLOCK_ENTER else span[2]
            span[3] = max(span[3], at)
    return {
        key: last - first if enters == exits == blocks[key] else None
        for key, (enters, exits, first, last) in seen.items()
    }


def expected_device(
    keys: dict[tuple[int, int], tuple[str, str]], spans: dict[tuple[int, int], int | None]
) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(label, kernel) -> (device ns, timed, partial) over the launches `keys` maps to a row."""
    rows: dict[tuple[str, str], list[int]] = {row: [0, 0, 0] for row in keys.values()}
    for key, row in keys.items():
        if key in spans:
            span = spans[key]
            rows[row][0] += span or 0
            rows[row][1 if span is not None else 2] += 1
    return {row: tuple(counts) for row, counts in rows.items()}


def assert_device_columns(address: str, expected: dict[tuple[str, str], tuple[int, int, int]]) -> None:
    """Each row's device time, timed and partial launches are the expected ones, its share is of
    the process's device time (every row here is an op's), and the table shows it."""
    out = json.loads(gpuobsctl(address, "--output", "json", "ops", "--top", "1000").stdout)
    got = {(row["op"], row["kernel"]): row for row in out["ops"]}
    assert {key: (row["device_ns"], row["timed"], row["partial"]) for key, row in got.items()} == expected
    (totals,) = out["totals"]
    total = [sum(counts[i] for counts in expected.values()) for i in range(3)]
    assert [totals["device_ns"], totals["timed"], totals["partial"]] == total
    for row in got.values():
        assert row["share"] == (pytest.approx(row["device_ns"] / total[0]) if row["timed"] else None)
    shares = {line.split()[7] for line in gpuobsctl(address, "ops").stdout.splitlines() if "model.layers." in line}
    assert shares == {f"{100 * row['share']:.1f}%" if row["timed"] else "-" for row in got.values()}


def kernel_names(address: str) -> dict[int, str]:
    kernels = json.loads(gpuobsctl(address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"]
    return {k["slot"]: k["name"] for k in kernels}


def grid_blocks(records: np.ndarray) -> list[int]:
    return (records["grid_x"].astype(np.int64) * records["grid_y"] * records["grid_z"]).tolist()


# a ring that keeps every event, and one that fills in the 22nd launch (nobody reads it while the
# synth runs): a launch cut by it is partial, those after it have no events
@pytest.mark.parametrize("ring_records", [1 << 17, 1 << 12])
def test_blocks_mode_gives_each_ops_launches_their_device_time(
    start_synth, start_daemon, tmp_path: Path, ring_records: int
) -> None:
    synth = start_synth(
        "--mode",
        "blocks",
        "--launch-trace",
        "--ops",
        str(PER_OP),
        "--launches",
        "200",
        "--kernels",
        str(KERNELS),
        "--ring-records",
        str(ring_records),
    )
    assert synth.wait() == 0
    events, launches = written_records(synth, tmp_path)
    daemon = start_daemon("--analysis-share", "1")  # timed here, not the daemon's budget for it
    daemon.wait_all_gone(10)
    names = kernel_names(daemon.address)
    eager = launches[launches["kind"] == LAUNCH_KINDS["eager"]]
    assert len(eager) == 200
    keys = {
        (grid_id, 0): (LABELS[(op - 1) % 3], names[slot])
        for grid_id, op, slot in eager[["grid_id", "op", "kernel_slot"]].tolist()
    }
    spans = spans_written(events, dict(zip(keys, grid_blocks(eager))))
    expected = expected_device(keys, spans)
    timed, partial = (sum(counts[i] for counts in expected.values()) for i in (1, 2))
    assert (timed, partial) == (200, 0) if ring_records > 1 << 12 else (0 < timed < 200 and partial == 1)
    assert_device_columns(daemon.address, expected)


@pytest.mark.parametrize("ring_records", [1 << 17, 1 << 12])
def test_blocks_mode_gives_graph_nodes_of_ops_their_device_time(
    start_synth, start_daemon, tmp_path: Path, ring_records: int
) -> None:
    """Every execution of a node timed from its own (grid id, replay) events, under its op's label."""
    synth = start_synth(
        "--mode",
        "blocks",
        "--graph-nodes",
        str(GRAPH_NODES),
        "--ops",
        str(NODES_PER_OP),
        "--launches",
        str(GRAPH_NODES * REPLAYS),
        "--kernels",
        str(KERNELS),
        "--ring-records",
        str(ring_records),
    )
    assert synth.wait() == 0
    events, launches = written_records(synth, tmp_path)
    daemon = start_daemon("--analysis-share", "1")
    daemon.wait_all_gone(10)
    names = kernel_names(daemon.address)
    nodes = launches[launches["kind"] == LAUNCH_KINDS["graph_node"]]  # the first replay's, node by node
    assert len(nodes) == GRAPH_NODES
    keys, blocks = {}, {}
    for (grid_id, node, slot), size in zip(
        nodes[["grid_id", "graph_node", "kernel_slot"]].tolist(), grid_blocks(nodes)
    ):
        op = (node - FIRST_NODE) // NODES_PER_OP + 1
        for replay in range(1, REPLAYS + 1):
            keys[(grid_id, replay)] = (LABELS[(op - 1) % 3], names[slot])
            blocks[(grid_id, replay)] = size
    expected = expected_device(keys, spans_written(events, blocks))
    timed, partial = (sum(counts[i] for counts in expected.values()) for i in (1, 2))
    executions = GRAPH_NODES * REPLAYS
    assert (timed, partial) == (executions, 0) if ring_records > 1 << 12 else (0 < timed < executions and partial == 1)
    assert_device_columns(daemon.address, expected)


def test_a_mode_without_block_events_times_nothing(start_synth, start_daemon) -> None:
    """Counter mode: no row is timed, so none has a share (null, '-'), not 0%."""
    synth = start_synth(
        "--mode", "counter", "--launch-trace", "--ops", str(PER_OP), "--launches", "40", "--kernels", str(KERNELS)
    )
    daemon = start_daemon()
    assert synth.wait() == 0
    daemon.wait_all_gone(10)
    out = json.loads(gpuobsctl(daemon.address, "--output", "json", "ops").stdout)
    assert out["ops"] and all(
        (row["device_ns"], row["timed"], row["partial"], row["share"]) == (0, 0, 0, None) for row in out["ops"]
    )
    assert (out["totals"][0]["device_ns"], out["totals"][0]["timed"]) == (0, 0)
    rows = [line.split() for line in gpuobsctl(daemon.address, "ops").stdout.splitlines() if "model.layers." in line]
    assert rows and all((cells[5], cells[7]) == ("-", "-") for cells in rows)


def test_eager_launches_waiting_for_their_blocks_are_bounded() -> None:
    """A launch whose block events are all in is timed; one some of whose events were dropped
    waits, and is counted partial (never timed) once the bound lets it go or the process is gone;
    a launch whose record was let go (KEEP_LAUNCHES) takes none of its events."""
    ops = OpAttribution(budget=TimeBudget(share=UNLIMITED_SHARE, burst_s=1.0))
    ops.KEEP_LAUNCHES, ops.MAX_IN_FLIGHT = 5, 1
    records = rows_of(*op_row(1, 7, b"a aten::mm"), *[launch(1, 3, grid=4) for _ in range(5)], launch(0, 2, grid=4))
    records["grid_id"][-6:] = [10, 11, 12, 13, 14, 15]  # 10's record is let go: the ring holds the last 5
    ops.on_launches(records)

    def blocks(grid_id: int, t0: int, count: int = 4) -> list[np.ndarray]:
        return [
            block_events(grid_id, 0, count, slot=3, t0=t0),
            block_events(grid_id, 0, count, slot=3, t0=t0 + 5, kind="block_exit"),
        ]

    batch = np.concatenate([*blocks(10, 0), *blocks(11, 100), *blocks(12, 1000, 3), *blocks(15, 5000)])
    ops.on_events(batch, np.bincount(batch["kind"], minlength=max(EVENT_KINDS.values()) + 1))
    assert (ops.eager_time("a aten::mm", 3).timed, ops.eager_time("a aten::mm", 3).ns) == (1, 35)  # 11: 100..135
    assert (ops.outside_time.timed, ops.outside_time.ns) == (1, 35)  # 15, outside any op
    assert list(ops.in_flight) == [12] and ops.report().timings_let_go == 0
    batch = np.concatenate(blocks(13, 2000, 2))  # 13 waits too, and 12 is let go
    ops.on_events(batch, np.bincount(batch["kind"], minlength=max(EVENT_KINDS.values()) + 1))
    assert list(ops.in_flight) == [13] and ops.report().timings_let_go == 1
    ops.settle(ALL_REPLAYS)
    row = ops.eager_time("a aten::mm", 3)
    assert (row.ns, row.timed, row.partial) == (35, 1, 2) and not ops.in_flight
    assert (ops.eager_total().ns, ops.eager_total().timed) == (70, 2)
