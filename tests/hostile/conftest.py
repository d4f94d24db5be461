"""Fixtures of the hostile tests (gpuobs_testing.hostile)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuobs_testing import hostile


@pytest.fixture
def shared() -> Iterator[Path]:
    yield from hostile.shared_folder()
