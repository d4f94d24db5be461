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
    """The injector's side: `asked` is a window gpuobsd asked for, handed over once."""

    def __init__(self, asked: int = 0) -> None:
        self.labels: list[str] = []
        self.asked = asked
        self.trace: list[bool] = []  # the launch trace switched on and off, in order

    def available(self) -> bool:
        return True

    def record_op(self, label: str) -> int:
        self.labels.append(label)
        return 0

    def take_ops_window(self) -> int:
        steps, self.asked = self.asked, 0
        return steps

    def launch_trace_window(self, on: bool) -> int:
        self.trace.append(on)
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
    assert notes.trace == []  # a window of GPUOBS_OPS_STEPS: the process runs with its own launch trace


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_a_window_gpuobsd_asks_for_records_its_steps_with_the_launch_trace_on_for_them_only() -> None:
    import torch

    notes = Notes()
    window = OpWindow(notes)
    linear = torch.nn.Linear(4, 4)
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(get_model=lambda: linear))
    per_step: list[int] = []
    with torch.inference_mode():
        for step in range(6):
            if step == 1:
                notes.asked = 2  # gpuobsctl ops --record-steps 2, landing between steps 0 and 1
            before = len(notes.labels)
            with window(worker):
                linear(torch.zeros(2, 4))
                per_step.append(len(notes.trace))
            per_step[-1] = (len(notes.labels) - before, per_step[-1])
    recorded = [ops for ops, _ in per_step]
    assert recorded[0] == 0 and recorded[1] > 0 and recorded[2] == recorded[1] and recorded[3:] == [0, 0, 0]
    # on before each step of the window ran (the first turns it on, the next keeps it alive), off
    # once its last step was over, never again
    assert [switches for _, switches in per_step] == [0, 1, 2, 3, 3, 3] and notes.trace == [True, True, False]


def test_a_window_whose_recorder_cannot_start_turns_the_trace_off_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuobs.vllm_plugin.op_window as op_window

    def broken(worker: object) -> object:
        raise RuntimeError("no model")

    monkeypatch.setattr(op_window, "model_of", broken)
    notes = Notes(asked=3)
    window = OpWindow(notes)
    with window(types.SimpleNamespace()):
        ran = True
    assert ran and window.left == 0 and notes.trace == [True, False]
    with window(types.SimpleNamespace()):  # no window left, none asked: nothing switched
        pass
    assert notes.trace == [True, False]


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_a_model_that_is_not_a_module_leaves_the_step_running() -> None:
    import torch

    notes = Notes()
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(get_model=lambda: object()))
    with OpWindow(notes, 1)(worker):
        torch.zeros(2) + 1
    assert any(label.startswith("- aten::") for label in notes.labels), notes.labels


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_a_window_step_samples_inside_the_window_and_the_trace_goes_off_at_the_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.25 samples (lm_head, sampler) in sample_tokens, after execute_model: a window's
    step records both, and the trace stays on until the step after the window begins."""
    import torch

    module = types.ModuleType("fake_worker_sampling")
    linear = torch.nn.Linear(4, 4)

    class Worker:
        model_runner = types.SimpleNamespace(get_model=lambda: linear)

        def execute_model(self, scheduler_output: object) -> None:
            linear(torch.zeros(2, 4))

        def sample_tokens(self, grammar_output: object) -> str:
            torch.ones(3).argmax()
            return "sampled"

    module.Worker = Worker
    monkeypatch.setitem(sys.modules, module.__name__, module)
    notes = Notes(asked=1)
    assert install_step_hook(lambda w, out: None, module.__name__, around=OpWindow(notes))
    worker, seen = Worker(), []
    with torch.inference_mode():
        for _ in range(2):
            worker.execute_model("s")
            assert worker.sample_tokens(None) == "sampled"
            seen.append((list(notes.labels), list(notes.trace)))
            notes.labels.clear()
    (first_labels, first_trace), (second_labels, second_trace) = seen
    assert any("aten::argmax" in label for label in first_labels), first_labels  # sampled inside the window
    assert any("aten::" in label and "argmax" not in label for label in first_labels)
    assert first_trace == [True] and second_labels == [] and second_trace == [True, False]
