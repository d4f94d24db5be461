"""A step's device time split among its requests by their scheduled tokens (the step's text,
gpuobs.step_text, says which requests and how many tokens each).

The model: a step's kernels work on the tokens scheduled in it, so each request gets the share of
the step's device time that its tokens are of the step's tokens. The split is in integer
nanoseconds with the largest remainders rounded up (ties to the earlier request), so the requests'
times add up to the step's exactly, never off by a rounding.
"""

from __future__ import annotations


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
