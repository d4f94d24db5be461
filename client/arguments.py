"""Argument types of the CLI: numbers checked against the range of the API field they fill, so
that a bad number is a one-line usage error, not a traceback from building the request."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from gpuobs import _native

UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1


def number(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not within {low}..{high}")
        return value

    parse.__name__ = "number"
    return parse


uint32 = number(0, UINT32_MAX)
uint64 = number(0, UINT64_MAX)
pid = number(1, (1 << 31) - 1)  # a pid the kernel can hand out
KERNEL_ID_HEX = 12  # as gpuobsd's kernel_labels.KERNEL_ID_HEX (the client does not import the daemon)


def kernel_id(text: str) -> str:
    """A metric series' kernel_id label: 12 hex digits (case as typed does not matter)."""
    value = text.strip().lower()
    if len(value) != KERNEL_ID_HEX or any(char not in "0123456789abcdef" for char in value):
        raise argparse.ArgumentTypeError(f"not a kernel id (12 hex digits, the kernel_id label): {text[:40]!r}")
    return value


MILLISECOND_S = 0.001  # requests carry whole milliseconds: less would be sent as 0
MAX_RECORD_S = 3600  # what gpuobsd records at most in one window


DURATION = re.compile(r"(?P<number>-?[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<unit>ms|s|m|h)?")
UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}  # a bare number is seconds


def seconds(high: float, within: str, allow_zero: bool = False) -> Callable[[str], float]:
    """A duration with its unit (500ms, 30s, 2m, 1h; a bare number is seconds) within
    [MILLISECOND_S, high] seconds (or 0 where `allow_zero`), checked before the request's
    milliseconds are built; `within` says the range in the refusal."""

    def parse(text: str) -> float:
        found = DURATION.fullmatch(text.strip())
        if not found:
            raise argparse.ArgumentTypeError(f"not a duration (500ms, 30s, 2m, 1h): {text[:40]!r}")
        value = float(found["number"]) * UNIT_S[found["unit"]]
        if allow_zero and value == 0:
            return 0.0
        if not (math.isfinite(value) and MILLISECOND_S <= value <= high):
            raise argparse.ArgumentTypeError(f"{value:g} is not within {within}")
        return value

    parse.__name__ = "seconds"
    return parse


# sampled's 1 in 2^SHIFT: what the config word holds
sample_shift = number(0, _native.MAX_SHIFT)
# how long to wait for processes to acknowledge a control request: what gpuobsd accepts
acknowledgement_timeout = seconds(60, "(0, 60] seconds (at least 0.001)")
# a recording window; 0: until --count events
record_seconds = seconds(MAX_RECORD_S, f"{MILLISECOND_S:g}..{MAX_RECORD_S} seconds (or 0: until --count)", True)
window_seconds = seconds(MAX_RECORD_S, f"{MILLISECOND_S:g}..{MAX_RECORD_S} seconds")
