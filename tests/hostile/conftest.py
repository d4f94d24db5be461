"""Fixtures of the hostile tests (gpuobs_testing.hostile)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gpuobs_testing import hostile


@pytest.fixture
def shared() -> Iterator[Path]:
    yield from hostile.shared_folder()
