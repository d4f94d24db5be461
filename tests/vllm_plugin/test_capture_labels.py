"""The plugin's capture labels without vLLM or a GPU: GraphModelRunner.capture_model runs inside
the op recorder with the capture hook when GPUOBS_OPS_CAPTURE=1, and nothing the recorder does
can stop the capture (without torch, or with a failing injector, the graphs are captured as
they would be)."""

from __future__ import annotations

import importlib.util
import logging
import sys
import types

import pytest
from gpuobs.vllm_plugin.capture_labels import install_capture_labels, wanted

HAS_TORCH = importlib.util.find_spec("torch") is not None


class Notes:
    def __init__(self, available: bool = True) -> None:
        self.labels: list[str] = []
        self.captures: list[int] = []
        self._available = available

    def available(self) -> bool:
        return self._available

    def record_op(self, label: str) -> int:
        self.labels.append(label)
        return 0

    def record_capture(self, stream: int) -> int:
        self.captures.append(stream)
        return 0


def fake_runner(monkeypatch: pytest.MonkeyPatch, name: str, body) -> type:
    module = types.ModuleType(name)

    class GPUModelRunner:
        def get_model(self) -> object:
            return object()

        def capture_model(self) -> int:
            return body()

    module.GPUModelRunner = GPUModelRunner
    monkeypatch.setitem(sys.modules, name, module)
    return GPUModelRunner


def test_wanted_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUOBS_OPS_CAPTURE", raising=False)
    assert not wanted()
    monkeypatch.setenv("GPUOBS_OPS_CAPTURE", "1")
    assert wanted()


def test_installed_once_and_the_capture_runs_whatever_the_recorder_does(
    monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    runs: list[str] = []
    runner = fake_runner(monkeypatch, "fake_runner_capture", lambda: runs.append("captured") or 7)
    notes = Notes(available=False)  # the injector not loaded: no recorder, the capture as it was
    assert install_capture_labels(notes, ("fake_runner_capture",)) == 1
    assert install_capture_labels(notes, ("fake_runner_capture",)) == 0
    assert runner().capture_model() == 7 and runs == ["captured"]
    if not HAS_TORCH:  # the recorder cannot start: said once per capture, and the capture runs
        notes._available = True
        with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
            assert runner().capture_model() == 7
        assert runs == ["captured"] * 2 and "graph nodes are not labelled" in caplog.text


def test_a_failing_capture_still_raises_and_leaves_no_recorder_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails() -> int:
        raise RuntimeError("capture failed")

    runner = fake_runner(monkeypatch, "fake_runner_failing", fails)
    install_capture_labels(Notes(), ("fake_runner_failing",))
    with pytest.raises(RuntimeError, match="capture failed"):
        runner().capture_model()
    if HAS_TORCH:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        assert _get_current_dispatch_mode() is None


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_ops_of_the_capture_are_labelled(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    notes = Notes()

    def capture() -> int:
        torch.ones(3) + 1
        return 0

    runner = fake_runner(monkeypatch, "fake_runner_ops", capture)
    install_capture_labels(notes, ("fake_runner_ops",))
    runner().capture_model()
    assert any("aten::add" in label for label in notes.labels), notes.labels
    assert notes.captures == []  # nothing captured a graph on the CPU


def test_the_runner_this_vllm_has_is_wrapped_and_none_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.25 runs the V2 model runner by default and the V1 runner when asked: each that
    exists is wrapped; a vLLM with neither is said (register() logs it), not ignored."""
    runs: list[str] = []
    v2 = fake_runner(monkeypatch, "fake_runner_v2", lambda: runs.append("v2") or 0)
    assert install_capture_labels(Notes(available=False), ("fake_runner_v2", "fake_runner_absent")) == 1
    v2().capture_model()
    assert runs == ["v2"]
    with pytest.raises(RuntimeError, match="fake_runner_absent"):
        install_capture_labels(Notes(), ("fake_runner_absent",))


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_a_capture_inside_another_is_recorded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    notes = Notes()
    inner = fake_runner(monkeypatch, "fake_runner_inner", lambda: (torch.ones(2) * 3) is None or 0)
    outer = fake_runner(monkeypatch, "fake_runner_outer", lambda: inner().capture_model())
    install_capture_labels(notes, ("fake_runner_outer", "fake_runner_inner"))
    outer().capture_model()
    assert sum("aten::mul" in label for label in notes.labels) == 1, notes.labels
