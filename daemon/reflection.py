"""gRPC server reflection under both of its package names: grpc.reflection.v1alpha, which
grpcio-reflection implements, and grpc.reflection.v1, which it does not (1.85 has no v1 module)
and which clients such as grpcurl 1.9 and later ask first. The two protocols are one: the same
messages, field for field (proto/grpc/reflection/v1/reflection.proto), under another package
name. So v1 is served by re-reading each request as its v1alpha twin, letting grpcio-reflection's
servicer answer it and re-reading the answer back: one reflection implementation, whose answers
are the same whichever name a client asks by."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence

import grpc
from gpuobs.api.reflection.v1 import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha import reflection as reflection_v1alpha
from grpc_reflection.v1alpha import reflection_pb2 as reflection_v1alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as reflection_v1alpha_pb2_grpc

SERVICE_NAME = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name
SERVICE_NAME_V1ALPHA: str = reflection_v1alpha.SERVICE_NAME


class ReflectionV1Servicer(reflection_pb2_grpc.ServerReflectionServicer):
    """grpc.reflection.v1.ServerReflection answered by a v1alpha servicer: each message is
    serialized and parsed as its twin of the other package (the bytes mean the same in both)."""

    def __init__(self, v1alpha: reflection_v1alpha.aio.ReflectionServicer) -> None:
        self.v1alpha = v1alpha

    async def ServerReflectionInfo(
        self, request_iterator: AsyncIterable[reflection_pb2.ServerReflectionRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        async def as_v1alpha() -> AsyncIterator[reflection_v1alpha_pb2.ServerReflectionRequest]:
            async for request in request_iterator:
                yield reflection_v1alpha_pb2.ServerReflectionRequest.FromString(request.SerializeToString())

        async for response in self.v1alpha.ServerReflectionInfo(as_v1alpha(), context):
            yield reflection_pb2.ServerReflectionResponse.FromString(response.SerializeToString())


def enable_server_reflection(service_names: Sequence[str], server: grpc.aio.Server) -> None:
    """Serves reflection on `server` under both package names, listing `service_names` and the
    two reflection services themselves; every file of the default descriptor pool (which holds
    the generated modules imported so far, this one's v1 reflection proto among them) can be
    asked for."""
    names = [*service_names, SERVICE_NAME_V1ALPHA, SERVICE_NAME]
    v1alpha = reflection_v1alpha.aio.ReflectionServicer(names)
    reflection_v1alpha_pb2_grpc.add_ServerReflectionServicer_to_server(v1alpha, server)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(ReflectionV1Servicer(v1alpha), server)
