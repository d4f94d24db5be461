"""Source lines for SASS offsets: a cubin's line table with inline chains, read from
`nvdisasm -gi -c` (the CUDA toolkit's, or PyPI's nvidia-cuda-nvdisasm: no toolkit needed).

A location is a function, an offset in it, and the inline chain of file:line frames, innermost
first and outermost last (a debugger shows only the innermost one)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LINE_INFO = re.compile(r'//## File "([^"]*)", line (\d+)(?: inlined at "([^"]*)", line (\d+))?')
FUNCTION = re.compile(r"^\.text\.(\S+):\s*$")


class SymbolizeError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Frame:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Location:
    function: str
    offset: int
    instruction: str
    frames: tuple[Frame, ...]  # innermost first; empty without line info


def find_nvdisasm() -> str:
    """GPUOBS_NVDISASM, then PATH, then PyPI's nvidia-cuda-nvdisasm, then the toolkit."""
    candidates = [os.environ.get("GPUOBS_NVDISASM"), shutil.which("nvdisasm")]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += [str(p) for p in Path(root).glob("cu*/bin/nvdisasm")]
    candidates.append("/usr/local/cuda/bin/nvdisasm")
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SymbolizeError("nvdisasm not found: install nvidia-cuda-nvdisasm or a CUDA toolkit")


class CubinSymbols:
    def __init__(self, cubin: str | os.PathLike[str], nvdisasm: str | None = None) -> None:
        tool = nvdisasm or find_nvdisasm()
        done = subprocess.run([tool, "-gi", "-c", str(cubin)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SymbolizeError(f"nvdisasm failed on {cubin}: {done.stderr.strip()[:300]}")
        self.functions: dict[str, list[tuple[int, str, tuple[Frame, ...]]]] = self._parse(done.stdout)

    @staticmethod
    def _parse(text: str) -> dict[str, list[tuple[int, str, tuple[Frame, ...]]]]:
        functions: dict[str, list[tuple[int, str, tuple[Frame, ...]]]] = {}
        current: list | None = None
        pending: list[Frame] = []  # line-info block being read (innermost first)
        chain: tuple[Frame, ...] = ()
        for line in text.splitlines():
            stripped = line.strip()
            match = FUNCTION.match(stripped)
            if match:
                current = functions.setdefault(match.group(1), [])
                pending, chain = [], ()
                continue
            info = LINE_INFO.search(stripped)
            if info:
                if not info.group(3):  # the outermost frame closes the block
                    pending.append(Frame(info.group(1), int(info.group(2))))
                    chain, pending = tuple(pending), []
                else:
                    pending.append(Frame(info.group(1), int(info.group(2))))
                continue
            instruction = INSTRUCTION.search(stripped)
            if instruction and current is not None:
                current.append((int(instruction.group(1), 16), instruction.group(2), chain))
        return functions

    def lookup(self, function: str, offset: int) -> Location:
        if function not in self.functions:
            raise SymbolizeError(f"no function {function!r} in this cubin")
        instructions = self.functions[function]
        for address, text, frames in instructions:
            if address == offset:
                return Location(function, offset, text, frames)
        raise SymbolizeError(f"{function}+0x{offset:x} is not an instruction boundary")


def format_location(location: Location, demangled: str | None = None) -> list[str]:
    lines = [f"{demangled or location.function}+0x{location.offset:x}: {location.instruction}"]
    if not location.frames:
        lines.append("  (no line information: build with -lineinfo)")
    for depth, frame in enumerate(location.frames):
        role = "at" if depth == 0 else "inlined into"
        lines.append(f"  {role} {frame}")
    return lines
