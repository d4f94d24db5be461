"""gpuobsctl's entry point, apart from everything it imports: Ctrl-C at any moment, the start-up
imports (gRPC, protobuf: a few hundred milliseconds) included, ends it with 130 and one line,
never a traceback."""

from __future__ import annotations

import signal
import sys


def interrupted() -> int:
    """What Ctrl-C ends every gpuobsctl command with: one line and 130, as a shell reports SIGINT."""
    print("gpuobsctl: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT


def main() -> int:
    try:
        from .main import main as run

        return run()
    except KeyboardInterrupt:
        return interrupted()
