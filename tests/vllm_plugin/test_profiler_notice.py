"""The profiler notice without torch: its hook on a stand-in for torch.autograd.profiler, what it
notes and when, and that nothing it does can stop a profiler from starting."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from gpuobs.profiler_notice import install_here, install_profiler_notice, wants_gpu_activity


class Notes:
    def __init__(self, available: bool = True, fail: bool = False) -> None:
        self.is_available, self.fail, self.noted = available, fail, []

    def available(self) -> bool:
        return self.is_available

    def note_profiler(self, who: str) -> int:
        if self.fail:
            raise OSError("boom")
        self.noted.append(who)
        return 0


@pytest.fixture
def fake_profiler_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("fake_torch_profiler")
    prepared: list[object] = []

    class profile:  # noqa: N801 - torch's name
        def __init__(self, activities: set[str]) -> None:
            self.kineto_activities = activities

        def _prepare_trace(self) -> str:
            prepared.append(self)
            return "prepared"

    module.profile = profile
    module.prepared = prepared
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_a_gpu_profile_is_noted_once_per_profile_and_still_prepared(fake_profiler_module) -> None:
    notes = Notes()
    assert install_profiler_notice(notes, fake_profiler_module.__name__)
    assert not install_profiler_notice(notes, fake_profiler_module.__name__)  # once per process
    gpu = fake_profiler_module.profile({"ProfilerActivity.CPU", "ProfilerActivity.CUDA"})
    assert gpu._prepare_trace() == "prepared"
    assert gpu._prepare_trace() == "prepared"  # a schedule's next cycle: the same profile, not noted again
    assert fake_profiler_module.profile({"ProfilerActivity.CPU"})._prepare_trace() == "prepared"
    assert notes.noted == ["torch.profiler"]  # the CPU-only profile loses nothing: not noted
    fake_profiler_module.profile({"ProfilerActivity.CUDA"})._prepare_trace()
    assert notes.noted == ["torch.profiler"] * 2  # another profile, another start
    assert len(fake_profiler_module.prepared) == 4


@pytest.mark.parametrize("notes", [Notes(available=False), Notes(fail=True)])
def test_nothing_in_the_notice_stops_the_profiler(fake_profiler_module, notes: Notes) -> None:
    install_profiler_notice(notes, fake_profiler_module.__name__)
    assert fake_profiler_module.profile({"ProfilerActivity.CUDA"})._prepare_trace() == "prepared"
    assert notes.noted == []


def test_a_missing_profiler_is_an_error_for_the_caller_to_log() -> None:
    with pytest.raises(ModuleNotFoundError):
        install_profiler_notice(Notes(), "no_such_profiler_module")


def test_older_profile_objects_are_judged_by_their_cuda_switch() -> None:
    assert wants_gpu_activity(types.SimpleNamespace(use_cuda=True))
    assert wants_gpu_activity(types.SimpleNamespace(use_device="cuda"))
    assert not wants_gpu_activity(types.SimpleNamespace(use_cuda=False, use_device=None))


def test_outside_the_injector_install_here_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    assert install_here() is False


def test_the_vllm_plugin_installs_the_notice_in_an_observed_process(fake_profiler_module, tmp_path) -> None:
    """register() in a process with CUDA_INJECTION64_PATH set wraps torch's profiler (here a stand-in
    module put where torch's would be) beside the step hook."""
    script = """
import sys, types
for name in ("torch", "torch.autograd", "torch.autograd.profiler", "vllm", "vllm.v1", "vllm.v1.worker",
             "vllm.v1.worker.gpu_worker"):
    sys.modules[name] = types.ModuleType(name)
class profile:
    def _prepare_trace(self):
        return "prepared"
class Worker:
    def execute_model(self, scheduler_output):
        return None
sys.modules["torch.autograd.profiler"].profile = profile
sys.modules["vllm.v1.worker.gpu_worker"].Worker = Worker
import gpuobs.vllm_plugin as plugin
plugin.register()
print(getattr(profile._prepare_trace, "__gpuobs_wrapped__", False),
      getattr(Worker.execute_model, "__gpuobs_wrapped__", False))
"""
    env = {"CUDA_INJECTION64_PATH": str(tmp_path / "not-loaded.so"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
