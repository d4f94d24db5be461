"""Hangs (ListHangs, the blocks-in-flight metrics): launches whose blocks entered and have not
exited, from the block pairing, and the evidence each process can give of them."""

from __future__ import annotations

import time

from . import results
from .errors import InvalidArgument
from .paging import HANG_TOKEN, walk_pages
from .registry import ObservedProcess, Registry, kernel_names
from .service_targets import Targets

DEFAULT_HANG_PAGE = 64  # a launch lists up to 4,096 blocks: ~40 kB of reply at most
MAX_HANG_PAGE = 1024


class HangQueries:
    def __init__(self, registry: Registry, targets: Targets) -> None:
        self.registry = registry
        self.targets = targets

    def hangs(
        self, pids: list[int], min_age_ms: int, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.HungLaunch]:
        """Launches with blocks in flight at least min_age_ms, a page at a time in (pid, grid id,
        replay) order. A launch whose blocks exit between two pages is simply not on the later
        one; grid ids grow, so a new launch comes after the token."""
        if not 0 <= min_age_ms <= 86_400_000:
            raise InvalidArgument("min_age_ms must be within 0..86400000")
        if not 0 <= page_size <= MAX_HANG_PAGE:
            raise InvalidArgument(f"page_size must be within 0..{MAX_HANG_PAGE}")
        size = page_size or DEFAULT_HANG_PAGE
        now_ns = time.time_ns()

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            after = (at[0], at[1]) if at else (0, 0)
            with process.lock:
                room = size - len(rows)
                launches = process.analyses.block_pairing.in_flight(
                    now_ns, min_age_ms * 1_000_000, after=after, limit=room + 1
                )
                if not launches:
                    return None
                rows.extend(self._hung_rows(process, launches[:room]))
            return (launches[room]["grid_id"], launches[room]["replay"]) if len(launches) > room else None

        return results.Page(
            *walk_pages(
                HANG_TOKEN,
                self.targets.processes(pids, live_only=False),
                page_token,
                take,
                lambda rows: len(rows) >= size,
                lambda process: process.analyses.block_pairing.report().blocks > 0,
            )
        )

    @staticmethod
    def _hung_rows(process: ObservedProcess, launches: list[dict]) -> list[results.HungLaunch]:
        names = kernel_names(process.segment, (launch["slot"] for launch in launches))
        dropped = process.events_dropped_per_kernel()
        rows = []
        for launch in launches:
            slot = launch["slot"]
            graph_exec = process.analyses.graph_join.graph_exec_of(launch["grid_id"])
            rows.append(
                results.HungLaunch(
                    pid=process.pid,
                    kernel=names.get(slot, f"slot {slot}"),
                    slot=slot,
                    grid_id=launch["grid_id"],
                    graph_exec=graph_exec,
                    replay=launch["replay"] if graph_exec else 0,
                    blocks=[results.BlockIndex(x, y, z) for x, y, z in launch["blocks"]],
                    sms=launch["sms"],
                    oldest_enter_ns=launch["oldest_enter_ns"],
                    age_ns=launch["age_ns"],
                    kernel_events_dropped=int(dropped[slot]) if dropped is not None and slot < len(dropped) else 0,
                    block_count=launch["block_count"],
                )
            )
        return rows

    def hang_evidence(self, pids: list[int], min_age_ms: int = 0) -> list[results.HangEvidence]:
        """Per process: can it show blocks in flight, how many (by the counts where the producer
        counts exits), the longest a kernel in flight went without an exit, which kernels did so
        for min_age_ms, and how many block events the pairing did not look at."""
        now, now_ns = self.registry.clock(), time.time_ns()
        out = []
        for process in self.targets.processes(pids, live_only=False):
            with process.lock:
                in_flight = process.analyses.block_pairing.report()
                unanalysed = process.analyses.block_pairing.unanalysed_total(process.segment.aggregates())
                stalls = process.stalls
                stalled = stalls.stalled(now, min_age_ms / 1000.0) if stalls.counted else []
                counted, counted_blocks, since = stalls.counted, stalls.blocks_in_flight(), stalls.oldest_since()
            if counted:
                blocks, age = counted_blocks, int((now - since) * 1e9) if since is not None else 0
            else:
                blocks = in_flight.blocks
                age = max(0, now_ns - in_flight.oldest_enter_ns) if in_flight.blocks else 0
            names = kernel_names(process.segment, (s.slot for s in stalled))
            out.append(
                results.HangEvidence(
                    process.pid,
                    in_flight.exits_hooked,
                    blocks,
                    age,
                    process.alive,
                    counted,
                    unanalysed,
                    [
                        results.StalledKernel(
                            s.slot, names.get(s.slot, f"slot {s.slot}"), s.blocks_in_flight, int((now - s.since) * 1e9)
                        )
                        for s in stalled
                    ],
                )
            )
        return out
