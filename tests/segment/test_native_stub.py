"""The type stub of the compiled module (python/gpuobs/_native.pyi) says what the built module
binds: mypy checks every caller of gpuobs._native against that stub alone, so a stub left behind
by a change to the bindings would let a wrong call pass the type check. The stub is regenerated
from the installed module by the script that writes it, and must come out the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gpuobs

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_stub_is_what_the_built_module_binds(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "generate_native_stub.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
    )
    generated = (tmp_path / "_native.pyi").read_text()
    committed = (ROOT / "python" / "gpuobs" / "_native.pyi").read_text()
    assert generated == committed, "the bindings changed: run scripts/generate_native_stub.sh and commit the stub"


def test_the_installed_package_carries_its_types() -> None:
    """PEP 561: the marker and the stub are installed beside the module, where mypy (the test
    command's, or a user's) looks for them."""
    installed = Path(gpuobs.__file__).parent
    assert (installed / "py.typed").is_file()
    assert (installed / "_native.pyi").is_file()
    assert (installed / "api" / "v1" / "observer_pb2.pyi").is_file()
