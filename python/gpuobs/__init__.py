"""gpuobs: an always-on observer for the GPU kernels of live LLM serving.

The package's native core (``gpuobs._native``) is built from the same segment library as the
injector (``segment/native``), so the segment layout exists once, in
``segment/native/include/gpuobs/layout.h``, and Python reads its field tables.
"""

from pathlib import Path

__version__ = "0.1.0"  # the one version: pyproject.toml and gpuobs-synth take it from here


def version_line(program: str) -> str:
    """What `--version` prints: the package's version and the segment layout it reads and writes
    (a daemon and an injector of different layouts do not understand each other's segments)."""
    from gpuobs._native import LAYOUT_VERSION

    return f"{program} {__version__} (segment layout {LAYOUT_VERSION})"


def injector_library() -> Path:
    """This installation's injector, the path CUDA_INJECTION64_PATH names in a program to
    observe (`gpuobsctl injector-path` prints it for drop-ins; it may be absent in a build made
    without the CUDA toolchain)."""
    from pathlib import Path

    return Path(__file__).parent / "lib" / "libgpuobs_injector.so"
