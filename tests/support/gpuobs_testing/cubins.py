"""Cubins nvcc builds for the tests (CI has nvcc; no GPU is needed to build one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

INLINE_CHAIN_KERNEL = "_Z10hot_kernelPKfPfi"  # the kernel of tests/fixtures/inline_chain.cu


def build_cubin(source: Path, out_dir: Path, *flags: str) -> Path:
    """`source` compiled for sm_90 into out_dir; a missing nvcc fails the test (it is required)."""
    import pytest

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.fail("nvcc is needed to build the test cubin")
    cubin = out_dir / f"{source.stem}.cubin"
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-O3", *flags, "-o", str(cubin), str(source)], check=True)
    return cubin
