"""Pages of the list RPCs: every list runs through the processes in one order (pid, then start
time) and through each process from a position that only grows as the process adds rows, so a
walk that follows the page tokens visits every row once, however the lists grow meanwhile.

A token is "<kind>.<pid>.<start time>.<position>...": where the next page starts."""

from __future__ import annotations

from collections.abc import Callable

from .errors import InvalidArgument
from .registry import ObservedProcess

# What a page token pages through (and its format's version), and how many positions it holds
TokenKind = tuple[str, int]
KERNEL_TOKEN: TokenKind = ("k1", 1)  # kernel slot
GRAPH_TOKEN: TokenKind = ("g1", 1)  # graph exec instance (first-seen order)
STEP_TOKEN: TokenKind = ("s1", 2)  # the first and last step keys of the walk
HANG_TOKEN: TokenKind = ("h1", 2)  # grid id and replay of the next hung launch
HOT_PC_TOKEN: TokenKind = ("p1", 1)  # (kernel, pc) pairs in the order first seen
REQUEST_TOKEN: TokenKind = ("r1", 1)  # a kept request's begin number (request_ledger.LedgerRow.seq)

# Takes one process's rows into a page from a position (() for its start) and says where that
# process goes on (None: it has no more). It decides itself how many rows still fit.
PageTaker = Callable[[ObservedProcess, tuple[int, ...], list], "tuple[int, ...] | None"]


def process_order(process: ObservedProcess) -> tuple[int, int]:
    """Processes in pid order; a pid reused while its predecessor is retained, by start time."""
    return process.pid, int(process.segment.header.get("pid_start_ticks", 0))


def page_token_of(kind: TokenKind, process: ObservedProcess, *positions: int) -> str:
    """Where the next page starts: a process (pid, start time) and a position in it."""
    assert len(positions) == kind[1]
    return ".".join([kind[0], *map(str, process_order(process)), *map(str, positions)])


def parse_page_token(token: str, kind: TokenKind) -> tuple[int, ...] | None:
    """(pid, start time, *positions) of a token page_token_of made; None for the first page."""
    if not token:
        return None
    parts = token.split(".")
    if (
        len(token) > 60 + 20 * kind[1]
        or len(parts) != 3 + kind[1]
        or parts[0] != kind[0]
        or not all(p.isascii() and p.isdigit() for p in parts[1:])
    ):
        raise InvalidArgument("page_token is not one this daemon gave out")
    return tuple(int(p) for p in parts[1:])


def position_in(process: ObservedProcess, resume: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Where a walk goes on in this process: None when the token points past it (skip it), its
    positions when the token points into it, () when the walk takes it from its start."""
    if resume is None or process_order(process) > resume[:2]:
        return ()
    return resume[2:] if process_order(process) == resume[:2] else None


def walk_pages(
    kind: TokenKind,
    targets: list[ObservedProcess],
    page_token: str,
    take: PageTaker,
    full: Callable[[list], bool],
    has_rows: Callable[[ObservedProcess], bool],
) -> tuple[list, str]:
    """One page: (rows, next_page_token), the token empty after the last page. A page that
    fills up at the end of a process points at the next process that has rows (`has_rows`),
    so a walk does not end on an empty page."""
    resume = parse_page_token(page_token, kind)
    ordered = sorted(targets, key=process_order)
    rows: list = []
    for index, process in enumerate(ordered):
        at = position_in(process, resume)
        if at is None:
            continue
        goes_on = take(process, at, rows)
        if goes_on is not None:
            return rows, page_token_of(kind, process, *goes_on)
        if full(rows):
            later = next((p for p in ordered[index + 1 :] if has_rows(p)), None)
            return rows, page_token_of(kind, later, *([0] * kind[1])) if later else ""
    return rows, ""
