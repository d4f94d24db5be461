"""Control requests (SetMode, OpenOpsWindow): written into each selected process's control block,
then waited for until the process acknowledges them or the timeout passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gpuobs import _native
from gpuobs.segment import MODE_NAMES, MODES, TAKES_OP_WINDOWS

from . import results
from .errors import InvalidArgument, quoted
from .registry import ObservedProcess
from .service_processes import STATUS_NAMES
from .service_targets import Targets


class Control:
    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    async def set_mode(
        self,
        mode: str,
        shift: int | None,
        pids: list[int],
        kernel_regex: str | None,
        timeout_s: float,
        *,
        ranks: list[int] | None = None,
        gpus: list[str] | None = None,
    ) -> list[results.ModeResult]:
        """A mode in each selected process; the shift and kernel filter in force are kept where
        none is given."""
        if mode not in MODES:
            raise InvalidArgument(f"unknown mode {quoted(mode)}; modes are {', '.join(MODES)}")
        if shift is not None and not 0 <= shift <= _native.MAX_SHIFT:
            raise InvalidArgument(f"shift {shift} out of range 0..{_native.MAX_SHIFT}")
        if kernel_regex is not None:
            problem = _native.control_request_problem(MODES[mode], shift or 0, 0, kernel_regex)
            if problem:
                raise InvalidArgument(problem)

        def request(process: ObservedProcess) -> int:
            control = process.segment.control_state()
            filter_text = kernel_regex if kernel_regex is not None else control["applied_filter"]
            shift_value = shift if shift is not None else control["applied_shift"]
            return process.segment.request_control(mode, shift_value, filter_text)

        return await self._acknowledged(pids, ranks, gpus, request, timeout_s)

    async def open_ops_window(
        self,
        steps: int,
        pids: list[int],
        timeout_s: float,
        *,
        ranks: list[int] | None = None,
        gpus: list[str] | None = None,
    ) -> list[results.ModeResult]:
        """An op window of `steps` engine steps in each selected process, the config in force kept."""
        if not 1 <= steps <= _native.MAX_OPS_STEPS:
            raise InvalidArgument(f"an op window is 1..{_native.MAX_OPS_STEPS} engine steps, not {steps}")

        def request(process: ObservedProcess) -> int | str:
            """The config in force again, with the window; a refusal (nothing written) where
            that config is not known: a request still pending would be undone by it."""
            control = process.segment.control_state()
            if control["desired_generation"] > control["applied_generation"]:
                return "a control request is still pending in this process; open the window once it is applied"
            mode = MODE_NAMES.get(control["applied_mode"])
            if mode is None:
                return f"this process runs mode {control['applied_mode']}, unknown to this gpuobsd"
            if not process.segment.reader.header().get("identity_flags", 0) & TAKES_OP_WINDOWS:
                return (
                    "no framework plugin takes op windows in this process (the vLLM plugin does, from its "
                    "first engine step)"
                )
            return process.segment.request_control(
                mode, control["applied_shift"], control["applied_filter"], ops_steps=steps
            )

        return await self._acknowledged(pids, ranks, gpus, request, timeout_s)

    async def _acknowledged(
        self,
        pids: list[int],
        ranks: list[int] | None,
        gpus: list[str] | None,
        request: Callable[[ObservedProcess], int | str],
        timeout_s: float,
    ) -> list[results.ModeResult]:
        """Writes the control request of each selected process (under its lock) and waits,
        without blocking the loop, until each acknowledged its generation or the timeout passed.
        `request` answers the generation written, or why it wrote nothing (that process's
        answer). A bad timeout or selection is refused before anything is written."""
        if not 0 < timeout_s <= 60:
            raise InvalidArgument("timeout must be within (0, 60] seconds")
        targets = self.targets.selected(pids, ranks or [], gpus or [])  # NotFound before anything is written
        generations: dict[int, tuple[ObservedProcess, int]] = {}
        refused: list[results.ModeResult] = []
        for process in targets:
            with process.lock:
                written = request(process)
            if isinstance(written, str):
                refused.append(
                    results.ModeResult(
                        pid=process.pid, acknowledged=False, status="failed_precondition", message=written, generation=0
                    )
                )
            else:
                generations[process.pid] = (process, written)
        deadline = time.monotonic() + timeout_s
        pending = dict(generations)
        while pending and time.monotonic() < deadline:
            for pid, (process, generation) in list(pending.items()):
                if process.segment.control_state()["applied_generation"] >= generation:
                    del pending[pid]
            if pending:
                await asyncio.sleep(0.0005)
        answers = []
        for pid, (process, generation) in generations.items():
            control = process.segment.control_state()
            acknowledged = control["applied_generation"] >= generation
            answers.append(
                results.ModeResult(
                    pid=pid,
                    acknowledged=acknowledged,
                    status=STATUS_NAMES.get(control["status"], "unknown") if acknowledged else "timeout",
                    message=control["status_message"] if acknowledged else "no acknowledgement before the timeout",
                    generation=generation,
                )
            )
        return answers + refused
