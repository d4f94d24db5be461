"""Independent arithmetic the tests check gpuobs against: numpy's own MurmurHash3 fmix64 and
sampling decision (not the native one), and the linear block index of an event from its
launch record."""

from __future__ import annotations

import numpy as np

M1, M2, S33 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33)


def numpy_fmix64(key: np.ndarray) -> np.ndarray:
    key = key.astype(np.uint64)
    key ^= key >> S33
    key *= M1
    key ^= key >> S33
    key *= M2
    key ^= key >> S33
    return key


def numpy_sample_keep(pc: np.ndarray, thread: np.ndarray, block: np.ndarray, shift: int) -> np.ndarray:
    block = block.astype(np.uint64)
    rotated = (block << np.uint64(23)) | (block >> np.uint64(41))
    key = pc.astype(np.uint64) ^ (thread.astype(np.uint64) << np.uint64(48)) ^ rotated
    return (numpy_fmix64(key) & np.uint64((1 << shift) - 1)) == 0


BLOCK_KEY_THREAD = np.uint64(1024)  # the thread a block's key carries: no access key has it
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def numpy_block_sample_keep(grid_id: np.ndarray, block: np.ndarray, epoch: np.ndarray, shift: int) -> np.ndarray:
    """`sampled`'s choice of a block in a kernel without access hooks: the access key with the
    grid id mixed with the epoch where the pc is, thread 1024 (sample_hash.h, written again here)."""
    block = block.astype(np.uint64)
    rotated = (block << np.uint64(23)) | (block >> np.uint64(41))
    with np.errstate(over="ignore"):
        mixed = grid_id.astype(np.uint64) ^ (epoch.astype(np.uint64) * GOLDEN)
    key = mixed ^ (BLOCK_KEY_THREAD << np.uint64(48)) ^ rotated
    return (numpy_fmix64(key) & np.uint64((1 << shift) - 1)) == 0


def linear_block(events: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """blockIdx linearised with the grid of each event's launch (joined on grid id)."""
    order = np.argsort(launches["grid_id"])
    index = order[np.searchsorted(launches["grid_id"], events["grid_id"], sorter=order)]
    grid_x = launches["grid_x"][index].astype(np.uint64)
    grid_y = launches["grid_y"][index].astype(np.uint64)
    return events["block_x"] + grid_x * (events["block_y"] + grid_y * events["block_z"].astype(np.uint64))
