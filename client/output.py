"""Tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence


def emit(fmt: str, data: Any, columns: Sequence[tuple[str, str]] | None = None, rows: list[dict] | None = None) -> None:
    if fmt == "json":
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return
    if columns is None or rows is None:
        print(data)
        return
    table(columns, rows)


def table(columns: Sequence[tuple[str, str]], rows: list[dict]) -> None:
    cells = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max([len(title)] + [len(line[i]) for line in cells]) for i, (_, title) in enumerate(columns)]
    print("  ".join(title.ljust(widths[i]) for i, (_, title) in enumerate(columns)).rstrip())
    for line in cells:
        print("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())
