"""The service's typed results (daemon/results.py) as gpuobs.v1 messages: the one place where
results meet the proto. Each result class has the name and the field names of its message, so
one conversion (fields_of) serves them all; nested results become nested messages."""

from __future__ import annotations

from typing import Any

from gpuobs.api.v1 import observer_pb2 as pb

from . import results


def fields_of(result: Any) -> Any:
    """A result as the keyword arguments of its message: nested results as dicts, lists of them
    as lists of dicts (the message constructors take both)."""
    if hasattr(result, "__dataclass_fields__"):
        return {name: fields_of(value) for name, value in vars(result).items()}
    if isinstance(result, list) and result and hasattr(result[0], "__dataclass_fields__"):
        return [fields_of(item) for item in result]
    return result


def status_response(status: results.Status) -> pb.GetStatusResponse:
    return pb.GetStatusResponse(**fields_of(status))


def processes_response(processes: list[results.Process]) -> pb.ListProcessesResponse:
    return pb.ListProcessesResponse(processes=fields_of(processes))


def kernels_response(page: results.Page[results.Kernel]) -> pb.ListKernelsResponse:
    return pb.ListKernelsResponse(kernels=fields_of(page.rows), next_page_token=page.next_page_token)


def graphs_response(page: results.Page[results.Graph]) -> pb.ListGraphsResponse:
    return pb.ListGraphsResponse(graphs=fields_of(page.rows), next_page_token=page.next_page_token)


def steps_response(steps: results.Steps) -> pb.ListStepsResponse:
    return pb.ListStepsResponse(**fields_of(steps))


def hangs_response(page: results.Page[results.HungLaunch],
                   evidence: list[results.HangEvidence]) -> pb.ListHangsResponse:
    return pb.ListHangsResponse(launches=fields_of(page.rows), processes=fields_of(evidence),
                                next_page_token=page.next_page_token)


def hot_pcs_response(hot: results.HotPcs) -> pb.ListHotPcsResponse:
    return pb.ListHotPcsResponse(**fields_of(hot))


def set_mode_response(answers: list[results.ModeResult]) -> pb.SetModeResponse:
    return pb.SetModeResponse(results=fields_of(answers))


def record_response(files: list[results.RecordedFile]) -> pb.RecordResponse:
    return pb.RecordResponse(files=fields_of(files))
