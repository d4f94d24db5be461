"""The dependency floors pyproject.toml declares are true: in a fresh virtual environment with
every dependency at its declared minimum (read from pyproject.toml, not copied), this build's
wheel installs, and the daemon, the CLI, the metrics, the trace export and the Parquet dataset
with its queries work."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def floors() -> list[str]:
    """Each dependency pinned to its declared minimum (`name>=X` -> `name==X`)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = []
    for requirement in dependencies:
        found = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)\s*", requirement)
        assert found, f"{requirement}: a floor (>=) is what this test checks"
        pinned.append(f"{found.group(1)}=={found.group(2)}")
    return pinned


def assert_wheel_holds_the_package_only(wheel: Path) -> None:
    """One package root (gpuobs, with its daemon, client, api, segment and vllm_plugin, and the
    package data: every deployment file `gpuobsctl deploy` knows, every docs/*.md) and no test
    helper or benchmark tool."""
    from gpuobs.client.commands import deploy

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"gpuobs"}, tops
    for package in ("daemon", "client", "api/v1", "api/reflection/v1", "segment", "vllm_plugin"):
        assert f"gpuobs/{package}/__init__.py" in names, package
    packaged = {f"gpuobs/deploy/{file.source}" for file in deploy.FILES}
    packaged |= {f"gpuobs/docs/{doc.name}" for doc in (ROOT / "docs").glob("*.md")}
    assert packaged <= set(names), sorted(packaged - set(names))
    assert not [name for name in names if "floor_tool" in name or "repatch" in name or "gpuobs_testing" in name]


@pytest.mark.slow
def test_the_package_works_with_every_dependency_at_its_floor(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-C",
            "build-dir=build/{wheel_tag}",
            "-C",
            "cmake.define.GPUOBS_BENCH_TOOLS=OFF",  # the build folder's cache may hold a bench build's ON
            "-w",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    env_dir = tmp_path / "floor"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *floors(), "pytest>=8", "PyYAML>=6"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    (wheel,) = wheels.glob("gpuobs-*.whl")
    assert_wheel_holds_the_package_only(wheel)
    # the tests' helpers come from the repository (tests/support), as scripts/setup.sh installs them
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel), str(ROOT / "tests" / "support")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    versions = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "freeze"], capture_output=True, text=True, timeout=60
    ).stdout
    for pin in floors():
        name, version = pin.split("==")
        assert re.search(rf"^{re.escape(name)}=={re.escape(version)}(\.0)*$", versions, re.M | re.I), (pin, versions)
    # the daemon and CLI end to end on gpuobs-synth, the metrics through a real Prometheus, the
    # Perfetto trace, the graph join, the Parquet dataset (pyarrow) and its queries (DuckDB), gRPC
    # reflection (grpcio-reflection): the parts each dependency serves
    tests = [
        "tests/client/test_conventions.py",
        "tests/daemon/test_metrics.py",
        "tests/daemon/test_recording.py",
        "tests/daemon/test_graphs.py",
        "tests/daemon/test_parquet.py",
        "tests/client/test_query.py",
        "tests/daemon/test_reflection.py",  # reflection v1 over the floor's grpcio-reflection (v1alpha)
    ]
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
