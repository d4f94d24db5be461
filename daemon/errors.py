"""The typed errors of the service: what a request did wrong or could not have, each of which
the transport answers with a status code of its own (daemon/grpc_api.py)."""

from __future__ import annotations

import errno
from pathlib import Path


class InvalidArgument(ValueError):
    """The request is malformed; nothing was changed."""


class NotFound(LookupError):
    """No observed process has that pid."""


class Busy(RuntimeError):
    """As many streams and recordings run as the daemon takes at once."""


class RecordFailed(OSError):
    """Writing a recording failed (the disk, its quota, the file system); what was written of
    it has been removed. `out_of_space` tells a full disk or quota from other failures."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"recording to {path} failed: {error.strerror or error}")
        self.out_of_space = error.errno in (errno.ENOSPC, errno.EDQUOT)


def quoted(text: object, limit: int = 120) -> str:
    """A client's input inside an error message: cut, so that a megabyte sent is not echoed back."""
    text = str(text)
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"
