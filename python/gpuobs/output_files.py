"""Files the exports write, whole or not at all: never over a file that is there, never a part
of one left behind (a failure or Ctrl-C half way leaves nothing), since a trace or table that
stops in the middle reads as a shorter window rather than as an error."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class OutputExists(RuntimeError):
    """The file to write is there already: not written over."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} exists: not written over")


def refuse_existing(*paths: Path) -> None:
    for path in paths:
        if os.path.lexists(path):
            raise OutputExists(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def new_files(paths: list[Path]) -> Iterator[list[BinaryIO]]:
    """Each of `paths` written through a hidden temporary file beside it, put in place (hard
    linked: never over a file that appeared meanwhile) only once all were written; on any
    failure none is left."""
    refuse_existing(*paths)
    mode = 0o666 & ~_umask()  # as an ordinary new file would be
    temps: list[str] = []
    placed: list[Path] = []
    try:
        handles: list[BinaryIO] = []
        with contextlib.ExitStack() as stack:
            for path in paths:
                fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
                temps.append(temp)
                os.fchmod(fd, mode)
                handles.append(stack.enter_context(os.fdopen(fd, "wb")))
            yield handles
        for temp, path in zip(temps, paths):
            try:
                os.link(temp, path)
            except FileExistsError:
                raise OutputExists(path) from None
            except OSError:  # a file system without hard links: checked, then renamed
                refuse_existing(path)
                os.rename(temp, path)
            placed.append(path)
    except BaseException:
        for path in placed:
            path.unlink(missing_ok=True)
        raise
    finally:
        for temp in temps:
            with contextlib.suppress(FileNotFoundError):  # renamed into place
                os.unlink(temp)


@contextlib.contextmanager
def new_file(path: Path) -> Iterator[BinaryIO]:
    """One file, as new_files writes them."""
    with new_files([path]) as (handle,):
        yield handle
