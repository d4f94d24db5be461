"""Reaching gpuobsd: the address (flag, GPUOBS_ADDRESS, or the default unix socket) and the
mapping of gRPC failures to one-line reasons."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Protocol

import grpc
from gpuobs.api.v1 import observer_pb2_grpc

DEFAULT_ADDRESS = "unix:///run/gpuobs/gpuobsd.sock"
# A reply may exceed gRPC's default 4 MiB (every kernel of a process with tens of thousands).
RECEIVE_LIMIT_BYTES = 256 << 20


class CommandError(Exception):
    """A failure the CLI reports as one line and exit 1."""


class UsageError(CommandError):
    """Wrong usage found by a command before it calls anything (arguments that argparse alone
    cannot check): one line and exit 2, as argparse's own usage errors."""


def address_of(flag: str | None) -> str:
    return flag or os.environ.get("GPUOBS_ADDRESS") or DEFAULT_ADDRESS


# A TCP address (gpuobsd --listen) is TLS with a bearer token: the CA that signed the daemon's
# certificate and the token's file, from --tls-ca / --token-file or GPUOBS_TLS_CA / GPUOBS_TOKEN_FILE.
_tcp: dict[str, str | None] = {"ca": None, "token_file": None}


def configure_tcp(ca: str | None, token_file: str | None) -> None:
    _tcp["ca"] = ca or os.environ.get("GPUOBS_TLS_CA") or None
    _tcp["token_file"] = token_file or os.environ.get("GPUOBS_TOKEN_FILE") or None


def is_unix(address: str) -> bool:
    return address.startswith("unix:")


def tcp_credentials(address: str) -> grpc.ChannelCredentials:
    if not _tcp["ca"] or not _tcp["token_file"]:
        raise CommandError(
            f"{address} is a TCP address: gpuobsd serves it over TLS to clients with its token; "
            f"give --tls-ca CA.pem and --token-file FILE (or GPUOBS_TLS_CA, GPUOBS_TOKEN_FILE)"
        )
    try:
        ca = open(_tcp["ca"], "rb").read()
        token = open(_tcp["token_file"]).read().strip()
    except OSError as error:
        raise CommandError(f"reading the TLS settings: {error}") from None
    return grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=ca), grpc.access_token_call_credentials(token)
    )


def stub(address: str) -> observer_pb2_grpc.ObserverStub:
    options = [("grpc.max_receive_message_length", RECEIVE_LIMIT_BYTES)]
    channel = (
        grpc.insecure_channel(address, options=options)
        if is_unix(address)
        else grpc.secure_channel(address, tcp_credentials(address), options=options)
    )
    return observer_pb2_grpc.ObserverStub(channel)


def unreachable(address: str, details: str) -> str:
    """Why gpuobsd cannot be reached at this address, in plain words, with what to do next."""
    if is_unix(address):
        path = address.removeprefix("unix://") if address.startswith("unix://") else address.removeprefix("unix:")
        directory = os.path.dirname(path) or "."
        if os.path.isdir(directory) and not os.access(directory, os.X_OK):  # the socket may be there: unseen
            return (
                f"permission denied on {directory}: gpuobsd's runtime directory is for its owner and group "
                f"(`ls -ld {directory}`); run as a member of that group, e.g. `sudo usermod -aG gpuobs $USER`, "
                f"then log in again"
            )
        if not os.path.exists(path):
            return (
                f"gpuobsd is not running: no socket at {path} (start it: `systemctl start gpuobsd`, or "
                f"`gpuobsd --runtime-dir DIR`; another address: --address or GPUOBS_ADDRESS)"
            )
        if not os.access(path, os.R_OK | os.W_OK):
            return (
                f"permission denied on {path}: the socket is for its owner and group (`ls -l {path}`); "
                f"run as a member of that group, e.g. `sudo usermod -aG gpuobs $USER`, then log in again"
            )
        return (
            f"nothing answers on {path} (a socket left by a gpuobsd that is gone, or one still starting): "
            f"`systemctl status gpuobsd`, or start gpuobsd again ({details})"
        )
    return (
        f"cannot reach gpuobsd at {address} ({details}): is it running with `--listen` on that address, "
        f"and does a firewall let the port through?"
    )


def failure(address: str, error: grpc.RpcError, timeout: float) -> CommandError:
    """A failed call as the one line gpuobsctl prints."""
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return CommandError(unreachable(address, error.details() or "no details"))
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return CommandError(f"gpuobsd at {address} refused the token (--token-file): {error.details()}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CommandError(
            f"gpuobsd at {address} did not answer within {timeout:g} s (busy, or stopped): "
            f"`gpuobsctl status` to see whether it answers at all"
        )
    return CommandError(f"{code.name.lower()}: {error.details()}")


# The calls below name the RPC (`method`) by its string, so their replies are typed by the caller,
# who knows which message the RPC answers; to the type checker they are Any.


def call(address: str, method: str, request: object, timeout: float = 10.0) -> Any:
    try:
        return getattr(stub(address), method)(request, timeout=timeout)
    except grpc.RpcError as error:
        raise failure(address, error, timeout) from None


def each_reply(address: str, method: str, request: object, timeout: float) -> Iterator[Any]:
    """The replies of a streaming call, its failure as one line."""
    try:
        yield from getattr(stub(address), method)(request, timeout=timeout)
    except grpc.RpcError as error:
        raise failure(address, error, timeout) from None


class PagedRequest(Protocol):
    """A list RPC's request: its replies come a page at a time, the next one from this token on."""

    page_token: str


def all_pages(address: str, method: str, request: PagedRequest, field: str, timeout: float = 30.0) -> Any:
    """A paged list RPC's first reply with the items of every later page added to `field`,
    following next_page_token to the end."""
    reply = call(address, method, request, timeout=timeout)
    while reply.next_page_token:
        request.page_token = reply.next_page_token
        page = call(address, method, request, timeout=timeout)
        getattr(reply, field).extend(getattr(page, field))
        reply.next_page_token = page.next_page_token
    return reply


def every_page(address: str, method: str, request: PagedRequest, field: str, timeout: float = 30.0) -> list:
    """Every item of a paged list RPC."""
    return list(getattr(all_pages(address, method, request, field, timeout), field))


def every_kernel(address: str, pids: list[int], timeout: float = 30.0) -> list:
    """Every kernel of those processes (all, when empty), page by page, in (pid, slot) order."""
    from gpuobs.api.v1 import observer_pb2 as pb

    return every_page(address, "ListKernels", pb.ListKernelsRequest(pids=pids), "kernels", timeout)
