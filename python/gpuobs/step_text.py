"""A step's text, written by the vLLM plugin (and gpuobs-synth) and read by gpuobsd: the one
Python definition of its grammar, whose markers segment/native/include/gpuobs/layout.h defines.

Lines split by '\\n'. One per request scheduled, in the scheduler's order: ID '\\t' TOKENS, and
where KV-cache blocks became the request's in this step, '\\t' and their ids, comma separated (a
new or resumed request's whole list, then the blocks appended). A line that begins with
STEP_TEXT_DIRECTIVE is a directive: `same` (the requests and tokens are those of the step before;
the request lines after it carry only blocks, with TOKENS empty), or `kv-cache JSON`, the layout
of the KV cache (KvCacheLayout), sent again from time to time so that a lost record costs only
the steps until the next.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from gpuobs._native import STEP_TEXT_DIRECTIVE, STEP_TEXT_KV_CACHE, STEP_TEXT_SAME

FIELD = "\t"
MAX_LAYERS = 256  # more layers than any model has
MAX_DIMS = 8
MAX_EXTENT = 1 << 48  # bytes a layer's cache spans at most (256 TiB), and strides and sizes below it
MAX_DIGITS = 19  # a block id or token count longer than this is refused, never converted


@dataclasses.dataclass(frozen=True)
class KvCacheLayout:
    """Where each layer's KV cache lies, so that an address a cache-write kernel stored to names
    a slot: every layer's cache is one strided tensor (the attention backend's shape) at its own
    base address, all of one shape and strides; `block_dim` indexes the kernel's cache blocks and
    `position_dim` a slot within one. Slot = kernel block x its size + position, the number the
    scheduler's block ids count in (block id b holds slots b x block_size up to the next)."""

    block_size: int  # the scheduler's tokens a block
    element_bytes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    block_dim: int
    position_dim: int
    bases: tuple[int, ...]  # each layer's first byte

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(f"a KV-cache layout {problem}")

    def problem(self) -> str:
        dims = len(self.shape)
        if not 0 < dims <= MAX_DIMS or len(self.strides) != dims:
            return f"needs 1 to {MAX_DIMS} dimensions with a stride each, not {self.shape} and {self.strides}"
        if any(size <= 0 for size in self.shape) or any(stride <= 0 for stride in self.strides):
            return f"needs positive sizes and strides, not {self.shape} and {self.strides}"
        if not (0 <= self.block_dim < dims and 0 <= self.position_dim < dims and self.block_dim != self.position_dim):
            return f"needs two distinct dimensions for blocks and positions, not {self.block_dim}, {self.position_dim}"
        if self.block_size <= 0 or self.element_bytes not in (1, 2, 4, 8):
            return f"needs a block size and 1, 2, 4 or 8 bytes an element, not {self.block_size}, {self.element_bytes}"
        if max(*self.shape, *self.strides) >= MAX_EXTENT:
            return f"needs sizes and strides below 2^48, not {self.shape} and {self.strides}"
        extent = self.extent_bytes
        if extent >= MAX_EXTENT:
            return f"spans {extent} bytes a layer, more than 2^48"
        if not 0 < len(self.bases) <= MAX_LAYERS or any(base <= 0 or base + extent >= 1 << 64 for base in self.bases):
            return f"needs 1 to {MAX_LAYERS} layers at addresses it fits after, not {len(self.bases)}"
        ordered = sorted(zip(self.strides, self.shape, strict=True), reverse=True)
        for (outer, _), (inner, inner_size) in zip(ordered, ordered[1:], strict=False):
            if outer < inner * inner_size:
                return f"has overlapping dimensions (shape {self.shape}, strides {self.strides})"
        return ""

    @property
    def extent_bytes(self) -> int:
        """The bytes from a layer's base to the end of its last element."""
        elements = sum((size - 1) * stride for size, stride in zip(self.shape, self.strides, strict=True)) + 1
        return elements * self.element_bytes

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> KvCacheLayout:
        """Raises ValueError for anything but a layout whose every key is there and sound."""
        try:
            raw = json.loads(text)
            fields = {field.name for field in dataclasses.fields(cls)}
            if not isinstance(raw, dict) or set(raw) != fields:
                raise ValueError(f"needs the keys {sorted(fields)}")
            ints = {name: raw[name] for name in ("block_size", "element_bytes", "block_dim", "position_dim")}
            tuples = {name: tuple(raw[name]) for name in ("shape", "strides", "bases")}
            values = [*ints.values(), *(v for t in tuples.values() for v in t)]
            if not all(type(value) is int for value in values):
                raise ValueError("needs whole numbers")
            return cls(**ints, **tuples)  # type: ignore[arg-type]
        except (TypeError, RecursionError, json.JSONDecodeError) as error:
            raise ValueError(f"a KV-cache layout is not readable: {error}") from None


@dataclasses.dataclass
class StepText:
    ids: list[str] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)  # per id; empty where any is unknown
    same: bool = False  # the requests and tokens are the step before's
    blocks: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # request -> blocks now its
    kv_cache: str = ""  # the layout directive's JSON, unread
    refused: int = 0  # lines that were neither: blocks that are not numbers, unknown directives


def one_line(request: str) -> str:
    """The id with nothing that would split its line or read as a directive."""
    cleaned = request.replace("\t", " ").replace("\n", " ")
    return " " + cleaned if cleaned.startswith(STEP_TEXT_DIRECTIVE) else cleaned


def encode(
    scheduled: Sequence[tuple[str, int]] | None,
    blocks: Mapping[str, Sequence[int]] | None = None,
    kv_cache: KvCacheLayout | None = None,
) -> bytes:
    """A step's text: `scheduled` (id, tokens) in order, or None for the same requests as the
    step before (then only the requests with blocks get a line)."""
    blocks = blocks or {}
    lines = [f"{STEP_TEXT_DIRECTIVE}{STEP_TEXT_KV_CACHE} {kv_cache.to_json()}"] if kv_cache else []
    if scheduled is None:
        lines.append(STEP_TEXT_DIRECTIVE + STEP_TEXT_SAME)
        lines += [f"{one_line(request)}{FIELD}{FIELD}{block_list(ids)}" for request, ids in blocks.items() if ids]
    else:
        for request, count in scheduled:
            line = f"{one_line(request)}{FIELD}{count}"
            ids = blocks.get(request)
            lines.append(f"{line}{FIELD}{block_list(ids)}" if ids else line)
    return "\n".join(lines).encode("utf-8", "replace")


def block_list(ids: Sequence[int]) -> str:
    return ",".join(str(int(block)) for block in ids)


def number(text: str) -> bool:
    """Whether `text` is a whole number this grammar takes: ASCII digits, at most MAX_DIGITS."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def parse(text: str) -> StepText:
    """A step's text read back. A request line without a tab or with a count that is not a
    non-negative integer (a producer older than layout 7, a torn record) gives its id and no
    counts for the whole step: a split over some requests only would not add up."""
    parsed = StepText()
    known = True
    for line in text.split("\n") if text else []:
        if line.startswith(STEP_TEXT_DIRECTIVE):
            name, _, rest = line[1:].partition(" ")
            if name == STEP_TEXT_SAME and not rest:
                parsed.same = True
            elif name == STEP_TEXT_KV_CACHE:
                parsed.kv_cache = rest
            else:
                parsed.refused += 1
            continue
        request, tab, rest = line.partition(FIELD)
        count, _, block_text = rest.partition(FIELD)
        if block_text:
            ids = [int(part) for part in block_text.split(",") if number(part)]
            if len(ids) == block_text.count(",") + 1:
                parsed.blocks.setdefault(request, []).extend(ids)
            else:
                parsed.refused += 1
        if parsed.same:
            continue  # a line of blocks only: the requests are the step before's
        parsed.ids.append(request)
        if tab and number(count):
            parsed.tokens.append(int(count))
        else:
            known = False
    if not known or parsed.same:
        parsed.tokens = []
    return parsed
