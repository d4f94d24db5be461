"""The injector resolves driver entry points by name at start, and a required one the driver
lacks turns the injector off (three were once resolved and never used). Every
entry point resolved must be used somewhere in the injector."""

from __future__ import annotations

import re
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[2] / "injector" / "src"


def test_every_resolved_driver_entry_point_is_used() -> None:
    resolver = (SOURCES / "driver_api.cpp").read_text()
    resolved = re.findall(r'resolve\(get, "(cu\w+)", &(\w+),', resolver)
    assert len(resolved) >= 8, resolved
    users = "\n".join(
        path.read_text() for path in SOURCES.iterdir() if path.suffix in (".cpp", ".h") and path.stem != "driver_api"
    )
    users += resolver.split("bool DriverApi::load", 1)[0] + resolver.split("return loaded;", 1)[-1]
    unused = [name for name, member in resolved if not re.search(rf"\b{member}\b", users)]
    assert unused == [], f"resolved but never used: {unused}"
