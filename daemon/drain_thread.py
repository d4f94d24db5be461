"""Discovery and draining on a thread of their own, so that the API's event loop only ever waits
for one batch's analysis (a process lock) and never for a drain pass over every producer: with
eight producers at full speed one pass is tens of milliseconds, and an RPC needs several turns of
its loop. The reader releases the GIL while it copies records, so the copy runs beside the API."""

from __future__ import annotations

import threading
import time

import structlog

from .registry import Registry

log = structlog.get_logger("gpuobsd.drain")


class DrainThread:
    # The pause between passes follows how full the fullest ring was when a pass found it: the
    # next pass comes when that ring would be about FOLLOW_SHARE full at the rate it filled,
    # within [drain_interval_s, IDLE_PAUSE_MAX_S]. A trickle is then read in batches of what
    # accumulated in up to 0.1 s (its cost is per batch and per call as much as per record), a
    # flood straight on, and a pass that finds nothing waits twice as long as the last, up to
    # the same 0.1 s: an idle daemon makes ~10 passes a second, not 500.
    IDLE_PAUSE_MAX_S = 0.1
    FOLLOW_SHARE = 1 / 16

    def __init__(self, registry: Registry, *, discovery_interval_s: float, drain_interval_s: float) -> None:
        self.registry = registry
        self.discovery_interval_s = discovery_interval_s
        self.drain_interval_s = drain_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuobsd-drain", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def next_pause(self, pause: float, read: int, fullest: float, since_last_pass_s: float) -> float:
        """The pause before the next pass, given the last pause, what this pass read, how full it
        found the fullest ring and the time since the pass before."""
        longest = max(self.IDLE_PAUSE_MAX_S, self.drain_interval_s)
        if not read:
            return min(max(pause * 2, 0.001), longest)
        if fullest >= self.FOLLOW_SHARE:
            return 0.0
        fill_time = since_last_pass_s * self.FOLLOW_SHARE / max(fullest, 1e-9)
        return min(max(fill_time, self.drain_interval_s), longest)

    def _run(self) -> None:
        next_discovery = 0.0
        pause = self.drain_interval_s
        last_pass = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_discovery:
                next_discovery = now + self.discovery_interval_s
                try:
                    self.registry.discover()
                except Exception:  # a bug here must not end discovery for good: log it, go on
                    log.exception("discovery_failed")
            began = time.monotonic()
            try:
                read = self.registry.drain_pass()
            except Exception:  # logged; a loop that keeps failing shows as a stall in health
                log.exception("drain_failed")
                read = 0
            pause = self.next_pause(pause, read, self.registry.pass_fullest, began - last_pass)
            last_pass = began
            if pause > 0:
                self._stop.wait(min(pause, max(0.0, next_discovery - time.monotonic())))
