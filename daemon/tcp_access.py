"""What the --listen port needs beyond the unix socket: TLS (the certificate and key it presents)
and a bearer token every call must carry (the socket is protected by its file mode; a TCP port by
this). A call without the token is refused UNAUTHENTICATED before it reaches the service."""

from __future__ import annotations

import hmac
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc

MIN_TOKEN_CHARS = 16


def read_token(path: str) -> str:
    """The token in the file (surrounding whitespace dropped); ValueError when it is too short."""
    token = Path(path).read_text().strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{path}: the token must have at least {MIN_TOKEN_CHARS} characters")
    return token


def server_credentials(cert_path: str, key_path: str) -> grpc.ServerCredentials:
    """The --listen port's credentials, the pair checked first (gRPC would only fail to bind the
    port, saying nothing of the files): ValueError naming what is wrong."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        raise ValueError(
            f"--tls-cert {cert_path} and --tls-key {key_path} are not a PEM certificate (chain) and its "
            f"private key: {error.reason or error}"
        ) from None
    except OSError as error:
        raise ValueError(f"cannot read --tls-cert or --tls-key: {error.strerror}: {error.filename}") from None
    return grpc.ssl_server_credentials([(Path(key_path).read_bytes(), Path(cert_path).read_bytes())])


class TokenCheck(grpc.aio.ServerInterceptor):
    """Lets through calls whose `authorization` metadata is `Bearer <token>` (compared in constant
    time); answers every other call UNAUTHENTICATED, whatever kind of call it is."""

    def __init__(self, token: str) -> None:
        self.expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        presented = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if handler is None or hmac.compare_digest(str(presented).encode(), self.expected):
            return handler
        return refusal(handler)


def refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that refuses the call."""
    message = "this port needs the daemon's token (authorization: Bearer TOKEN; gpuobsctl --token-file)"

    async def unary(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # an async generator, as a streaming handler must be

    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(handler.request_streaming, handler.response_streaming)]
    return make(
        streaming if handler.response_streaming else unary,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
