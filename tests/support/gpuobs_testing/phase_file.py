"""How a measured process tells its parent where it is: a line per phase in a file the parent
polls ("12.3 engine ready": seconds since the process started, then the phase), and its result
written whole or not at all. A file, never a pipe: vLLM's engine-core child can outlive the
process and keep an inherited pipe open, and a parent reading one would wait for ever."""

from __future__ import annotations

import json
import time
from pathlib import Path


class PhaseLog:
    """The writer's side; `started` is when the process began (its import time counts)."""

    def __init__(self, path: Path, started: float | None = None) -> None:
        self.path = path
        self.started = time.perf_counter() if started is None else started

    def say(self, phase: str) -> None:
        with self.path.open("a") as out:
            out.write(f"{time.perf_counter() - self.started:.1f} {phase}\n")


def phases(path: Path) -> list[tuple[float, str]]:
    """(seconds, phase) of each line written so far; none before the file exists."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(float(seconds), phase) for seconds, _, phase in (line.partition(" ") for line in lines)]


def write_json_atomically(path: Path, data: dict) -> None:
    """The result appears whole (a rename), so a parent that sees the file can read it."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    temporary.rename(path)
