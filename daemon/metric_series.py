"""The per-identity series the metrics export, kept exact and bounded while processes come,
restart and go.

Each shown process is a member of the identity its labels name (metric_identity.py). An
identity's counters are the sum of its members' counts since they joined it, plus what members
that left it had counted (its carry): a restart of the same rank continues the same series and
no counter ever falls, however processes come and go. A member that leaves (the registry forgot
its process, or its plugin named it after its first kernels) leaves its counts behind in the
carry; a process named by its plugin after warm-up takes its warm-up counts along where it was
alone under its GPU (the series it leaves then just end).

Per kernel, only the kernels a KernelBudget names get series (`kernel`, `kernel_id`); the rest are
summed in `other`, which is the identity's total less the named series, exactly, in integers, at
every scrape. A kernel's series counts from the last scrape before it was named (what it counted
since was in no series yet; what it counted before stays in `other`, which so never falls: a
kernel named at its identity's first scrape has all of its counts); a kernel that loses its
place gives what its series counted to `other` (which rises: rates of `other` jump there, the
sums stay exact).

An identity without members is kept `grace_s` (its series frozen, so a restart within it continues
them), and at most MAX_IDLE of them: then its series end."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from . import results
from .block_pairing import BUCKETS_PER_OCTAVE
from .kernel_budget import KernelBudget
from .kernel_labels import kernel_id, kernel_label
from .metric_identity import SeriesIdentity

# Block-duration histogram edges: every factor of 4 from 1.024 us to 1.07 s, which are edges of
# the daemon's own log2 buckets (BUCKETS_PER_OCTAVE an octave), so the counts are exact.
DURATION_EDGE_OCTAVES = np.arange(10, 31, 2)  # log2 of each edge in ns
DURATION_EDGES_NS: list[int] = (1 << DURATION_EDGE_OCTAVES).tolist()
DURATION_EDGE_BUCKETS = BUCKETS_PER_OCTAVE * DURATION_EDGE_OCTAVES
DURATION_BUCKETS = len(DURATION_EDGES_NS) + 1  # the last one above the last edge (+Inf)
MAX_IDLE = 256  # identities kept without a member (the oldest go first)
OTHER = "other"  # the kernel label of what no named series counts

KernelNames = Callable[[int, int], list[tuple[str, str]]]  # (mangled, demangled) of slots first..first+count


@dataclasses.dataclass
class ProcessInput:
    """What one scrape knows of one shown process."""

    segment: str  # its segment's path: a process's key while the daemon shows it
    view: results.Process
    identity: SeriesIdentity
    counters: np.ndarray | None  # per-kernel counters by slot; None: unchanged (keep the last)
    durations: dict[int, tuple[np.ndarray, int]]  # per slot: log2 histogram of block durations, sum in ns
    names: KernelNames
    counts: dict[str, float]  # its whole-process counters (metrics.PROCESS_COUNTERS)


class Member:
    """A process as its identity's series see it: its counts per kernel id (one row per id; a
    kernel loaded in several modules has several slots), and the counts it had when it joined."""

    def __init__(self, segment: str, columns: int) -> None:
        self.segment = segment
        self.columns = columns
        self.kids: list[str] = []
        self.labels: list[str] = []
        self.position: dict[str, int] = {}
        self.slot_row = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, columns), dtype=np.uint64)
        self.baseline: np.ndarray | None = None  # rows of self.kids at joining (None: all zero)
        self.previous: np.ndarray | None = None  # the matrix the last scrape exported here (None: none)
        self.counts: dict[str, float] = {}
        self.counts_baseline: dict[str, float] = {}
        self.view: results.Process | None = None
        self.identity: SeriesIdentity | None = None

    def refresh(self, item: ProcessInput, counter_fields: tuple[str, ...]) -> None:
        self.view = item.view
        self.counts = dict(item.counts)
        self.previous = self.matrix
        if item.counters is None:
            return
        known = len(self.slot_row)
        if len(item.counters) > known:
            rows = []
            for mangled, demangled in item.names(known, len(item.counters) - known):  # unpublished: next time
                kid = kernel_id(mangled, demangled)
                if kid not in self.position:
                    self.position[kid] = len(self.kids)
                    self.kids.append(kid)
                    self.labels.append(kernel_label(demangled))
                rows.append(self.position[kid])
            self.slot_row = np.concatenate([self.slot_row, np.array(rows, dtype=np.int64)])
            known = len(self.slot_row)
        matrix = np.zeros((len(self.kids), self.columns), dtype=np.uint64)
        for column, field in enumerate(counter_fields):
            np.add.at(matrix[:, column], self.slot_row, item.counters[field][:known].astype(np.uint64))
        first = len(counter_fields)
        for slot, (histogram, total_ns) in item.durations.items():
            if slot < known:
                cumulative = np.cumsum(histogram, dtype=np.uint64)
                at_edges = np.append(cumulative[DURATION_EDGE_BUCKETS - 1], cumulative[-1])
                row = matrix[self.slot_row[slot]]
                row[first : first + DURATION_BUCKETS] += np.diff(at_edges, prepend=np.uint64(0)).astype(np.uint64)
                row[first + DURATION_BUCKETS] += np.uint64(total_ns)
        self.matrix = matrix

    def join(self, keep_history: bool) -> None:
        """Counts from now on (or, keep_history, all it counted) belong to its new identity."""
        if not keep_history:
            self.baseline = self.matrix.copy()
            self.counts_baseline = dict(self.counts)
        self.previous = None  # nothing of it was exported there yet

    def _rows(self, matrix: np.ndarray) -> np.ndarray:
        """A matrix of fewer kernels padded to self.kids (kernels registered since start at 0)."""
        if len(matrix) == len(self.kids):
            return matrix
        return np.vstack([matrix, np.zeros((len(self.kids) - len(matrix), self.columns), dtype=np.uint64)])

    def contribution(self) -> np.ndarray:
        """What it counted since it joined, per kernel id (rows of self.kids)."""
        if self.baseline is None:
            return self.matrix
        return self.matrix - self._rows(self.baseline)

    def previous_contribution(self) -> np.ndarray:
        """Its contribution as the last scrape exported it (zero where it was not a member yet)."""
        if self.previous is None:
            return np.zeros_like(self.matrix)
        previous = self._rows(self.previous)
        return previous - self._rows(self.baseline) if self.baseline is not None else previous

    def count_contribution(self) -> dict[str, float]:
        return {name: value - self.counts_baseline.get(name, 0) for name, value in self.counts.items()}


@dataclasses.dataclass
class KernelSeries:
    """One named kernel's values (columns of the budget), or the identity's `other`."""

    label: str
    kid: str  # "" for other
    values: list[int]


class IdentitySeries:
    """One identity's members, carry and named kernels."""

    def __init__(self, identity: SeriesIdentity, columns: int, budgets: dict[str, KernelBudget]) -> None:
        self.identity = identity
        self.columns = columns
        self.members: dict[str, Member] = {}
        self.carry_total = np.zeros(columns, dtype=np.uint64)
        self.carry_kernels: dict[str, np.ndarray] = {}  # named kernels' only
        self.carry_counts: dict[str, float] = {}
        self.budgets = budgets
        self.bases: dict[str, dict[str, list[int]]] = {name: {} for name in budgets}  # at naming, per kernel
        self.kernel_labels: dict[str, str] = {}  # named kernels' labels
        self.basis = -1  # the column the budgets rank by
        self.left_at: float | None = None  # when its last member left

    def has_carry(self) -> bool:
        return bool(self.carry_total.any()) or any(self.carry_counts.values())

    def tracked(self) -> set[str]:
        return set().union(*(budget.named for budget in self.budgets.values()))

    def fold(self, member: Member) -> None:
        """A leaving member's counts stay here."""
        contribution = member.contribution()
        self.carry_total += contribution.sum(axis=0, dtype=np.uint64)
        for kid in self.tracked():
            row = member.position.get(kid)
            if row is not None:
                carried = self.carry_kernels.setdefault(kid, np.zeros(self.columns, dtype=np.uint64))
                carried += contribution[row]
        for name, value in member.count_contribution().items():
            self.carry_counts[name] = self.carry_counts.get(name, 0) + value

    def total(self) -> list[int]:
        total = self.carry_total.copy()
        for member in self.members.values():
            total += member.contribution().sum(axis=0, dtype=np.uint64)
        return [int(value) for value in total.tolist()]

    def raw(self, kid: str, contributions: dict[str, np.ndarray]) -> list[int]:
        """A kernel's count since it was tracked: carry plus its members' contributions."""
        row = self.carry_kernels.get(kid, np.zeros(self.columns, dtype=np.uint64)).copy()
        for segment, member in self.members.items():
            position = member.position.get(kid)
            if position is not None:
                row += contributions[segment][position]
        return [int(value) for value in row.tolist()]

    def counts(self) -> dict[str, float]:
        out = dict(self.carry_counts)
        for member in self.members.values():
            for name, value in member.count_contribution().items():
                out[name] = out.get(name, 0) + value
        return out

    def rank(self, now: float, basis_columns: list[int]) -> None:
        """Re-ranks (budgets decide when), naming and un-naming kernels exactly."""
        totals = self.total()
        basis = next((column for column in basis_columns if totals[column] > 0), basis_columns[-1])
        if basis != self.basis:  # device time appeared: scores of another unit, rank afresh
            self.basis = basis
            for budget in self.budgets.values():
                budget.marks, budget.ranked_at = {}, None
        scores: dict[str, int] = {}
        labels: dict[str, str] = {}
        for member in self.members.values():
            for kid, label, score in zip(member.kids, member.labels, member.matrix[:, basis].tolist()):
                scores[kid] = scores.get(kid, 0) + int(score)
                labels.setdefault(kid, label)
        previous: dict[str, np.ndarray] | None = None
        for name, budget in self.budgets.items():
            promoted, demoted = budget.update(now, scores)
            bases = self.bases[name]
            for kid in demoted:
                del bases[kid]
            if promoted and previous is None:
                previous = {segment: member.previous_contribution() for segment, member in self.members.items()}
            for kid in promoted:
                # counted from the last scrape on: what it counted since then was in no series yet,
                # what it counted before stays in `other` (which so never falls)
                bases[kid] = self.raw(kid, previous or {})
                self.kernel_labels[kid] = labels.get(kid, "?")
        tracked = self.tracked()
        for kid in [kid for kid in self.carry_kernels if kid not in tracked]:
            del self.carry_kernels[kid]
        for kid in [kid for kid in self.kernel_labels if kid not in tracked]:
            del self.kernel_labels[kid]

    def kernel_series(self, budget: str, columns: slice) -> list[KernelSeries]:
        """The named kernels' series of one budget over those columns, then `other`: their sum is
        the identity's total in every column, exactly."""
        contributions = {segment: member.contribution() for segment, member in self.members.items()}
        other = self.total()[columns]
        out = []
        for kid, base in sorted(self.bases[budget].items()):
            raw = self.raw(kid, contributions)
            values = [now - then for now, then in zip(raw[columns], base[columns])]
            other = [left - value for left, value in zip(other, values)]
            out.append(KernelSeries(self.kernel_labels[kid], kid, values))
        out.append(KernelSeries(OTHER, "", other))
        return out

    def current(self) -> list[results.Process]:
        """The members gauges describe: the live ones, else (all exited) every one still shown."""
        views = [member.view for member in self.members.values() if member.view is not None]
        alive = [view for view in views if view.alive]
        return alive or views


class SeriesBook:
    """Every identity's series, updated once per scrape."""

    def __init__(
        self,
        counter_fields: tuple[str, ...],
        name_limit: int,
        histogram_limit: int,
        rerank_s: float,
        grace_s: float,
    ) -> None:
        self.counter_fields = counter_fields
        self.columns = len(counter_fields) + DURATION_BUCKETS + 1
        self.name_limit = name_limit
        self.histogram_limit = histogram_limit
        self.rerank_s = rerank_s
        self.grace_s = grace_s
        self.members: dict[str, Member] = {}  # by segment path
        self.identities: dict[SeriesIdentity, IdentitySeries] = {}
        sum_column = len(counter_fields) + DURATION_BUCKETS
        self.basis_columns = [
            sum_column,  # device time (block durations), where measured
            *(counter_fields.index(field) for field in ("blocks_observed", "launches") if field in counter_fields),
        ]

    @property
    def counter_columns(self) -> slice:
        return slice(0, len(self.counter_fields))

    @property
    def histogram_columns(self) -> slice:
        return slice(len(self.counter_fields), self.columns)

    def update(self, inputs: list[ProcessInput], now: float) -> None:
        shown = set()
        for item in inputs:
            shown.add(item.segment)
            member = self.members.get(item.segment)
            if member is None:
                member = self.members[item.segment] = Member(item.segment, self.columns)
                member.refresh(item, self.counter_fields)
                self._join(member, item.identity, keep_history=True)
                continue
            member.refresh(item, self.counter_fields)
            if item.identity != member.identity:
                self._move(member, item.identity, now)
        for segment in [segment for segment in self.members if segment not in shown]:
            self._leave(self.members.pop(segment), now)
        self._expire(now)
        for series in self.identities.values():
            series.rank(now, self.basis_columns)

    def _series(self, identity: SeriesIdentity) -> IdentitySeries:
        series = self.identities.get(identity)
        if series is None:
            budgets = {
                "counters": KernelBudget(self.name_limit, self.rerank_s),
                "histograms": KernelBudget(self.histogram_limit, self.rerank_s),
            }
            series = self.identities[identity] = IdentitySeries(identity, self.columns, budgets)
        return series

    def _join(self, member: Member, identity: SeriesIdentity, keep_history: bool) -> None:
        member.join(keep_history)
        member.identity = identity
        series = self._series(identity)
        series.members[member.segment] = member
        series.left_at = None

    def _leave(self, member: Member, now: float) -> None:
        series = self.identities.get(member.identity) if member.identity is not None else None
        if series is None:
            return
        series.fold(member)
        series.members.pop(member.segment, None)
        if not series.members:
            series.left_at = now

    def _move(self, member: Member, identity: SeriesIdentity, now: float) -> None:
        """A process whose labels changed (its plugin named it): alone under its old identity,
        it takes its counts along and the old series end; else it leaves them there."""
        old = self.identities.get(member.identity) if member.identity is not None else None
        if old is not None and len(old.members) == 1 and not old.has_carry():
            del self.identities[old.identity]
            self._join(member, identity, keep_history=True)
            return
        self._leave(member, now)
        self._join(member, identity, keep_history=False)

    def _expire(self, now: float) -> None:
        idle = sorted(
            ((series.left_at, identity) for identity, series in self.identities.items() if series.left_at is not None),
            key=lambda entry: entry[0],
        )
        over = max(0, len(idle) - MAX_IDLE)
        for index, (left_at, identity) in enumerate(idle):
            if index < over or now - left_at >= self.grace_s:
                del self.identities[identity]

    def series(self) -> Iterator[IdentitySeries]:
        yield from sorted(self.identities.values(), key=lambda series: series.identity.values())
