"""Which launch a device event belongs to: the one key that every join of events to launches
uses (the daemon's graph join and block pairing, the trace export).

A kernel launch is told apart by its grid id, which the device gives each launch, except that a
CUDA graph node keeps its grid id in every replay of its exec: a node execution is told apart by
(grid id, replay number), the number the injector pushes into device memory at each graph
launch and the patches stamp into every event (its low 32 bits). An eager launch's events carry
whatever replay number was in force, which may change while its blocks run: its key is its grid
id alone, with 0 for the replay."""

from __future__ import annotations

import numpy as np

from gpuobs.segment import EVENT_DTYPE

REPLAY_BITS = EVENT_DTYPE["replay"].itemsize * 8  # an event carries the replay number's low bits (32)
REPLAY_MASK = (1 << REPLAY_BITS) - 1


def launch_key(grid_id: int, replay: int) -> int:
    """One launch (one replay of a graph node) as one int: the grid id above the low 32 bits of
    the replay number (0 for an eager launch)."""
    return (grid_id << REPLAY_BITS) | (replay & REPLAY_MASK)


def key_grid_id(key: int) -> int:
    return key >> REPLAY_BITS


def key_replay(key: int) -> int:
    """The low 32 bits of the replay number (0 for an eager launch)."""
    return key & REPLAY_MASK


def key_replays(grid_ids: np.ndarray, replays: np.ndarray, node_grid_ids: np.ndarray) -> np.ndarray:
    """The replay part of each event's key: its replay number where its grid id is a graph
    node's (`node_grid_ids`), 0 for an eager launch."""
    return np.where(np.isin(grid_ids, node_grid_ids), replays, 0).astype(np.uint64)


def group_by_launch(grid_ids: np.ndarray, replays: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Events grouped by launch, given each one's grid id and the replay part of its key:
    (order, starts, keys), where `order` (stable) puts each launch's events together, `starts`
    is where each launch begins in that order, and `keys` its launch_key. Exact for any grid id
    (no packing into 64 bits)."""
    order = np.lexsort((replays, grid_ids))
    grids, numbers = grid_ids[order], replays[order]
    change = (grids[1:] != grids[:-1]) | (numbers[1:] != numbers[:-1])
    starts = np.flatnonzero(np.concatenate([[True], change])) if len(order) else np.zeros(0, dtype=np.int64)
    keys = [launch_key(grid, replay) for grid, replay in zip(grids[starts].tolist(), numbers[starts].tolist())]
    return order, starts, keys
