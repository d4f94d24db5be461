"""The service's typed results (daemon/results.py) as gpuobs.v1 messages: the one place where
results meet the proto. Each result class has the name and the field names of its message, so
one conversion (fields_of) serves them all; nested results become nested messages."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuobs.api.v1 import observer_pb2 as pb

from . import results


def fields_of(result: Any) -> Any:
    """A result (or a list of them) as the keyword arguments of its message: nested results as
    dicts, lists of them as lists of dicts (the message constructors take both)."""
    if isinstance(result, list):
        return [converter(type(item))(item) for item in result] if result else []
    return converter(type(result))(result)


Converter = Callable[[Any], dict]
_CONVERTERS: dict[type, Converter] = {}


def converter(cls: type) -> Converter:
    """The conversion of one result class, made once: a class without nested results is its
    instance's own dict (the constructors only read it); otherwise a copy with those fields
    converted. A page of 20,000 kernels is then one pass with no lookups per field."""
    if cls in _CONVERTERS:
        return _CONVERTERS[cls]
    nested: list[tuple[str, bool, type]] = []
    for field in dataclasses.fields(cls):
        annotation = str(field.type)
        inner = annotation.removeprefix("list[").removesuffix("]")
        inner_cls = getattr(results, inner, None)
        if isinstance(inner_cls, type) and dataclasses.is_dataclass(inner_cls):  # a result class
            nested.append((field.name, annotation.startswith("list["), inner_cls))
    if not nested:
        _CONVERTERS[cls] = vars
        return vars
    parts = [(name, many, converter(inner_cls)) for name, many, inner_cls in nested]

    def convert(result: Any) -> dict:
        fields = dict(vars(result))
        for name, many, inner in parts:
            value = fields[name]
            fields[name] = [inner(item) for item in value] if many else inner(value)
        return fields

    _CONVERTERS[cls] = convert
    return convert


def status_response(status: results.Status) -> pb.GetStatusResponse:
    return pb.GetStatusResponse(**fields_of(status))


def processes_response(processes: list[results.Process]) -> pb.ListProcessesResponse:
    return pb.ListProcessesResponse(processes=fields_of(processes))


def kernels_response(page: results.Page[results.Kernel]) -> pb.ListKernelsResponse:
    return pb.ListKernelsResponse(kernels=fields_of(page.rows), next_page_token=page.next_page_token)


def graphs_response(page: results.Page[results.Graph]) -> pb.ListGraphsResponse:
    return pb.ListGraphsResponse(graphs=fields_of(page.rows), next_page_token=page.next_page_token)


def requests_response(requests: results.Requests) -> pb.ListRequestsResponse:
    return pb.ListRequestsResponse(**fields_of(requests))


def steps_response(steps: results.Steps) -> pb.ListStepsResponse:
    return pb.ListStepsResponse(**fields_of(steps))


def ops_response(ops: results.Ops) -> pb.ListOpsResponse:
    return pb.ListOpsResponse(**fields_of(ops))


def hangs_response(
    page: results.Page[results.HungLaunch], evidence: list[results.HangEvidence]
) -> pb.ListHangsResponse:
    return pb.ListHangsResponse(
        launches=fields_of(page.rows), processes=fields_of(evidence), next_page_token=page.next_page_token
    )


def hot_pcs_response(hot: results.HotPcs) -> pb.ListHotPcsResponse:
    return pb.ListHotPcsResponse(**fields_of(hot))


def set_mode_response(answers: list[results.ModeResult]) -> pb.SetModeResponse:
    return pb.SetModeResponse(results=fields_of(answers))


def record_response(files: list[results.RecordedFile]) -> pb.RecordResponse:
    return pb.RecordResponse(files=fields_of(files))


def recorded_file(file: results.RecordedFile, path: str) -> pb.RecordedFile:
    """One recorded file's figures, under the path the caller sees it by."""
    return pb.RecordedFile(**{**fields_of(file), "path": path})
