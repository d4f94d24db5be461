"""Argument types of the CLI: numbers checked against the range of the API field they fill, so
that a bad number is a one-line usage error, not a traceback from building the request."""

from __future__ import annotations

import argparse
import math
from typing import Callable

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


def acknowledgement_timeout(text: str) -> float:
    """Seconds to wait for processes to acknowledge a control request: what gpuobsd accepts,
    (0, 60], in whole milliseconds (less than one would be sent as 0: the daemon's default),
    checked before the request's milliseconds are built."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0.001 <= value <= 60:
        raise argparse.ArgumentTypeError(f"{value:g} is not within (0, 60] seconds (at least 0.001)")
    return value


MAX_RECORD_S = 3600  # what gpuobsd records at most in one window
RECORD_STEP_S = 0.001  # the request carries milliseconds


def seconds(allow_zero: bool) -> Callable[[str], float]:
    """A recording window in seconds: within [RECORD_STEP_S, MAX_RECORD_S] (or 0 where
    `allow_zero`: no limit but the count), checked before its milliseconds are built."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
        if allow_zero and value == 0:
            return 0.0
        if not (math.isfinite(value) and RECORD_STEP_S <= value <= MAX_RECORD_S):
            raise argparse.ArgumentTypeError(f"{value:g} is not within {RECORD_STEP_S:g}..{MAX_RECORD_S} seconds"
                                             + (" (or 0: until --count)" if allow_zero else ""))
        return value
    parse.__name__ = "seconds"
    return parse


record_seconds = seconds(allow_zero=True)
window_seconds = seconds(allow_zero=False)
