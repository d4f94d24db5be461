"""Folders gpuobs writes files into that may be shared (a dataset many exports add to): each one
walked from its parent by file descriptor, never through a link (a link planted where a folder
is expected is refused, not followed), and used only when it is this user's (or root's) and no
one else may write in it (another user could then replace what gpuobs wrote). Files are created
in them exclusively (O_EXCL, O_NOFOLLOW) by the callers, through these descriptors, so nothing
between a check and a write can redirect it."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FOLDER_MODE = 0o755  # as made here (less the umask): never writable by others


class UntrustedFolder(OSError):
    """A folder gpuobs will not write in: a link, not a folder, another user's, or one that
    others may write in."""


def untrusted_problem(info: os.stat_result, risk: str = "what is written there") -> str:
    """Why a folder is not one to write in ("" when it is): it must be a directory of this user
    (or root's) that no one else may write in, or another user could replace `risk`. The daemon's
    runtime and spool folders are held to the same rule (daemon/runtime_dir.py)."""
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid not in (os.geteuid(), 0):
        return f"owned by uid {info.st_uid}, neither this user nor root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o}): they could replace {risk} (chmod go-w)"
        )
    return ""


def _open_checked(name: str, shown: Path, parent: int | None) -> int:
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # with O_DIRECTORY a link may say either
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except OSError:
                link = False
            raise UntrustedFolder(f"{shown} is {'a symbolic link: not followed' if link else 'not a folder'}") from None
        raise
    problem = untrusted_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise UntrustedFolder(f"{shown} is {problem}")
    return fd


class FolderWalk:
    """Opens (and makes, where missing) folders below a root, each checked, and remembers the
    ones it made so that a failed write can take them away again (`remove_made`)."""

    def __init__(self, root: Path) -> None:
        """The root is made when missing (its parent must be there), then checked; its own
        path up to it is the caller's (the name given), its last component is never a link."""
        self.root = Path(root)
        self.made: list[tuple[Path, int, str]] = []  # (shown path, parent fd, name), in the order made
        self._fds: dict[tuple[str, ...], int] = {}
        self.root_made = False
        try:
            os.mkdir(self.root, FOLDER_MODE)
            self.root_made = True
        except FileExistsError:
            pass
        self._fds[()] = _open_checked(str(self.root), self.root, None)

    @property
    def root_fd(self) -> int:
        return self._fds[()]

    def folder(self, parts: tuple[str, ...]) -> int:
        """The descriptor of root/parts..., each folder on the way checked (made when missing)."""
        if parts in self._fds:
            return self._fds[parts]
        parent = self.folder(parts[:-1])
        shown = self.root.joinpath(*parts)
        try:
            os.mkdir(parts[-1], FOLDER_MODE, dir_fd=parent)
            self.made.append((shown, parent, parts[-1]))
        except FileExistsError:
            pass
        self._fds[parts] = _open_checked(parts[-1], shown, parent)
        return self._fds[parts]

    def remove_made(self) -> None:
        """The folders this walk made, where they are empty (another export may have written
        into one meanwhile: that one stays)."""
        for _, parent, name in reversed(self.made):
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)
        self.made.clear()
        if self.root_made:
            with contextlib.suppress(OSError):
                os.rmdir(self.root)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> FolderWalk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def files_below(root: Path) -> Iterator[Path]:
    """The regular files below root, walked without following any link (a link is skipped)."""
    for folder, folders, files in os.walk(root, followlinks=False):
        for name in sorted(files):
            path = Path(folder) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield path
        folders.sort()
