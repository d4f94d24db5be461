"""GPU suite fixtures. Every test here is skipped on a machine without an NVIDIA GPU."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"


def gpu_present() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listing.returncode == 0 and "GPU" in listing.stdout


HAVE_GPU = gpu_present()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (tests/gpu)")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            # a module that judges a saved run (harness.saved_run) needs no GPU
            if not HAVE_GPU and not getattr(item.module, "JUDGES_SAVED_RUN", False):
                item.add_marker(skip)


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """Segments on tmpfs, as in production (the ring is registered with CUDA)."""
    root = "/dev/shm" if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="gpuobs-test-", dir=root))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def geometry_program(tmp_path_factory: pytest.TempPathFactory) -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = tmp_path_factory.mktemp("programs") / "geometry"
    subprocess.run([nvcc, "-O2", "-arch=sm_90", "-o", str(binary), str(PROGRAMS / "geometry.cu")], check=True)
    return str(binary)
