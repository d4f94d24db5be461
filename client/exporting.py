"""What the commands that convert event files share: their arguments, and the call into the
converter (imported only when the command runs: the trace builder's protos and pyarrow are
heavy), with its failures as one-line reasons."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from gpuobs.recording import RecordingError

from .connection import CommandError


def add_export_arguments(parser: argparse.ArgumentParser, out_help: str) -> None:
    parser.add_argument("files", nargs="+", help="event files written by `gpuobsctl record` (several hosts' too)")
    parser.add_argument("--out", required=True, help=out_help)


def export_files(converter: str, files: list[str] | list[Path], out: str | Path) -> Any:
    """`converter`'s export(files, out), e.g. gpuobs.trace_export."""
    try:
        return importlib.import_module(converter).export([Path(f) for f in files], Path(out))
    except (RecordingError, OSError, RuntimeError) as error:
        raise CommandError(str(error)) from None
