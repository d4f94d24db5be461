"""A share of the daemon's wall time for work that must never make the drain fall behind:
optional analysis (pairing block events, joining graph replays, hot PCs) and long queries.

A token bucket: time accrues at `share` seconds per second, up to `burst_s`, and work spends
it. The cap matters: a budget that only compared the time spent with the share of all time
since start let a daemon idle for 30 s spend 9 s of analysis in one go when load arrived, a
stall that cost full-speed producers their events and held status up for as long."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

UNLIMITED_SHARE = 1.0  # a share of 1 or more: no limit at all (tests that need every event judged)


class TimeBudget:
    def __init__(self, share: float, burst_s: float) -> None:
        self.share = share
        self.burst_s = burst_s
        self._tokens = burst_s
        self._at = time.monotonic()
        self._lock = threading.Lock()  # spent from the drain and the query threads
        self.paused_s = 0.0  # slept by pace(), in all

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst_s, self._tokens + (now - self._at) * self.share)
        self._at = now

    def allows(self) -> bool:
        if self.share >= UNLIMITED_SHARE:
            return True
        with self._lock:
            self._refill(time.monotonic())
            return self._tokens > 0

    def charge(self, seconds: float) -> None:
        with self._lock:
            self._refill(time.monotonic())
            self._tokens -= seconds

    def exhaust(self) -> None:
        """Nothing left until refill(), however much time passes: a batch the analysis skips,
        made on purpose (time accruing would make that depend on how fast the caller runs)."""
        with self._lock:
            self._tokens = float("-inf")
            self._at = time.monotonic()

    def refill(self) -> None:
        """A full bucket now, whatever was spent."""
        with self._lock:
            self._tokens = self.burst_s
            self._at = time.monotonic()

    @contextlib.contextmanager
    def spending(self) -> Iterator[None]:
        """Charges the time the block takes, whatever it raises."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.charge(time.perf_counter() - began)

    def pace(self, worked_s: float) -> None:
        """Charges work already done and sleeps off any debt: always a moment, so the caller is
        off the GIL and the CPU for at least that long."""
        with self._lock:
            self._refill(time.monotonic())
            self._tokens -= worked_s
            sleep = 0.0002 if self.share >= UNLIMITED_SHARE else max(0.0002, -self._tokens / max(self.share, 1e-6))
            self.paused_s += sleep
        time.sleep(sleep)
