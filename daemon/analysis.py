"""What the drain does with what it reads, beyond counting: one Analysis per kind of result and
process. The registry feeds every analysis of a process the same batches, in the same order,
under the process's lock: launch records first (a launch record is written before its kernel
runs, so events find their launch known), then each event batch, then settle() once every
event ring has been read to its end, with the graph replay the device had begun by then. What an
analysis keeps is bounded, and optional work is paid from the AnalysisBudget; the service reads
results through report() and the analysis's own queries."""

from __future__ import annotations

import numpy as np

# settle()'s replay_begun once the producer is gone: every replay it launched has finished.
ALL_REPLAYS = 1 << 64


class Analysis:
    """A base whose hooks do nothing: an analysis overrides those it needs."""

    def on_launches(self, launches: np.ndarray) -> None:
        """One batch of launch ring records (gpuobs.segment.LAUNCH_DTYPE), in ring order."""

    def on_events(self, events: np.ndarray, kind_counts: np.ndarray) -> None:
        """One batch of event ring records (EVENT_DTYPE); kind_counts: its events per kind,
        counted once for every analysis (an analysis with no kind of its own returns at once)."""

    def settle(self, replay_begun: int) -> None:
        """Every event ring has been read to its end: what waited for late events is final, for
        graph replays numbered below replay_begun (the device had begun that one before the rings
        were read, so those before it had finished; a host runs far ahead of its device, and a
        replay it launched long ago may not have run yet)."""

    def report(self) -> object:
        """What the analysis holds for the whole process, as a small typed value."""
        raise NotImplementedError
