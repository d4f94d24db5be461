"""The share of gpuobsd's time that every analysis of every process spends together (pairing
block events, joining graph replays to their events, counting hot PCs): beyond it, analyses
count what they skip instead of falling behind, so the drain never loses events to them."""

from __future__ import annotations

from .time_budget import UNLIMITED_SHARE, TimeBudget

ANALYSIS_SHARE = 0.3  # of the daemon's wall time (--analysis-share)
ANALYSIS_BURST_S = 0.05  # of analysis at full speed after an idle spell


BEHIND_SHARE = 0.25  # a ring fuller than this before a batch is read: the drain is behind


class AnalysisBudget(TimeBudget):
    """A TimeBudget of `share`, with a burst of ANALYSIS_BURST_S (none when the share is 0, so
    a share of 0 analyses nothing). Whatever is left of it, nothing is allowed while the drain
    is behind (`behind`, set by the drain per batch from its ring's backlog): the analyses skip,
    counted and said, before a ring fills, so they never cost events. A share of 1 is no limit
    at all: every event is analysed, however far behind that puts the drain."""

    def __init__(self, share: float = ANALYSIS_SHARE) -> None:
        super().__init__(share, ANALYSIS_BURST_S if share > 0 else 0.0)
        self.behind = False

    def allows(self) -> bool:
        if self.share >= UNLIMITED_SHARE:  # asked to judge every event (--analysis-share 1)
            return True
        return not self.behind and super().allows()
