"""sd_notify without a dependency: READY, WATCHDOG, STOPPING to $NOTIFY_SOCKET when set."""

from __future__ import annotations

import os
import socket

import structlog

log = structlog.get_logger("gpuobsd")
_failed_once = False


def notify(state: str) -> bool:
    """False when there is no systemd to tell, or telling it failed (a stale NOTIFY_SOCKET, say):
    logged once, never raised, the daemon goes on."""
    global _failed_once
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)  # never hold the event loop: a full queue is a failed notify
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as error:
        if not _failed_once:
            _failed_once = True
            log.warning("sd_notify_failed", socket=os.environ.get("NOTIFY_SOCKET"), error=str(error))
        return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of systemd's WatchdogSec, when this process is the one being watched."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6
