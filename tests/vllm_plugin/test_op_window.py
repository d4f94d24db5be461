"""The op window of the vLLM plugin without vLLM: the first GPUOBS_OPS_STEPS steps run inside the
recorder's context, later ones not, and nothing it does can stop a step (without torch it says so
once and the steps run unrecorded)."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import types

import pytest

from gpuobs.vllm_plugin.engine_hook import install_step_hook
from gpuobs.vllm_plugin.op_window import OpWindow, window_steps

HAS_TORCH = importlib.util.find_spec("torch") is not None


class Notes:
    def __init__(self) -> None:
        self.labels: list[str] = []

    def available(self) -> bool:
        return True

    def record_op(self, label: str) -> int:
        self.labels.append(label)
        return 0


def test_each_step_runs_inside_what_around_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_worker_for_window")
    inside: list[bool] = []
    state = {"in": False}

    class Worker:
        def execute_model(self, scheduler_output: object) -> str:
            inside.append(state["in"])
            return "out"

    @contextlib.contextmanager
    def around(worker: object):
        state["in"] = True
        yield
        state["in"] = False

    module.Worker = Worker
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert install_step_hook(lambda w, out: None, module.__name__, around=around)
    assert Worker().execute_model("s") == "out" and inside == [True] and state["in"] is False


def test_window_steps_reads_the_environment(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.delenv("GPUOBS_OPS_STEPS", raising=False)
    assert window_steps() == 0
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        monkeypatch.setenv("GPUOBS_OPS_STEPS", "three")
        assert window_steps() == 0
        monkeypatch.setenv("GPUOBS_OPS_STEPS", "3")
        monkeypatch.delenv("GPUOBS_LAUNCH_TRACE", raising=False)
        assert window_steps() == 3
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not a number" in said and "without GPUOBS_LAUNCH_TRACE=1" in said


@pytest.mark.skipif(HAS_TORCH, reason="the case of a process without torch")
def test_without_torch_the_window_closes_and_the_step_runs(caplog) -> None:
    window = OpWindow(Notes(), 5)
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        with window(types.SimpleNamespace()):
            ran = True
    assert ran and window.left == 0 and "ops are not recorded" in caplog.text


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_the_first_steps_are_recorded_and_no_more() -> None:
    import torch

    notes = Notes()
    window = OpWindow(notes, 1)
    linear = torch.nn.Linear(4, 4)
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(get_model=lambda: linear))
    with torch.inference_mode():
        with window(worker):
            linear(torch.zeros(2, 4))
        recorded = list(notes.labels)
        with window(worker):
            linear(torch.zeros(2, 4))
    assert any(label.startswith("model aten::") for label in recorded), recorded
    assert notes.labels == recorded and window.left == 0


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_a_model_that_is_not_a_module_leaves_the_step_running() -> None:
    import torch

    notes = Notes()
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(get_model=lambda: object()))
    with OpWindow(notes, 1)(worker):
        torch.zeros(2) + 1
    assert any(label.startswith("- aten::") for label in notes.labels), notes.labels
