"""A step's text (gpuobs.step_text), the one grammar the plugin writes and gpuobsd reads: request
lines with tokens and the blocks handed out, the `same` and `kv-cache` directives, and what a
torn or foreign text gives; the KV cache's layout refused unless sound."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from gpuobs import step_text
from gpuobs.daemon.cache_writes import slots_of
from gpuobs.step_text import KvCacheLayout

# vLLM's FlashAttention cache of one layer: (blocks, key/value, positions, heads, head size)
FLASH = KvCacheLayout(16, 2, (100, 2, 16, 8, 128), (32768, 16384, 1024, 128, 1), 0, 2, (0x7000_0000, 0x7100_0000))


def test_request_lines_read_back_ids_tokens_and_blocks() -> None:
    text = step_text.encode([("a", 7), ("b", 1)], {"a": [3, 4]}, FLASH)
    parsed = step_text.parse(text.decode())
    assert (parsed.ids, parsed.tokens, parsed.blocks, parsed.same) == (["a", "b"], [7, 1], {"a": [3, 4]}, False)
    assert KvCacheLayout.from_json(parsed.kv_cache) == FLASH
    assert step_text.parse("a b\t3") == step_text.StepText(["a b"], [3])
    assert step_text.parse("") == step_text.StepText()


def test_older_or_torn_lines_keep_the_ids_and_give_no_tokens() -> None:
    for text, ids in [("a\nb", ["a", "b"]), ("a\t7\nb\t-1", ["a", "b"]), ("a\tx", ["a"])]:
        parsed = step_text.parse(text)
        assert (parsed.ids, parsed.tokens) == (ids, []), text
    bad_blocks = step_text.parse("a\t1\t3,x,5")
    assert (bad_blocks.ids, bad_blocks.tokens, bad_blocks.blocks, bad_blocks.refused) == (["a"], [1], {}, 1)


def test_a_same_step_carries_only_the_requests_handed_blocks() -> None:
    text = step_text.encode(None, {"b": [9], "c": []}).decode()
    assert text == "\x1fsame\nb\t\t9"
    parsed = step_text.parse(text)
    assert (parsed.same, parsed.ids, parsed.tokens, parsed.blocks) == (True, [], [], {"b": [9]})
    assert step_text.parse("\x1fnonsense\na\t1").refused == 1


def test_an_id_that_would_split_its_line_or_read_as_a_directive_stays_one_request() -> None:
    text = step_text.encode([("x\ty", 1), ("\x1fsame", 2), ("n\n", 3)])
    parsed = step_text.parse(text.decode())
    assert (parsed.ids, parsed.tokens, parsed.same) == (["x y", " \x1fsame", "n "], [1, 2, 3], False)


@pytest.mark.parametrize(
    "change",
    [
        {"shape": (100, 2, 16)},  # fewer dimensions than strides
        {"strides": (32768, 16384, 1024, 128, 0)},
        {"block_dim": 2},  # blocks and positions in one dimension
        {"position_dim": 7},
        {"element_bytes": 3},
        {"block_size": 0},
        {"bases": ()},
        {"bases": (0,)},
        {"strides": (1024, 16384, 1024, 128, 1)},  # two dimensions over the same bytes
    ],
)
def test_an_unsound_layout_is_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="KV-cache layout"):
        dataclasses.replace(FLASH, **change)
    raw = json.loads(FLASH.to_json()) | {key: list(v) if isinstance(v, tuple) else v for key, v in change.items()}
    with pytest.raises(ValueError):
        KvCacheLayout.from_json(json.dumps(raw))


@pytest.mark.parametrize(
    "text", ["", "[]", "{}", '{"block_size": 16}', FLASH.to_json().replace("16,", '"16",', 1), "{" * 5000]
)
def test_an_unreadable_layout_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        KvCacheLayout.from_json(text)


def test_an_address_names_its_slot_in_any_layer_and_nothing_outside() -> None:
    base = FLASH.bases[1]
    # block 7, value half, position 5, head 3, element 9 of layer 1
    address = base + 2 * (7 * 32768 + 1 * 16384 + 5 * 1024 + 3 * 128 + 9)
    inside = [address, FLASH.bases[0], base + 2 * (99 * 32768 + 16384 + 15 * 1024 + 7 * 128 + 127)]
    outside = [base - 2, base + 2 * 100 * 32768, 0]
    slots = slots_of(FLASH, np.array(inside + outside, dtype=np.uint64))
    assert slots.tolist() == [7 * 16 + 5, 0, 99 * 16 + 15, -1, -1, -1]


def test_layers_interleaved_in_one_tensor_never_claim_each_others_bytes() -> None:
    """A cross-layer cache (blocks, layers, key/value, positions, heads x size): each layer is a
    view with the layers' stride between blocks; an address of layer 1 read through layer 0's
    view would decompose with a key/value index of 2, which is out of range."""
    row = 4 * 8  # heads x head size, in elements
    strides = (2 * 2 * 16 * row, 16 * row, row, 1)  # blocks (of 2 layers), key/value, positions, row
    layer0 = KvCacheLayout(16, 2, (10, 2, 16, row), strides, 0, 2, (0x1000,))
    layer1 = dataclasses.replace(layer0, bases=(0x1000 + 2 * (2 * 16 * row),))  # the next layer of block 0
    both = dataclasses.replace(layer0, bases=(layer0.bases[0], layer1.bases[0]))
    address = np.array([layer1.bases[0] + 2 * (3 * strides[0] + 16 * row + 4 * row)], dtype=np.uint64)
    assert slots_of(layer0, address).tolist() == [-1]
    assert slots_of(layer1, address).tolist() == [3 * 16 + 4]
    assert slots_of(both, address).tolist() == [3 * 16 + 4]


def test_a_head_major_cache_names_the_same_slots() -> None:
    """HND: (blocks, key/value, positions, heads, size) with heads outermost within a block."""
    hnd = KvCacheLayout(16, 2, (10, 2, 16, 8, 128), (32768, 16384, 128, 2048, 1), 0, 2, (0x9000,))
    address = np.array([0x9000 + 2 * (4 * 32768 + 0 * 16384 + 11 * 128 + 6 * 2048 + 5)], dtype=np.uint64)
    assert slots_of(hnd, address).tolist() == [4 * 16 + 11]
