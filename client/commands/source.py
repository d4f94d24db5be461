"""gpuobsctl source: which source line a PC is, with the whole inline chain (outermost last).

source --cubin FILE [--function NAME] OFFSET   offline: an offset in a cubin's function
source --pid PID PC                            a PC from a live process's events: the daemon
                                               names the kernel and its kept cubin
source --pid PID --top N [--kernel REGEX]      the source lines (PCs without line info) with
                                               the most memory events (memory, sampled modes)
"""

from __future__ import annotations

import argparse
import collections
import re

from gpuobs import _native
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.symbolize import CubinSymbols, SymbolizeError, format_location

from ..arguments import pid, uint32
from ..connection import CommandError, UsageError, all_pages, every_kernel
from ..output import emit, fit, table

NAME = "source"
HELP = "source line and inline chain of a PC (or a cubin offset); --top: hottest lines"
EXAMPLES = """examples:
  gpuobsctl source --pid 4242 0x7f3a2c001230
  gpuobsctl source --pid 4242 --top 10 --kernel reshape_and_cache
  gpuobsctl source --cubin kernel.cubin 0x1a0"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "address_or_offset", nargs="?", help="PC (with --pid) or offset (with --cubin), 0x... or decimal"
    )
    parser.add_argument("--cubin", help="offline: the module's cubin")
    parser.add_argument("--function", help="offline: mangled kernel name (may be omitted when the cubin has one)")
    parser.add_argument("--pid", type=pid, help="a process the daemon observes")
    parser.add_argument("--top", type=uint32, help="the N source lines with the most memory events")
    parser.add_argument("--kernel", help="with --top: only kernels whose name matches this regex")


def number(text: str | None, what: str) -> int:
    if text is None:
        raise UsageError(f"give the {what}")
    try:
        return int(text, 0)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a number") from None


class Symbolizer:
    """Cubins parsed once per command."""

    def __init__(self) -> None:
        self.cache: dict[str, CubinSymbols] = {}

    def symbols(self, cubin: str) -> CubinSymbols:
        if cubin not in self.cache:
            self.cache[cubin] = CubinSymbols(cubin)
        return self.cache[cubin]


def kernel_for_pc(kernels: list[pb.Kernel], pc: int) -> pb.Kernel:
    """The kernel whose code holds pc: the nearest function start at or below it (functions do
    not overlap in device memory; several kernels of one module share its cubin)."""
    below = [k for k in kernels if k.function_pc and k.function_pc <= pc]
    if not below:
        raise CommandError(
            f"no kernel of this process starts at or below 0x{pc:x} (function addresses "
            "are known only for kernels whose module cubin was kept)"
        )
    return max(below, key=lambda k: k.function_pc)


def run(args: argparse.Namespace) -> int:
    if args.cubin:
        return offline(args)
    if args.pid is None:
        raise UsageError("give --cubin FILE OFFSET, or --pid PID PC, or --pid PID --top N")
    if args.top is not None:
        return hot_lines(args)
    pc = number(args.address_or_offset, "PC")
    kernels = every_kernel(args.address, [args.pid])
    kernel = kernel_for_pc(kernels, pc)
    if not kernel.cubin:
        raise CommandError(f"{kernel.name}: its module's cubin was not kept")
    try:
        location = Symbolizer().symbols(kernel.cubin).lookup(kernel.mangled, pc - kernel.function_pc)
    except SymbolizeError as error:
        raise CommandError(str(error)) from None
    print(f"pc 0x{pc:x} in pid {args.pid}, cubin {kernel.cubin}")
    for line in format_location(location, kernel.name):
        print(line)
    return 0


def offline(args: argparse.Namespace) -> int:
    offset = number(args.address_or_offset, "offset")
    try:
        symbols = CubinSymbols(args.cubin)
        names = [args.function] if args.function else list(symbols.functions)
        if len(names) != 1:
            raise UsageError(f"the cubin has {len(names)} functions: name one with --function")
        location = symbols.lookup(names[0], offset)
    except SymbolizeError as error:
        raise CommandError(str(error)) from None
    for line in format_location(location, _native.demangle(location.function)):
        print(line)
    return 0


def hot_lines(args: argparse.Namespace) -> int:
    if args.top <= 0:
        raise UsageError("--top must be positive")
    try:
        pattern = re.compile(args.kernel) if args.kernel else None
    except re.error as error:
        raise UsageError(f"bad --kernel regex: {error}") from None
    response = all_pages(args.address, "ListHotPcs", pb.ListHotPcsRequest(pids=[args.pid]), "pcs")
    symbolizer = Symbolizer()
    lines: collections.Counter = collections.Counter()
    chains: dict[tuple[str, str], str] = {}
    for hot in response.pcs:
        if pattern and not (pattern.search(hot.kernel) or pattern.search(hot.mangled)):
            continue
        where = f"pc 0x{hot.pc:x}"
        chain = ""
        if hot.cubin and hot.function_pc and hot.pc >= hot.function_pc:
            offset = hot.pc - hot.function_pc
            where = f"+0x{offset:x}"
            try:
                location = symbolizer.symbols(hot.cubin).lookup(hot.mangled, offset)
                if location.frames:
                    where = str(location.frames[0])
                    chain = " <- ".join(str(frame) for frame in location.frames[1:])
            except SymbolizeError:
                pass
        lines[(hot.kernel, where)] += hot.events
        chains.setdefault((hot.kernel, where), chain)
    ranked = lines.most_common(args.top)
    total = sum(lines.values()) or 1
    rows = [
        {
            "events": events,
            "share": f"{100 * events / total:.1f}%",
            "line": where,
            "inlined": chains[(kernel, where)] or "-",
            "kernel": fit(kernel, 50),
        }
        for (kernel, where), events in ranked
    ]
    if args.output == "json":
        emit(
            "json",
            {"lines": rows, "events_counted": response.events_counted, "events_skipped": response.events_skipped},
        )
        return 0
    table(
        [
            ("events", "EVENTS"),
            ("share", "SHARE"),
            ("line", "LINE"),
            ("inlined", "INLINED INTO (outermost last)"),
            ("kernel", "KERNEL"),
        ],
        rows,
    )
    if response.events_skipped:
        print(f"({response.events_skipped} memory events were not counted: the daemon's analysis budget was spent)")
    return 0
