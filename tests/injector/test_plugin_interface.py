"""The injector's C interface has one definition, injector/include/gpuobs_injector.h: the export
map, the built library's exports and the vLLM plugin's ctypes signatures are held to it. A
function the plugin calls but the library hides is not an error anywhere (ctypes finds no symbol
and the plugin answers "not observing"), and a mismatched argument type is undefined behaviour in
the served process: neither may reach a GPU run."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import gpuobs
import pytest
from gpuobs.injector_functions import SIGNATURES

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "injector" / "include" / "gpuobs_injector.h"
INJECTOR = Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so"
C_TYPES = {"uint64_t": ctypes.c_uint64, "uint32_t": ctypes.c_uint32, "int": ctypes.c_int}
C_TYPES["const char*"] = ctypes.c_char_p
PROBES = {"gpuobs_step_aside"}  # in the header, called by a GPU test's workload, not by the plugin


def header_functions() -> dict[str, list[type]]:
    """Each declared function's argument types, as ctypes types."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    functions = {}
    for name, arguments in re.findall(r"GPUOBS_EXPORT\s+int\s+(gpuobs_\w+)\s*\(([^)]*)\)\s*;", text):
        types = []
        for argument in [a.strip() for a in arguments.split(",")]:
            if argument == "void":
                continue
            found = re.fullmatch(r"(const char\s*\*|uint64_t|uint32_t|int)\s*\w+", " ".join(argument.split()))
            assert found, f"{name}: argument '{argument}' has a type this test does not map"
            types.append(C_TYPES[found.group(1).replace(" *", "*")])
        functions[name] = types
    return functions


def export_map_names() -> set[str]:
    text = re.sub(r"/\*.*?\*/", "", (ROOT / "injector" / "exports.map").read_text(), flags=re.S)
    global_part = re.search(r"global:(.*?)local:", text, flags=re.S)
    assert global_part, "exports.map has no global: ... local: list"
    return {name.strip() for name in global_part.group(1).split(";") if name.strip()}


def test_the_header_declares_functions_and_every_one_returns_int() -> None:
    declared = header_functions()
    assert len(declared) >= 9, declared
    # a declaration the regular expression missed (another return type, a typo) would hide here
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    assert len(re.findall(r"\bgpuobs_\w+\s*\(", text)) == len(declared)


def test_the_ctypes_signatures_are_the_headers() -> None:
    declared = header_functions()
    assert set(SIGNATURES) | PROBES == set(declared)
    for name, argtypes in SIGNATURES.items():
        assert argtypes == declared[name], name


def test_the_export_map_exports_the_header_and_the_entry_point_only() -> None:
    assert export_map_names() == {"InitializeInjection", *header_functions()}


def test_the_built_injector_exports_the_header_and_the_entry_point_only() -> None:
    if not INJECTOR.exists():
        pytest.skip("injector not built here (no nvcc or sanitizer headers)")
    nm = shutil.which("nm")
    assert nm, "binutils' nm is needed"
    exported = subprocess.run(
        [nm, "-D", "--defined-only", str(INJECTOR)], check=True, capture_output=True, text=True
    ).stdout
    names = {line.split()[-1] for line in exported.splitlines() if " T " in line}
    assert not any(name.startswith("_ZN6gpuobs") for name in names), "internals must stay hidden"
    assert names == {"InitializeInjection", *header_functions()}, sorted(names)
