"""A step's requests and their share of it: the step text the vLLM plugin writes (layout 7, one
'id\\ttokens' line per request) read back, and a step's device time split among its requests by
their scheduled tokens.

The model: a step's kernels work on the tokens scheduled in it, so each request gets the share of
the step's device time that its tokens are of the step's tokens. The split is in integer
nanoseconds with the largest remainders rounded up (ties to the earlier request), so the requests'
times add up to the step's exactly, never off by a rounding.
"""

from __future__ import annotations


def parse_step_text(text: str) -> tuple[list[str], list[int]]:
    """(ids, tokens each) of one step's text. A line without a tab or with a count that is not a
    non-negative integer (a producer older than layout 7, a torn record) gives its id and no
    counts for the whole step: a split over some requests only would not add up."""
    if not text:
        return [], []
    ids: list[str] = []
    tokens: list[int] = []
    known = True
    for line in text.split("\n"):
        request, tab, count = line.rpartition("\t")
        if not tab:
            ids.append(line)
            known = False
            continue
        ids.append(request)
        if count.isdigit() and count.isascii():
            tokens.append(int(count))
        else:
            known = False
    return ids, tokens if known else []


def split_by_tokens(total_ns: int, tokens: list[int]) -> list[int]:
    """`total_ns` split in proportion to `tokens`; the parts add up to `total_ns` exactly.

    With no tokens at all (a step that scheduled none) the time is split evenly, so it is still
    conserved; a negative total or count is a caller's bug and refused."""
    if total_ns < 0 or any(count < 0 for count in tokens):
        raise ValueError(f"a split needs non-negative time and tokens, not {total_ns} over {tokens}")
    if not tokens:
        if total_ns:
            raise ValueError(f"{total_ns} ns cannot be split among no requests")
        return []
    weights = tokens if sum(tokens) else [1] * len(tokens)
    whole = sum(weights)
    parts = [total_ns * weight // whole for weight in weights]
    remainders = [total_ns * weight % whole for weight in weights]
    left = total_ns - sum(parts)  # fewer than len(tokens)
    for index in sorted(range(len(weights)), key=lambda i: (-remainders[i], i))[:left]:
        parts[index] += 1
    return parts
