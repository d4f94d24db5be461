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
    # the pause between passes that find little doubles up to this: an idle daemon makes ~40
    # passes a second, not 500, and one that finds much goes back to drain_interval_s at once
    IDLE_PAUSE_MAX_S = 0.025
    BUSY_PASS = 8192  # records a pass read for the next to follow at once (a ring holds 65,536 or more)

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

    def _run(self) -> None:
        next_discovery = 0.0
        pause = self.drain_interval_s
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_discovery:
                next_discovery = now + self.discovery_interval_s
                try:
                    self.registry.discover()
                except Exception:  # a bug here must not end discovery for good: log it, go on
                    log.exception("discovery_failed")
            try:
                read = self.registry.drain_pass()
            except Exception:  # logged; a loop that keeps failing shows as a stall in health
                log.exception("drain_failed")
                read = 0
            if read >= self.BUSY_PASS:
                pause = self.drain_interval_s  # records flow fast: straight on
                continue
            # nothing, or a trickle: wait longer each time (up to IDLE_PAUSE_MAX_S), so that a
            # trickle is read in batches of what accumulated, not a few records a pass (its cost
            # is per pass and per batch as much as per record)
            self._stop.wait(min(pause, max(0.0, next_discovery - time.monotonic())))
            pause = min(max(pause * 2, 0.001), max(self.IDLE_PAUSE_MAX_S, self.drain_interval_s))
