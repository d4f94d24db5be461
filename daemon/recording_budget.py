"""The disk the daemon's recordings may fill: a cap per recording and one for all recordings that
run at once. Any client on the socket may ask for recordings (16 at a time, an hour each): without
caps a few busy producers wrote 3.1 GB in 20 s. A recording that reaches a cap ends cleanly: what
was written is kept, whole records only, and the reason is given with its files."""

from __future__ import annotations

import threading


class RecordingBudget:
    """Bytes granted to recordings in progress; given back as each one ends."""

    def __init__(self, per_recording_bytes: int, total_bytes: int) -> None:
        self.per_recording_bytes = per_recording_bytes
        self.total_bytes = total_bytes
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        return self._held

    def allowance(self) -> RecordingAllowance:
        return RecordingAllowance(self)

    def _take(self, wanted: int, unit: int) -> int:
        """Up to `wanted` bytes, in whole units of `unit` bytes, as far as the cap for all allows."""
        with self._lock:
            granted = max(0, min(wanted, self.total_bytes - self._held)) // unit * unit
            self._held += granted
            return granted

    def _give_back(self, amount: int) -> None:
        with self._lock:
            self._held -= amount


class RecordingAllowance:
    """One recording's share: `records` of `record_bytes` each are granted while both caps allow;
    once one of them does not, `stopped` says which, and the recording ends."""

    def __init__(self, budget: RecordingBudget) -> None:
        self.budget = budget
        self.used = 0
        self.stopped = ""

    def records(self, count: int, record_bytes: int) -> int:
        """How many of `count` records may still be written (all of them, or fewer: the cap reached)."""
        if self.stopped or count <= 0:
            return 0
        asked = count * record_bytes
        wanted = min(asked, self.budget.per_recording_bytes - self.used)
        granted = self.budget._take(wanted, record_bytes)
        self.used += granted
        if granted < asked:
            self._over(wanted, asked)
        return granted // record_bytes

    def _over(self, wanted: int, asked: int) -> None:
        if wanted < asked:
            self.stopped = (
                f"the cap of {self.budget.per_recording_bytes} bytes per recording was reached "
                f"(gpuobsd --record-max-mb)"
            )
        else:
            self.stopped = (
                f"all recordings together reached gpuobsd's cap of {self.budget.total_bytes} bytes (--record-total-mb)"
            )

    def release(self) -> None:
        """The recording is over: its bytes no longer count against the cap for all."""
        self.budget._give_back(self.used)
        self.used = 0
