"""Without nvcc the build fails and names the remedy, unless a daemon-only build was asked for:
a CMake configure of the project (no build) with a PATH and a CUDA_HOME that hide nvcc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pybind11
import pytest

ROOT = Path(__file__).resolve().parents[2]
NVCC_INSTALL = (
    'pip install --target DIR "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" '
    '"nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*"'
)
DAEMON_ONLY = "pip install -C cmake.define.GPUOBS_DAEMON_ONLY=ON ."


def configure(tmp_path: Path, *defines: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """CMake's configure of the project with nvcc out of reach; its output (stdout and stderr) in
    stdout, spaces and line breaks each made one space (CMake wraps its messages' prose)."""
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (the build needs it too)"
    # The compiler and the generator by full path: the PATH below may lose the folder they are in.
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    assert compiler, "a C++ compiler is needed"
    ninja = shutil.which("ninja")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    empty_cuda_home = tmp_path / "cuda"
    empty_cuda_home.mkdir()
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    hidden = {name: value for name, value in os.environ.items() if name != "GPUOBS_DAEMON_ONLY"}
    hidden.update(PATH=os.pathsep.join(path), CUDA_HOME=str(empty_cuda_home), **(env or {}))
    done = subprocess.run(
        [
            cmake,
            "-S",
            str(ROOT),
            "-B",
            str(tmp_path / "build"),
            *generator,
            f"-DCMAKE_CXX_COMPILER={compiler}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            *defines,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env=hidden,
    )
    done.stdout = " ".join(done.stdout.split())
    return done


def test_without_nvcc_the_configure_fails_and_names_the_remedy(tmp_path: Path) -> None:
    done = configure(tmp_path)
    assert done.returncode != 0, done.stdout
    assert "cannot build the injector" in done.stdout, done.stdout
    assert "nvcc, the CUDA compiler" in done.stdout, done.stdout
    # whole, as a user would copy them
    assert NVCC_INSTALL in done.stdout, done.stdout
    assert "export CUDA_HOME=DIR/nvidia/cu13" in done.stdout, done.stdout
    assert DAEMON_ONLY in done.stdout, done.stdout
    assert "GPUOBS_DAEMON_ONLY=1 pip install ." in done.stdout, done.stdout


def test_a_daemon_only_build_configures_and_says_the_injector_is_left_out(tmp_path: Path) -> None:
    done = configure(tmp_path, "-DGPUOBS_DAEMON_ONLY=ON")
    assert done.returncode == 0, done.stdout
    assert "the injector (gpuobs/lib/libgpuobs_injector.so) is left out on purpose" in done.stdout, done.stdout


def test_the_environment_variable_asks_for_daemon_only_too(tmp_path: Path) -> None:
    done = configure(tmp_path, env={"GPUOBS_DAEMON_ONLY": "1"})
    assert done.returncode == 0, done.stdout
    assert "left out on purpose" in done.stdout, done.stdout


@pytest.mark.parametrize("value", ["ON", "OFF"])
def test_the_old_require_switch_is_accepted_and_changes_nothing(tmp_path: Path, value: str) -> None:
    """Older scripts pass GPUOBS_REQUIRE_INJECTOR; OFF no longer leaves the injector out silently."""
    done = configure(tmp_path, f"-DGPUOBS_REQUIRE_INJECTOR={value}")
    assert done.returncode != 0, done.stdout
    assert DAEMON_ONLY in done.stdout, done.stdout
