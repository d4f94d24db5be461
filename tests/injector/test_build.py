"""The injector and its patch fatbin are built and shipped by `pip install .` (CI builds them
with GPUOBS_REQUIRE_INJECTOR=1 from PyPI's sanitizer package and nvcc, with no GPU)."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import gpuobs

LIB_DIR = Path(gpuobs.__file__).parent / "lib"
INJECTOR = LIB_DIR / "libgpuobs_injector.so"
FATBIN = LIB_DIR / "gpuobs_patches.fatbin"
ROOT = Path(__file__).resolve().parents[2]
FATBIN_MAGIC = 0xBA55ED50  # little-endian uint32 at the start of a CUDA fatbin


@pytest.fixture(scope="module", autouse=True)
def injector_built() -> None:
    if not INJECTOR.exists():
        if os.environ.get("GPUOBS_REQUIRE_INJECTOR") == "1":
            pytest.fail(f"the injector was not built: {INJECTOR} is missing")
        pytest.skip("injector not built here (no nvcc or sanitizer headers)")


def test_injector_exports_the_cuda_entry_point_only() -> None:
    nm = shutil.which("nm")
    assert nm, "binutils' nm is needed"
    exported = subprocess.run([nm, "-D", "--defined-only", str(INJECTOR)], check=True, capture_output=True,
                              text=True).stdout
    names = {line.split()[-1] for line in exported.splitlines() if " T " in line}
    assert "InitializeInjection" in names
    assert not any(name.startswith("_ZN6gpuobs") for name in names), "internals must stay hidden"


def test_injector_loads_and_finds_the_sanitizer_library() -> None:
    # Loading runs no CUDA code; it proves every dependency resolves through the library's RPATH.
    library = ctypes.CDLL(str(INJECTOR))
    assert library.InitializeInjection is not None


def test_patch_fatbin_is_a_fatbin_with_our_patch_functions() -> None:
    data = FATBIN.read_bytes()
    assert int.from_bytes(data[:4], "little") == FATBIN_MAGIC
    for name in [b"gpuobs_block_enter", b"gpuobs_block_exit", b"gpuobs_memory_access"]:
        assert name in data, name


def test_every_patch_function_the_patcher_names_is_in_the_fatbin() -> None:
    """The patcher names its functions as strings (diagnostic ones too): a misspelt one would
    fail only on the GPU, when a module loads."""
    names = set(re.findall(r'"(gpuobs_[a-z_]+)"', (ROOT / "injector" / "src" / "patcher.cpp").read_text()))
    assert len(names) >= 10, names
    data = FATBIN.read_bytes()
    assert [name for name in sorted(names) if name.encode() + b"\0" not in data] == []  # whole names


def test_floor_tool_is_built_beside_the_injector_and_loads() -> None:
    """The benchmarks' floor tool (empty callbacks, empty patch) ships with the injector."""
    floor = LIB_DIR / "libgpuobs_floor_tool.so"
    assert floor.exists()
    assert ctypes.CDLL(str(floor)).InitializeInjection is not None
