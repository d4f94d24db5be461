"""Source lines and inline chains from a cubin built here by nvcc with -lineinfo, read with
PyPI's nvdisasm: no GPU and no CUDA toolkit beyond nvcc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpuobs.symbolize import CubinSymbols, Frame, SymbolizeError, find_nvdisasm
from gpuobs_testing.cubins import INLINE_CHAIN_KERNEL, build_cubin

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "inline_chain.cu"
KERNEL = INLINE_CHAIN_KERNEL


def build(tmp_path: Path, *flags: str) -> Path:
    return build_cubin(SOURCE, tmp_path, *flags)


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("cubin"), "-lineinfo")


def test_nvdisasm_is_available() -> None:
    assert Path(find_nvdisasm()).is_file()


def test_the_deep_load_has_the_whole_inline_chain(cubin: Path) -> None:
    symbols = CubinSymbols(cubin)
    assert KERNEL in symbols.functions
    loads = [(offset, text, frames) for offset, text, frames in symbols.functions[KERNEL] if text.startswith("LDG")]
    assert len(loads) == 1, loads
    offset, _, frames = loads[0]
    src = str(SOURCE)
    # level3 (line 4) inlined into level2 (5) into level1 (6) into hot_kernel (9): outermost last
    assert [(Path(f.file).name, f.line) for f in frames] == [
        ("inline_chain.cu", 4),
        ("inline_chain.cu", 5),
        ("inline_chain.cu", 6),
        ("inline_chain.cu", 9),
    ]
    assert frames[-1] == Frame(frames[-1].file, 9) and frames[0].file.endswith("inline_chain.cu")
    assert src.endswith(Path(frames[0].file).name)
    location = symbols.lookup(KERNEL, offset)
    assert location.frames == frames and location.instruction.startswith("LDG")


def test_gpuobsctl_source_prints_function_offset_and_chain(cubin: Path) -> None:
    offset = next(o for o, text, _ in CubinSymbols(cubin).functions[KERNEL] if text.startswith("LDG"))
    # two kernels in this cubin: the function must be named
    done = subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "source", "--cubin", str(cubin), hex(offset)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "the cubin has 2 functions" in done.stderr  # a usage error: name one
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuobs.client.main",
            "source",
            "--cubin",
            str(cubin),
            "--function",
            KERNEL,
            hex(offset),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"hot_kernel(float const*, float*, int)+{hex(offset)}: LDG")
    assert [line.split()[-1].rsplit("/", 1)[-1] for line in lines[1:]] == [
        "inline_chain.cu:4",
        "inline_chain.cu:5",
        "inline_chain.cu:6",
        "inline_chain.cu:9",
    ]
    assert lines[1].strip().startswith("at ") and lines[-1].strip().startswith("inlined into ")


def test_without_line_info_and_bad_offsets(tmp_path: Path) -> None:
    bare = build(tmp_path)
    symbols = CubinSymbols(bare)
    assert all(frames == () for _, _, frames in symbols.functions[KERNEL])
    with pytest.raises(SymbolizeError, match="not an instruction boundary"):
        symbols.lookup(KERNEL, 0x3)
    with pytest.raises(SymbolizeError, match="no function"):
        symbols.lookup("nope", 0)
    done = subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "source", "--cubin", str(bare), "--function", KERNEL, "0x3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "not an instruction boundary" in done.stderr
