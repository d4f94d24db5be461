"""The share of gpuobsd's time that every analysis of every process spends together (pairing
block events, joining graph replays to their events, counting hot PCs): beyond it, analyses
count what they skip instead of falling behind, so the drain never loses events to them."""

from __future__ import annotations

from .time_budget import TimeBudget

ANALYSIS_SHARE = 0.3     # of the daemon's wall time (--analysis-share)
ANALYSIS_BURST_S = 0.05  # of analysis at full speed after an idle spell


class AnalysisBudget(TimeBudget):
    """A TimeBudget of `share`, with a burst of ANALYSIS_BURST_S (none when the share is 0, so
    a share of 0 analyses nothing)."""

    def __init__(self, share: float = ANALYSIS_SHARE) -> None:
        super().__init__(share, ANALYSIS_BURST_S if share > 0 else 0.0)
