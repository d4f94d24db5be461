"""Helpers for tests that run real gpuobs-synth processes (imported by tests and conftest)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuobs.segment import STATE_EXITED, Segment

# gpuobs-synth --ops N: op k has label (k - 1) % 3 of these (as synth/device_loop.cpp writes them)
SYNTH_OP_LABELS = [
    "model.layers.0.mlp.down_proj aten::mm bf16[8,6144] bf16[6144,2048]",
    "model.layers.0.self_attn vllm::unified_attention bf16[8,16,128] bf16[8,8,128]",
    "model.layers.1.input_layernorm vllm::rms_norm bf16[8,2048] bf16[2048]",
]


def synth_binary() -> str:
    """gpuobs-synth as installed beside this Python (the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "gpuobs-synth"
    if beside.exists():
        return str(beside)
    found = shutil.which("gpuobs-synth")
    if not found:
        raise RuntimeError("gpuobs-synth is not installed: run scripts/setup.sh")
    return found


class SynthProcess:
    """A running gpuobs-synth and the segment it created."""

    def __init__(self, process: subprocess.Popen, segment: Path) -> None:
        self.process = process
        self.segment = segment

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


def drain_until_exit(segment: Segment, *, timeout: float = 60.0, pause: float = 0.0) -> tuple[int, int]:
    """Reads `segment` until its producer has exited and everything is read."""
    events = launches = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = segment.reader.state() == STATE_EXITED or not segment.reader.producer_alive()
        got_events, got_launches = segment.drain_counts()
        events += got_events
        launches += got_launches
        if exited and got_events == 0 and got_launches == 0:
            return events, launches
        if pause:
            time.sleep(pause)
    raise AssertionError("producer did not finish in time")


def wait_events(segment: Segment, timeout: float = 10.0) -> int:
    """Drains until some events came (a switch is acknowledged before the producer's next launch
    runs in the new mode); the events drained."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = segment.drain_counts()[0]
        if events:
            return events
        time.sleep(0.005)
    raise AssertionError(f"no event in {timeout} s")


def wait_applied(segment: Segment, generation: int, timeout: float = 10.0) -> dict:
    """Polls the segment's control block until the producer acknowledged `generation`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = segment.control_state()
        if state["applied_generation"] >= generation:
            return state
        time.sleep(0.001)
    raise AssertionError(f"generation {generation} not acknowledged: {segment.control_state()}")
