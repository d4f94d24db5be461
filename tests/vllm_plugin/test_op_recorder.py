"""The op recorder on a small model on the CPU: what it labels (module path, op, dtypes and shapes),
that it closes every op, and that it leaves the results and the model as they were. Needs torch
(skipped without it: the GPU machine's suite runs it, and any machine with torch)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuobs.op_recorder import ModulePaths, describe, op_name, recording_ops  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up_proj = torch.nn.Linear(8, 16, bias=False)
        self.down_proj = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.up_proj(x)))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(Block(), Block()).to(torch.bfloat16)


def test_each_op_is_labelled_with_its_module_path_and_inputs_then_closed() -> None:
    net, labels = model(), []
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.inference_mode():
        expected = net(x)
        with recording_ops(labels.append, net) as recorder:
            got = net(x)
    assert torch.equal(got, expected)
    opened = [label for label in labels if label]
    assert labels == [item for label in opened for item in (label, "")]  # every op closed before the next
    assert recorder.ops == len(opened) > 0
    first_mm = next(label for label in opened if label.startswith("0.up_proj "))
    assert first_mm.split()[1] in ("aten::mm", "aten::addmm", "aten::linear")
    assert "bf16[4,8]" in first_mm and "bf16[16,8]" in first_mm, first_mm
    assert any(label.startswith("1.down_proj ") for label in opened)
    assert any(label.startswith("0 aten::silu") for label in opened), opened  # an op of the block itself


def test_hooks_are_gone_afterwards_and_other_modules_go_by_class_name() -> None:
    net, labels = model(), []
    stranger = torch.nn.Linear(8, 8).to(torch.bfloat16)
    with torch.inference_mode(), recording_ops(labels.append, net):
        stranger(torch.randn(2, 8, dtype=torch.bfloat16))
    assert any(label.startswith("Linear ") for label in labels), labels
    labels.clear()
    net(torch.randn(2, 8, dtype=torch.bfloat16))
    assert labels == []  # nothing recorded once the block is left


def test_describe_and_op_name() -> None:
    assert (
        describe(([torch.zeros(2, 3, dtype=torch.float16)], {"b": torch.ones(5, dtype=torch.int64), "n": 3}))
        == "f16[2,3] i64[5]"
    )
    assert op_name(torch.ops.aten.mm.default) == "aten::mm"
    assert ModulePaths(None).current() == "-"


def test_nothing_in_the_recorder_can_stop_an_op() -> None:
    """A record that fails (the injector gone), a tensor whose shape cannot be read, a 'model'
    that is not a module: the ops run and give what they give without the recorder."""

    def failing(label: str) -> None:
        raise OSError("ring gone")

    net, x = model(), torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.inference_mode():
        expected = net(x)
        with recording_ops(failing, net):
            assert torch.equal(net(x), expected)
    labels: list[str] = []
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)])
    with recording_ops(labels.append, object()):  # not a module: no paths
        doubled = nested * 2
    assert doubled.is_nested and all(label.startswith("- ") or not label for label in labels)


def test_an_op_that_names_a_layer_of_the_model_takes_its_path() -> None:
    """vLLM's attention and cache ops take their layer's name (a string, or an object holding it
    in `value`): under torch.compile no module hook runs, and that name is the op's path."""
    net, labels = model(), []

    class LayerName:
        def __init__(self, value: str) -> None:
            self.value = value

    paths = ModulePaths(net)
    assert paths.of_op(((torch.zeros(1), "1.down_proj"), {})) == "1.down_proj"
    assert paths.of_op(((torch.zeros(1), LayerName("0.up_proj")), {})) == "0.up_proj"
    assert paths.of_op(((torch.zeros(1), "not a module"), {})) == "-"
    with recording_ops(labels.append, net):
        torch.ops.aten.div.Tensor_mode(torch.ones(2), torch.ones(2), rounding_mode="floor")
    assert any(label.startswith("- aten::div") for label in labels), labels


def test_under_capture_each_op_reports_its_stream_before_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    class Stream:
        cuda_stream = 0x5EED

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
    with recording_ops(
        lambda label: events.append(label or "close"), model(), lambda stream: events.append(f"capture {stream:#x}")
    ):
        torch.ones(2) + 1
    # before the op opens (nodes added in between are no op's), after it ran, then it closes
    assert events[-4:] == ["capture 0x5eed", events[-3], "capture 0x5eed", "close"] and "aten::add" in events[-3], (
        events
    )


def test_a_failing_capture_report_does_not_stop_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(stream: int) -> None:
        raise OSError("injector gone")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)  # no cuda_stream either
    with recording_ops(lambda label: None, model(), failing):
        assert torch.equal(torch.ones(2) + 1, torch.full((2,), 2.0))


def test_the_nodes_after_a_captures_last_op_are_reported_before_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled region may end with kernels it launches itself: the recorder reports the
    capture once more when torch ends it (CUDAGraph.capture_end), and leaves capture_end as it
    was afterwards."""
    events: list[object] = []
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", lambda graph: events.append("ended"), raising=False)
    stub = torch.cuda.CUDAGraph.__dict__["capture_end"]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 42})())
    with recording_ops(lambda label: None, None, events.append):
        torch.cuda.CUDAGraph.capture_end(None)
    assert events == [42, "ended"]
    assert torch.cuda.CUDAGraph.__dict__["capture_end"] is stub
    events.clear()
    with recording_ops(lambda label: None, None):  # no capture hook: capture_end untouched
        assert torch.cuda.CUDAGraph.__dict__["capture_end"] is stub


def test_recorders_that_end_out_of_order_leave_capture_end_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[object] = []
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", lambda graph: events.append("ended"), raising=False)
    stub = torch.cuda.CUDAGraph.__dict__["capture_end"]
    first = recording_ops(lambda label: None, None, events.append)
    second = recording_ops(lambda label: None, None, events.append)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends before the second
    assert torch.cuda.CUDAGraph.__dict__["capture_end"] is not stub  # the second still records
    second.__exit__(None, None, None)
    assert torch.cuda.CUDAGraph.__dict__["capture_end"] is stub
