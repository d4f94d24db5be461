"""sd_notify without a dependency: READY, WATCHDOG, STOPPING to $NOTIFY_SOCKET when set."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True


def watchdog_interval_s() -> float | None:
    """Half of systemd's WatchdogSec, when this process is the one being watched."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6
