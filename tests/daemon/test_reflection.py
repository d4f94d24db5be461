"""gRPC server reflection under grpc.reflection.v1 (what grpcurl 1.9 and later ask first) and
grpc.reflection.v1alpha (what grpcio-reflection implements) on a real gpuobsd, over its unix
socket and its TLS port: the same answers, byte for byte, both names listed, and the files they
serve describe gpuobs's API."""

from __future__ import annotations

from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2
from gpuobs.api.reflection.v1 import reflection_pb2 as v1
from gpuobs.api.reflection.v1 import reflection_pb2_grpc as v1_grpc
from gpuobs_testing.daemon import free_port
from gpuobs_testing.tls import make_tcp_access
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha
from grpc_reflection.v1alpha import reflection_pb2_grpc as v1alpha_grpc

# One stream of requests, as a client that explores a server sends them: what is served, the
# file of the API's service, that file by its name, the reflection service's own file, and a
# symbol nobody serves.
QUESTIONS = [
    {"list_services": ""},
    {"file_containing_symbol": "gpuobs.v1.Observer"},
    {"file_by_filename": "gpuobs/v1/observer.proto"},
    {"file_containing_symbol": "grpc.reflection.v1.ServerReflection"},
    {"file_containing_symbol": "gpuobs.v1.NoSuchService"},
]


def ask(channel: grpc.Channel, alpha: bool) -> list[bytes]:
    """The answers to QUESTIONS under one package name, serialized (the two names' messages
    are the same bytes)."""
    if alpha:
        stub = v1alpha_grpc.ServerReflectionStub(channel)
        requests = [v1alpha.ServerReflectionRequest(**question) for question in QUESTIONS]
    else:
        stub = v1_grpc.ServerReflectionStub(channel)
        requests = [v1.ServerReflectionRequest(**question) for question in QUESTIONS]
    return [answer.SerializeToString() for answer in stub.ServerReflectionInfo(iter(requests), timeout=30)]


def files(answer: v1.ServerReflectionResponse) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    found = {}
    for serialized in answer.file_descriptor_response.file_descriptor_proto:
        proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        found[proto.name] = proto
    return found


def test_reflection_v1_answers_as_v1alpha_does(start_daemon, tmp_path: Path) -> None:
    access = make_tcp_access(tmp_path / "tls")
    address = f"127.0.0.1:{free_port()}"
    daemon = start_daemon(*access.daemon_flags(address))
    token = access.token_file.read_text().strip()
    tls = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=access.cert.read_bytes()),
        grpc.access_token_call_credentials(token),
    )
    for channel in (grpc.insecure_channel(daemon.address), grpc.secure_channel(address, tls)):
        with channel:
            stable, alpha = ask(channel, alpha=False), ask(channel, alpha=True)
        assert stable == alpha
        answers = [v1.ServerReflectionResponse.FromString(serialized) for serialized in stable]
        for answer, question in zip(answers, QUESTIONS):
            # the request is echoed by grpcio-reflection 1.85, not by 1.60 (the floor): where it is, it is the one asked
            echoed = answer.original_request if answer.HasField("original_request") else None
            assert echoed in (None, v1.ServerReflectionRequest(**question))

        listed = {service.name for service in answers[0].list_services_response.service}
        assert listed == {
            "gpuobs.v1.Observer",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
            "grpc.reflection.v1.ServerReflection",
        }

        api = files(answers[1])
        assert "gpuobs/v1/observer.proto" in api, sorted(api)
        observer = api["gpuobs/v1/observer.proto"]
        assert observer.package == "gpuobs.v1" and [s.name for s in observer.service] == ["Observer"]
        assert {"GetStatus", "SetMode", "ListKernels"} <= {m.name for m in observer.service[0].method}
        assert files(answers[2]) == api

        own = files(answers[3])["grpc/reflection/v1/reflection.proto"]
        assert own.package == "grpc.reflection.v1"
        assert [m.name for m in own.service[0].method] == ["ServerReflectionInfo"]

        assert answers[4].WhichOneof("message_response") == "error_response"
        assert answers[4].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


def test_the_v1_messages_are_the_v1alpha_messages_under_another_name() -> None:
    """What the servicer's re-reading rests on: every message of v1 has its v1alpha twin, with
    the same fields (name, number, type, repetition, oneof)."""

    def shape(file: object) -> dict[str, list[tuple]]:
        return {
            name: [
                (f.name, f.number, f.type, f.is_repeated, f.containing_oneof and f.containing_oneof.name)
                for f in message.fields
            ]
            for name, message in file.message_types_by_name.items()  # type: ignore[attr-defined]
        }

    assert shape(v1.DESCRIPTOR) == shape(v1alpha.DESCRIPTOR)
    method = v1.DESCRIPTOR.services_by_name["ServerReflection"].methods_by_name["ServerReflectionInfo"]
    assert method.client_streaming and method.server_streaming
