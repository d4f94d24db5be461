"""Hand-made launch and event records, as the injector and the patches write them: a graph
exec's replays (graph launch records, and node records for those recorded node by node), a
launch's block events, any events and launch records from their fields, an engine step's."""

from __future__ import annotations

from typing import Any

import numpy as np
from gpuobs.segment import (
    EVENT_DTYPE,
    EVENT_KINDS,
    GRAPH_NODES_RECORDED,
    LAUNCH_DTYPE,
    LAUNCH_KINDS,
    MODES,
    STEP_DTYPE,
    STEP_SAME_REQUESTS,
    STEP_TEXT_DTYPE,
)

EXEC = 0x7000
NODES = {0xA0: (11, 4), 0xA1: (12, 3)}  # node -> (grid id, blocks)


def launch_records(rows: list[dict[str, int]]) -> np.ndarray:
    """Launch records from dicts of their fields (the others 0)."""
    array = np.zeros(len(rows), dtype=LAUNCH_DTYPE)
    for index, row in enumerate(rows):
        for name, value in row.items():
            array[index][name] = value
    return array


def graph_launches(
    replays: range,
    mode: str = "blocks",
    recorded: range | None = None,
    *,
    graph_exec: int = EXEC,
    nodes: dict[int, tuple[int, int]] = NODES,
) -> np.ndarray:
    """Graph launch records of `replays`; those in `recorded` (all, by default) followed by their
    node records, as the injector writes a replay it records node by node. `nodes`: node ->
    (grid id, blocks), kernel slots in order."""
    rows = []
    for replay in replays:
        by_node = recorded is None or replay in recorded
        rows.append(
            dict(
                kind=LAUNCH_KINDS["graph_launch"],
                graph_exec=graph_exec,
                replay=replay,
                kernel_slot=0xFFFFFFFF,
                mode=MODES[mode],
                host_time_ns=replay * 1000,
                flags=GRAPH_NODES_RECORDED if by_node else 0,
            )
        )
        for slot, (node, (grid_id, blocks)) in enumerate(nodes.items() if by_node else ()):
            rows.append(
                dict(
                    kind=LAUNCH_KINDS["graph_node"],
                    graph_exec=graph_exec,
                    graph_node=node,
                    graph_launch_id=replay,
                    replay=replay,
                    grid_id=grid_id,
                    kernel_slot=slot,
                    grid_x=blocks,
                    grid_y=1,
                    grid_z=1,
                    block_x=128,
                    block_y=1,
                    block_z=1,
                    mode=MODES[mode],
                    flags=1,
                    host_time_ns=replay * 1000 + slot,
                )
            )
    return launch_records(rows)


def events(kind: str, count: int, **fields: Any) -> np.ndarray:
    """`count` event records of one kind; each field a scalar or an array of `count`."""
    rows = np.zeros(count, dtype=EVENT_DTYPE)
    rows["kind"] = EVENT_KINDS[kind]
    for name, value in fields.items():
        rows[name] = value
    return rows


def block_events(
    grid_id: int, replay: int, blocks: int, *, slot: int, t0: int, kind: str = "block_enter"
) -> np.ndarray:
    """One event of `kind` per block of a launch (blocks 0.., x only), 10 ns apart from t0."""
    return events(
        kind,
        blocks,
        grid_id=grid_id,
        replay=replay,
        block_x=np.arange(blocks),
        kernel_slot=slot,
        globaltimer_ns=t0 + np.arange(blocks) * 10,
    )


def step_records(step: int, text: bytes | None, *, cut_short: bool = False, host_time_ns: int = 0) -> np.ndarray:
    """A step record, then its text in 56-byte StepText records (the last left out when cut
    short), or with no text the same-requests flag."""
    pieces = [] if text is None else [text[i : i + 56] for i in range(0, len(text), 56)]
    sent = pieces[:-1] if cut_short else pieces
    rows = np.zeros(1 + len(sent), dtype=LAUNCH_DTYPE)
    at = host_time_ns or step * 1_000
    record = rows[:1].view(STEP_DTYPE)
    record["kind"] = LAUNCH_KINDS["step"]
    record["step"] = step
    record["host_time_ns"] = at
    record["text_bytes"] = 0 if text is None else len(text)
    record["flags"] = STEP_SAME_REQUESTS if text is None else 0
    for index, piece in enumerate(sent):
        part = rows[1 + index : 2 + index].view(STEP_TEXT_DTYPE)
        part["kind"] = LAUNCH_KINDS["step_text"]
        part["step"] = step
        part["host_time_ns"] = at
        part["offset"] = index * 56
        part["length"] = len(piece)
        part["text"] = piece
    return rows
