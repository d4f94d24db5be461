"""Tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

# `--output json`: every command prints one object with this version in `schema_version`; a
# change that removes or renames a key, or changes what one means, bumps it (keys may be added).
SCHEMA_VERSION = 1
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def message_dict(message: Message) -> dict:
    """A reply as JSON wants it: field names as in the proto, every field present, 64-bit integers
    as numbers (protobuf's JSON mapping makes them strings, which every reader must then parse)."""
    data = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    _numbers(message, data)
    return data


def _numbers(message: Message, data: dict) -> None:
    for field in message.DESCRIPTOR.fields:
        if field.name not in data:
            continue
        # `is_repeated`: in every protobuf from the floor (6.31.1) on, while `label` is gone from the newest
        repeated = field.is_repeated
        if field.type in _INT64:
            data[field.name] = [int(v) for v in data[field.name]] if repeated else int(data[field.name])
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            value = getattr(message, field.name)
            for item, item_data in zip(value, data[field.name]) if repeated else [(value, data[field.name])]:
                _numbers(item, item_data)


def emit(
    fmt: str,
    data: Any,
    columns: Sequence[tuple[str, str]] | None = None,
    rows: list[dict] | None = None,
    to: TextIO | None = None,
) -> None:
    """`to`: where JSON goes (stdout unless given: `run` keeps stdout for its command's output)."""
    if fmt == "json":
        stream = to or sys.stdout
        json.dump({"schema_version": SCHEMA_VERSION, **data}, stream, indent=2, sort_keys=True)
        stream.write("\n")
        return
    if columns is None or rows is None:
        print(data)
        return
    table(columns, rows)


_full_names = False  # --wide, or output that is not a terminal (a pipe, a file): names are never cut


def show_full_names(full: bool) -> None:
    """Set once by the CLI's main: a terminal gets names cut to their column, anything else
    (a pipe into grep, a file) and --wide the whole name, which a cut one would not match."""
    global _full_names
    _full_names = full


def fit(text: str, width: int) -> str:
    """`text` cut to `width` with '...' on a terminal; whole with --wide or when not on one."""
    return text if _full_names or len(text) <= width else text[: width - 3] + "..."


def uptime(seconds: float) -> str:
    """A long duration in its two largest units: 45s, 12m 3s, 2h 5m, 3d 4h."""
    whole = int(seconds)
    parts = [(whole // 86400, "d"), (whole % 86400 // 3600, "h"), (whole % 3600 // 60, "m"), (whole % 60, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{value}{unit}" for value, unit in parts[:2])


def micros(ns: int) -> str:
    """A duration in microseconds, one decimal: the unit goes in the column's name."""
    return f"{ns / 1000:.1f}"


def table(columns: Sequence[tuple[str, str]], rows: list[dict]) -> None:
    cells = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max([len(title)] + [len(line[i]) for line in cells]) for i, (_, title) in enumerate(columns)]
    print("  ".join(title.ljust(widths[i]) for i, (_, title) in enumerate(columns)).rstrip())
    for line in cells:
        print("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())
