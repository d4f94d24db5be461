"""The device's launch census (launch_census.h) as the segment publishes it: launches, blocks
and shapes per kernel without a launch record, counted with the patches' own code (through the
test writer), checked against the launches the test made."""

from __future__ import annotations

import collections
import random
from pathlib import Path

from gpuobs import _native
from gpuobs.segment import Segment


def census(tmp_path: Path, launches: list[tuple[int, tuple, tuple]], observed: bool = True) -> Segment:
    writer = _native.Writer(str(tmp_path), kernel_slots=8)
    for slot in range(4):
        writer.register_kernel(f"kernel_{slot}")
    for slot, grid, block in launches:
        writer.count_launch(slot, list(grid), list(block), observed)
    writer.publish(quiescent=True)
    return Segment(writer.path)


def test_counts_launches_blocks_and_each_shape_exactly(tmp_path: Path) -> None:
    made = [(0, (128, 1, 1), (256, 1, 1))] * 5 + [(0, (7, 3, 2), (32, 4, 1))] * 3 + [(2, (1, 1, 1), (1024, 1, 1))] * 2
    segment = census(tmp_path, made)
    counters, kernels = segment.counters()
    assert counters["launches"] == 10
    assert (int(kernels[0]["launches"]), int(kernels[2]["launches"]), int(kernels[1]["launches"])) == (8, 2, 0)
    assert int(kernels[0]["blocks_expected"]) == int(kernels[0]["blocks_observed"]) == 5 * 128 + 3 * 42
    assert int(kernels[2]["blocks_expected"]) == 2
    shapes = segment.reader.launch_shapes()
    assert set(shapes) == {0, 2}
    assert sorted(shapes[0][0]) == sorted([((128, 1, 1), (256, 1, 1), 5), ((7, 3, 2), (32, 4, 1), 3)])
    assert shapes[0][1] == 0 and shapes[2] == ([((1, 1, 1), (1024, 1, 1), 2)], 0)


def test_blocks_of_off_and_noop_count_as_unobserved(tmp_path: Path) -> None:
    segment = census(tmp_path, [(1, (10, 2, 1), (64, 1, 1))] * 4, observed=False)
    _, kernels = segment.counters()
    assert int(kernels[1]["blocks_expected"]) == int(kernels[1]["blocks_unobserved"]) == 80
    assert int(kernels[1]["blocks_observed"]) == 0


def test_many_shapes_are_never_misattributed_and_always_add_up(tmp_path: Path) -> None:
    """More shapes than buckets: shapes that met another in a bucket count as other launches,
    never under a wrong shape, and shapes plus other equal the launches."""
    rng = random.Random(5)
    made = [(3, (rng.randint(1, 5000), rng.randint(1, 3), 1), (rng.choice([64, 128, 256]), 1, 1)) for _ in range(400)]
    truth = collections.Counter((grid, block) for _, grid, block in made)
    assert len(truth) > 40
    segment = census(tmp_path, made)
    _, kernels = segment.counters()
    shapes, other = segment.reader.launch_shapes()[3]
    assert sum(count for _, _, count in shapes) + other == int(kernels[3]["launches"]) == 400
    for grid, block, count in shapes:
        assert truth[(grid, block)] == count, (grid, block)
    assert other > 0  # 8 buckets cannot hold 40 shapes


def test_shape_hash_is_never_zero_and_buckets_spread() -> None:
    hashes = [_native.shape_hash(_native.pack_grid(x, 1, 1), _native.pack_block(128, 1, 1)) for x in range(1, 2000)]
    assert all(h != 0 for h in hashes)
    buckets = collections.Counter(h >> 61 for h in hashes)
    assert len(buckets) == 8 and min(buckets.values()) > 150
