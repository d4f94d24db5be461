"""The runtime directory: created 0750, locked before the socket is bound (gRPC unlinks an
existing socket path on bind, so without the lock a second daemon would silently take the
first one's socket), and the socket set to 0660 with the gpuobs group."""

from __future__ import annotations

import fcntl
import grp
import os
from pathlib import Path


class AlreadyRunning(RuntimeError):
    pass


class RuntimeDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_file = None

    def acquire(self) -> None:
        self.path.mkdir(mode=0o750, parents=True, exist_ok=True)
        lock_path = self.path / "gpuobsd.lock"
        handle = open(lock_path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise AlreadyRunning(f"{lock_path} is held by gpuobsd pid {holder}") from None
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
            applied = "0660 (no group named %s)" % group
        os.chmod(socket_path, 0o660)
        return applied
