"""Which kernels of one identity get series of their own: at most `limit`, the kernels that
matter now, by their score over a recent window (device time, else blocks, else launches; the
caller's choice), not the first ones a scrape saw (those kept their labels for the process's
life, and kernels that became hot after warm-up and capture went to "other").

Ranking must not flap: a place changes hands only at a re-rank (every `rerank_s`), and then only
when the challenger's score over the window since the last re-rank beats the weakest holder's by
`factor` (hysteresis). Free places are given at any scrape, to the best-scoring kernels that
ran. (Choosing the top N afresh at every scrape made 243 distinct series in 20 minutes against
51 at any instant.)

This class only decides names; metric_series.py keeps the counts exact around each change."""

from __future__ import annotations

from collections.abc import Mapping

HYSTERESIS = 2.0  # a challenger must score twice the weakest holder over the window


class KernelBudget:
    """One identity's named kernels (kernel ids), and the scores at the last re-rank."""

    def __init__(self, limit: int, rerank_s: float, factor: float = HYSTERESIS) -> None:
        if limit < 0 or rerank_s < 0 or factor < 1.0:
            raise ValueError(
                f"a kernel budget needs limit >= 0, rerank_s >= 0, factor >= 1: {limit}, {rerank_s}, {factor}"
            )
        self.limit = limit
        self.rerank_s = rerank_s
        self.factor = factor
        self.named: set[str] = set()
        self.marks: dict[str, int] = {}  # each kernel's score at the last re-rank
        self.ranked_at: float | None = None
        self.changes = 0  # places that changed hands at re-ranks (a flap count for tests and logs)

    def update(self, now: float, scores: Mapping[str, int]) -> tuple[list[str], list[str]]:
        """Scores are cumulative (they only grow while a kernel's processes stay). Returns the
        kernels promoted and those demoted by this call."""
        window = {kid: score - self.marks.get(kid, 0) for kid, score in scores.items()}
        for kid in self.named:
            window.setdefault(kid, 0)
        promoted: list[str] = []
        demoted: list[str] = []
        challengers = sorted(
            (kid for kid, score in window.items() if kid not in self.named and score > 0),
            key=lambda kid: (-window[kid], kid),
        )
        rerank = self.ranked_at is None or now - self.ranked_at >= self.rerank_s
        free = self.limit - len(self.named)
        while free > 0 and challengers:
            promoted.append(challengers.pop(0))
            free -= 1
        if rerank:
            holders = sorted(self.named, key=lambda kid: (window[kid], kid))
            while challengers and holders and window[challengers[0]] > self.factor * window[holders[0]]:
                demoted.append(holders.pop(0))
                promoted.append(challengers.pop(0))
                self.changes += 1
            self.marks = dict(scores)
            self.ranked_at = now
        self.named.difference_update(demoted)
        self.named.update(promoted)
        return promoted, demoted
