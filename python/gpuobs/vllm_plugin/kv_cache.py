"""What the vLLM engine says of its KV cache, for gpuobsd to name the slots each request wrote:
the blocks each step hands to each request (the scheduler output's block ids) and where each
layer's cache lies (the model runner's cache tensors). Sent only where stores to the cache can be
seen (the cache kernel's accesses hooked), so that other deployments pay nothing for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuobs.step_text import KvCacheLayout

GROUP = 0  # the attention backend asked for the cache's shape: the first KV-cache group's
# sizes a real cache never has, to find the dimensions an attention backend puts them in
PROBE_BLOCKS, PROBE_POSITIONS, PROBE_HEADS, PROBE_HEAD_SIZE = 7919, 16 * 997, 3, 1021


def cache_stores_seen(env: Mapping[str, str]) -> bool:
    """Whether the injector hooks the accesses of chosen kernels (GPUOBS_MEMORY_KERNELS) or of
    every kernel (the memory patch set): only then can a store to the cache be seen."""
    return bool(env.get("GPUOBS_MEMORY_KERNELS", "").strip()) or env.get("GPUOBS_PATCH_SET", "") == "memory"


def group_blocks(block_ids: Any) -> list[int]:
    """Every group's block ids of vLLM's per-group tuple (None or empty: none): block ids are
    the one pool's, whichever group (full or sliding-window attention) a block serves."""
    if not block_ids:
        return []
    return [int(block) for group in block_ids if group for block in group]


def new_blocks(scheduler_output: Any) -> dict[str, list[int]]:
    """request -> the blocks that became its in this step: a new or resumed request's whole list,
    a running one's appended blocks."""
    blocks: dict[str, list[int]] = {}
    for request in scheduler_output.scheduled_new_reqs:
        if ids := group_blocks(request.block_ids):
            blocks[str(request.req_id)] = ids
    cached = scheduler_output.scheduled_cached_reqs
    for request, block_ids in zip(cached.req_ids, cached.new_block_ids, strict=False):
        if ids := group_blocks(block_ids):
            blocks[str(request)] = ids
    return blocks


def cache_dims(runner: Any, dims: int) -> tuple[int, int]:
    """(block dimension, position dimension) of the first group's attention backend, found by
    asking it for the shape of a cache of sizes no real one has; where it cannot say, vLLM's
    common layout: blocks first, then (key, value) where there are five dimensions, then positions."""
    try:
        backend = runner.attn_groups[GROUP][0].backend
        shape = tuple(backend.get_kv_cache_shape(PROBE_BLOCKS, PROBE_POSITIONS, PROBE_HEADS, PROBE_HEAD_SIZE))
        if len(shape) == dims:
            return shape.index(PROBE_BLOCKS), shape.index(PROBE_POSITIONS)
    except (AttributeError, IndexError, TypeError, ValueError, NotImplementedError):
        pass
    return 0, 2 if dims == 5 else 1


def kv_cache_layout(worker: Any) -> KvCacheLayout | None:
    """The layout of the model runner's per-layer cache tensors, or None where it has none (yet)
    or they differ in shape, strides or element size (a hybrid model: not described)."""
    runner = getattr(worker, "model_runner", None)
    caches = [cache for cache in getattr(runner, "kv_caches", None) or [] if cache is not None]
    if not caches or not all(hasattr(cache, "data_ptr") for cache in caches):
        return None  # none yet, or a state that is not one tensor (a Mamba layer's list)
    first = caches[0]
    shape, strides, element = tuple(first.shape), tuple(first.stride()), int(first.element_size())
    if any(tuple(c.shape) != shape or tuple(c.stride()) != strides or c.element_size() != element for c in caches):
        return None
    block_dim, position_dim = cache_dims(runner, len(shape))
    block_size = int(getattr(getattr(runner, "cache_config", None), "block_size", 0) or shape[position_dim])
    bases = tuple(dict.fromkeys(int(cache.data_ptr()) for cache in caches))  # shared layers once
    try:
        return KvCacheLayout(block_size, element, shape, strides, block_dim, position_dim, bases)
    except ValueError:
        return None
