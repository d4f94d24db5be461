"""The runtime directory: created 0750, or used only when it is this user's (or root's) and no one
else may write in it (another user could move the socket away, or plant a link where the lock is
written); locked before the socket is bound (gRPC unlinks an existing socket path on bind, so
without the lock a second daemon would silently take the first one's socket), and the socket set
to 0660 with the gpuobs group."""

from __future__ import annotations

import errno
import fcntl
import grp
import os
import shutil
import stat
from pathlib import Path
from typing import TextIO

from gpuobs.trusted_folder import untrusted_problem


class AlreadyRunning(RuntimeError):
    pass


class Untrusted(OSError):
    """The runtime directory (or its lock) is not one this daemon may use: another user could
    replace what is in it, or it is a link."""


# The longest path a unix socket address takes (sun_path: 108 bytes with its terminating zero).
MAX_SOCKET_PATH_BYTES = 107
SOCKET_NAME = "gpuobsd.sock"
LOCK_NAME = "gpuobsd.lock"


def socket_path_problem(runtime_dir: Path) -> str:
    """Why a socket cannot be made in this directory ("" when it can): its path is too long."""
    path = bytes(Path(runtime_dir) / SOCKET_NAME)
    if len(path) > MAX_SOCKET_PATH_BYTES:
        return (
            f"the socket path {str(Path(runtime_dir) / SOCKET_NAME)!r} is {len(path)} bytes, more than a unix "
            f"socket takes ({MAX_SOCKET_PATH_BYTES}): choose a shorter --runtime-dir"
        )
    return ""


class RuntimeDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_file: TextIO | None = None  # held once acquired

    def acquire(self) -> None:
        """Creates the directory (0750) when missing, or checks the one there; takes its lock,
        opened without following a link and only when it is this user's regular file; writes
        the pid into it once the lock is held."""
        problem = socket_path_problem(self.path)
        if problem:
            raise Untrusted(problem)
        self.path.mkdir(mode=0o750, parents=True, exist_ok=True)
        directory = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            problem = untrusted_problem(os.fstat(directory), "its socket")
            if problem:
                raise Untrusted(f"{self.path} is {problem}")
            try:
                fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640, dir_fd=directory)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise Untrusted(f"{self.path / LOCK_NAME} is a symbolic link: not followed") from None
                raise
        finally:
            os.close(directory)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            os.close(fd)
            raise Untrusted(f"{self.path / LOCK_NAME} is not a file of this user's")
        handle = os.fdopen(fd, "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(32).strip() or "another process"
            handle.close()
            raise AlreadyRunning(f"{self.path / LOCK_NAME} is held by gpuobsd pid {holder}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self.lock_file = handle  # held for the daemon's life; released by the kernel on exit

    @staticmethod
    def secure_socket(socket_path: Path, group: str) -> str:
        """0660 and the group when it exists; returns what was applied (for the log)."""
        try:
            gid = grp.getgrnam(group).gr_gid
            os.chown(socket_path, -1, gid)
            applied = f"0660 group {group}"
        except KeyError:
            applied = f"0660 (no group named {group})"
        os.chmod(socket_path, 0o660)
        return applied


def prepare_spool(path: Path) -> None:
    """The folder where streamed recordings are written first: this daemon's own (created 0700,
    or checked as the runtime folder is), emptied of what a daemon before it left (a recording cut
    off by a crash), without following any link in it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        problem = untrusted_problem(os.fstat(directory), "the recordings spooled there")
        if problem:
            raise Untrusted(f"{path} is {problem}")
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.name, dir_fd=directory, ignore_errors=True)
            else:
                os.unlink(entry.name, dir_fd=directory)
    finally:
        os.close(directory)
