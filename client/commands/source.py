"""gpuobsctl source --cubin FILE [--function NAME] OFFSET: function, offset, file:line and the
whole inline chain (outermost last) of a SASS offset. Works offline, without the daemon."""

from __future__ import annotations

import argparse

from gpuobs import _native
from gpuobs.symbolize import CubinSymbols, SymbolizeError, format_location

from ..connection import CommandError

NAME = "source"
HELP = "source line and inline chain of a SASS offset in a cubin"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("offset", help="offset in the function (0x... or decimal)")
    parser.add_argument("--cubin", required=True, help="the module's cubin")
    parser.add_argument("--function", help="mangled kernel name (may be omitted when the cubin has one)")


def run(args: argparse.Namespace) -> int:
    try:
        offset = int(args.offset, 0)
        symbols = CubinSymbols(args.cubin)
        names = [args.function] if args.function else list(symbols.functions)
        if len(names) != 1:
            raise CommandError(f"the cubin has {len(names)} functions: name one with --function")
        location = symbols.lookup(names[0], offset)
    except ValueError:
        raise CommandError(f"offset {args.offset!r} is not a number") from None
    except SymbolizeError as error:
        raise CommandError(str(error)) from None
    for line in format_location(location, _native.demangle(location.function)):
        print(line)
    return 0
