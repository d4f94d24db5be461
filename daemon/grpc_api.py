"""The gRPC face of ObserverService: requests in, the service's results out as messages
(daemon/messages.py), typed errors to status codes. Transport only: everything it answers comes
from a method of the service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.api.v1 import observer_pb2_grpc as pb_grpc
from gpuobs.segment import EVENT_DTYPE

from . import messages, results
from .errors import Busy, InvalidArgument, NotFound, RecordFailed
from .recording_budget import RecordingAllowance
from .service import ObserverService

Context = grpc.aio.ServicerContext
T = TypeVar("T")
MAX_MESSAGE_BYTES = 4 << 20
MAX_QUEUE_BATCHES = 256  # a stream's queue, at most (and SubscriberQueue.MAX_QUEUED_BYTES)
EVENT_BYTES = EVENT_DTYPE.itemsize
STREAM_RECORDS = (MAX_MESSAGE_BYTES // 2) // EVENT_BYTES  # per EventBatch: well within a client's limit


READ_ONLY = (
    "this address is read-only (anyone who can reach a TCP port can call it): switch modes and record "
    "through the daemon's unix socket"
)


class ObserverServicer(pb_grpc.ObserverServicer):
    """`read_only` (the --listen address): queries only. What changes the observed processes or
    writes files as the daemon's user (SetMode, Record) needs the unix socket, whose mode and
    group say who may."""

    def __init__(self, service: ObserverService, *, read_only: bool = False) -> None:
        self.service = service
        self.read_only = read_only

    async def _guard(self, context: Context, call: Callable[[], T], *, inline: bool = False) -> T:
        """Runs one request's blocking work with _guard_async's status codes. Work that grows with
        kernels, graphs or events runs on the query threads; `inline` work (O(processes), as
        status is) runs on the loop itself: under load every hand-off between threads waits for
        a scheduler slice, and status is what an operator asks first when the host is busy."""

        async def work() -> T:
            if inline:
                return call()
            return await asyncio.get_running_loop().run_in_executor(self.service.executor, call)

        return await self._guard_async(context, work)

    @staticmethod
    async def _guard_async(context: Context, call: Callable[[], Awaitable[T]]) -> T:
        """Runs one request's work and maps typed errors to status codes (abort raises)."""
        try:
            return await call()
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except NotFound as error:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        except Busy as error:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        except RecordFailed as error:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED if error.out_of_space else grpc.StatusCode.INTERNAL, str(error)
            )

    async def GetStatus(self, request: pb.GetStatusRequest, context: Context) -> pb.GetStatusResponse:
        return await self._guard(context, lambda: messages.status_response(self.service.status()), inline=True)

    async def SetMode(self, request: pb.SetModeRequest, context: Context) -> pb.SetModeResponse:
        if self.read_only:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, READ_ONLY)

        async def call() -> list[results.ModeResult]:
            return await self.service.set_mode(
                request.mode,
                request.shift if request.HasField("shift") else None,
                list(request.pids),
                request.kernel_regex if request.HasField("kernel_regex") else None,
                (request.timeout_ms or 2000) / 1000.0,
                ranks=list(request.ranks),
                gpus=list(request.gpus),
            )

        return messages.set_mode_response(await self._guard_async(context, call))

    async def ListProcesses(self, request: pb.ListProcessesRequest, context: Context) -> pb.ListProcessesResponse:
        return await self._guard(context, lambda: messages.processes_response(self.service.processes()), inline=True)

    async def ListKernels(self, request: pb.ListKernelsRequest, context: Context) -> pb.ListKernelsResponse:
        return await self._guard(
            context,
            lambda: messages.kernels_response(
                self.service.kernels(list(request.pids), request.top, request.page_size, request.page_token)
            ),
        )

    async def StreamEvents(self, request: pb.StreamEventsRequest, context: Context) -> AsyncIterator[pb.EventBatch]:
        if request.queue_batches > MAX_QUEUE_BATCHES:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"queue_batches: at most {MAX_QUEUE_BATCHES}")
        subscriber, queue = await self._guard(
            context,
            lambda: self.service.open_stream(list(request.pids), request.queue_batches or 64, read_only=self.read_only),
            inline=True,
        )
        sent = 0
        try:
            while not request.max_events or sent < request.max_events:
                _, pid, payload, count = await queue.get()
                if request.max_events and sent + count > request.max_events:
                    count = request.max_events - sent
                    payload = payload[: count * EVENT_BYTES]
                # a full drain batch is 4 MiB of records: over a client's default message limit
                for first in range(0, count, STREAM_RECORDS):
                    part = min(STREAM_RECORDS, count - first)
                    sent += part
                    yield pb.EventBatch(
                        pid=pid,
                        records=payload[first * EVENT_BYTES : (first + part) * EVENT_BYTES],
                        count=part,
                        dropped_for_client=subscriber.dropped,
                    )
        finally:
            self.service.close_stream(subscriber)

    async def ListGraphs(self, request: pb.ListGraphsRequest, context: Context) -> pb.ListGraphsResponse:
        return await self._guard(
            context,
            lambda: messages.graphs_response(
                self.service.graphs(list(request.pids), request.replays or 16, request.page_size, request.page_token)
            ),
        )

    async def ListSteps(self, request: pb.ListStepsRequest, context: Context) -> pb.ListStepsResponse:
        replay = request.replay if request.HasField("replay") else None
        return await self._guard(
            context,
            lambda: messages.steps_response(
                self.service.steps(list(request.pids), request.last or 20, replay, request.page_token)
            ),
        )

    async def ListRequests(self, request: pb.ListRequestsRequest, context: Context) -> pb.ListRequestsResponse:
        return await self._guard(
            context,
            lambda: messages.requests_response(
                self.service.requests(
                    list(request.pids), request.top or 20, request.request, request.every, request.page_token
                )
            ),
        )

    async def OpenOpsWindow(self, request: pb.OpenOpsWindowRequest, context: Context) -> pb.SetModeResponse:
        if self.read_only:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, READ_ONLY)

        async def call() -> list[results.ModeResult]:
            return await self.service.open_ops_window(
                request.steps,
                list(request.pids),
                (request.timeout_ms or 2000) / 1000.0,
                ranks=list(request.ranks),
                gpus=list(request.gpus),
            )

        return messages.set_mode_response(await self._guard_async(context, call))

    async def ListOps(self, request: pb.ListOpsRequest, context: Context) -> pb.ListOpsResponse:
        return await self._guard(
            context, lambda: messages.ops_response(self.service.ops(list(request.pids), request.top or 50))
        )

    async def ListHangs(self, request: pb.ListHangsRequest, context: Context) -> pb.ListHangsResponse:
        min_age_ms = request.min_age_ms if request.HasField("min_age_ms") else 1000
        pids = list(request.pids)

        def call() -> pb.ListHangsResponse:
            page = self.service.hangs(pids, min_age_ms, request.page_size, request.page_token)
            return messages.hangs_response(
                page, [] if request.page_token else self.service.hang_evidence(pids, min_age_ms)
            )

        return await self._guard(context, call)

    async def ListHotPcs(self, request: pb.ListHotPcsRequest, context: Context) -> pb.ListHotPcsResponse:
        return await self._guard(
            context,
            lambda: messages.hot_pcs_response(
                self.service.hot_pcs(list(request.pids), request.top, request.page_size, request.page_token)
            ),
        )

    async def Record(self, request: pb.RecordRequest, context: Context) -> pb.RecordResponse:
        if self.read_only:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, READ_ONLY)

        async def call() -> list[results.RecordedFile]:
            return await self.service.record(
                request.path, request.duration_ms / 1000.0, request.max_events, list(request.pids)
            )

        return messages.record_response(await self._guard_async(context, call))

    async def RecordStream(self, request: pb.RecordRequest, context: Context) -> AsyncIterator[pb.RecordChunk]:
        if self.read_only:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, READ_ONLY)

        async def call() -> tuple[tuple[Path, RecordingAllowance], list[results.RecordedFile]]:
            return await self.service.record_to_temporary(
                request.duration_ms / 1000.0, request.max_events, list(request.pids)
            )

        spooled, files = await self._guard_async(context, call)
        try:
            for file in files:
                for data in self.service.file_chunks(file.path):
                    yield pb.RecordChunk(pid=file.pid, data=data)
                yield pb.RecordChunk(pid=file.pid, file=messages.recorded_file(file, path=""))
        finally:
            self.service.discard_temporary(spooled)


class _Malformed:
    """Stands in for a request whose bytes did not parse (answered INVALID_ARGUMENT)."""


def _safe_deserializer(message_class: type[Message]) -> Callable[[bytes], Message | _Malformed]:
    def parse(data: bytes) -> Message | _Malformed:
        try:
            return message_class.FromString(data)
        except Exception:  # DecodeError and friends: the bytes are not this message
            return _Malformed()

    return parse


def add_to_server(servicer: ObserverServicer, server: grpc.aio.Server) -> None:
    """Registers the service like the generated helper, except that a request that does not
    parse is answered INVALID_ARGUMENT (gRPC's own answer would be UNKNOWN)."""
    service = pb.DESCRIPTOR.services_by_name["Observer"]
    handlers = {}
    for method in service.methods:
        request_class = getattr(pb, method.input_type.name)
        response_class = getattr(pb, method.output_type.name)
        implementation = getattr(servicer, method.name)
        if method.server_streaming:

            async def stream(
                request: Message | _Malformed, context: Context, implementation: Any = implementation
            ) -> AsyncIterator[Message]:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed request")
                async for item in implementation(request, context):
                    yield item

            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                stream,
                request_deserializer=_safe_deserializer(request_class),
                response_serializer=response_class.SerializeToString,
            )
        else:

            async def unary(
                request: Message | _Malformed, context: Context, implementation: Any = implementation
            ) -> Message:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed request")
                return await implementation(request, context)

            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=_safe_deserializer(request_class),
                response_serializer=response_class.SerializeToString,
            )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
