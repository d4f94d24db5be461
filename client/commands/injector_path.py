"""gpuobsctl injector-path: where this installation's injector library is, for a drop-in's
CUDA_INJECTION64_PATH (the path depends on the Python version and the environment)."""

from __future__ import annotations

import argparse

import gpuobs

from ..connection import CommandError
from ..output import emit

NAME = "injector-path"
HELP = "print the injector library's path (CUDA_INJECTION64_PATH for the programs to observe)"
EXAMPLES = """examples:
  export CUDA_INJECTION64_PATH=$(gpuobsctl injector-path)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    library = gpuobs.injector_library()
    if not library.is_file():
        raise CommandError(
            f"{library} is missing: this gpuobs was built without the injector (no nvcc or "
            f"no sanitizer headers at build time); rebuild where the CUDA toolkit is installed"
        )
    if args.output == "json":
        emit("json", {"injector": str(library)})
    else:
        print(library)
    return 0
