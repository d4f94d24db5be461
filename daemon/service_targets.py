"""What a request targets, shared by every part of the service: the observed processes it names
(by pid, by the rank its plugin set, by a GPU of its contexts) and, for a list, its `top` rows or
every row a page at a time."""

from __future__ import annotations

from .errors import InvalidArgument, NotFound, quoted
from .identity import identity_of, matches_gpu
from .registry import ObservedProcess, Registry

MAX_PIDS = 4096
MAX_TOP = 100_000


def check_top_or_page(top: int, page_size: int, page_token: str, max_page: int, row: str) -> None:
    """A list that answers either its `top` rows in one reply or every row a page at a time."""
    if not 0 <= top <= MAX_TOP:
        raise InvalidArgument(f"top must be within 0..{MAX_TOP}")
    if not 0 <= page_size <= max_page:
        raise InvalidArgument(f"page_size must be within 0..{max_page}")
    if top and page_token:
        raise InvalidArgument(f"a page_token pages through every {row} (top 0); it does not go with top")


class Targets:
    """The registry's processes a request names; NotFound for a name no process answers to."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def processes(self, pids: list[int], *, live_only: bool) -> list[ObservedProcess]:
        """Processes by pid, in the order asked (a pid reused while its predecessor is retained
        names both); every process when none is given. `live_only`: the exited ones left out."""
        if len(pids) > MAX_PIDS:
            raise InvalidArgument(f"at most {MAX_PIDS} pids")
        if not pids:
            return self.registry.live() if live_only else list(self.registry.processes.values())
        known = list(self.registry.processes.values())
        found = []
        for pid in dict.fromkeys(pids):  # each once, in the order asked
            matches = [p for p in known if p.pid == pid and (p.alive or not live_only)]
            if not matches:
                raise NotFound(f"no observed process with pid {pid}")
            found.extend(matches)
        return found

    def selected(self, pids: list[int], ranks: list[int], gpus: list[str]) -> list[ObservedProcess]:
        """Live processes by pid, by the rank their plugin set, or by a GPU of theirs (ordinal, PCI
        bus id or UUID): the union; every live process when none is given. A rank or GPU that no
        live process has is NotFound, as an unknown pid is."""
        if len(ranks) > MAX_PIDS or len(gpus) > MAX_PIDS:
            raise InvalidArgument(f"at most {MAX_PIDS} ranks and {MAX_PIDS} gpus")
        if not ranks and not gpus:
            return self.processes(pids, live_only=True)
        chosen = {id(p): p for p in (self.processes(pids, live_only=True) if pids else [])}
        live = self.registry.live()
        identities = {id(p): identity_of(p.segment.reader.header()) for p in live}
        for rank in dict.fromkeys(ranks):
            found = [p for p in live if identities[id(p)]["identity_set"] and identities[id(p)]["rank"] == rank]
            if not found:
                raise NotFound(f"no live observed process has rank {rank} (set by its framework plugin)")
            chosen.update((id(p), p) for p in found)
        for gpu in dict.fromkeys(gpus):
            found = [p for p in live if matches_gpu(identities[id(p)]["gpus"], gpu)]
            if not found:
                raise NotFound(f"no live observed process has a context on GPU {quoted(gpu)}")
            chosen.update((id(p), p) for p in found)
        return list(chosen.values())
