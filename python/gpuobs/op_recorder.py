"""Which layer's op launches each kernel, recorded in the process for a bounded window: each
PyTorch op that reaches the dispatcher (an aten op, or a custom op such as vLLM's attention and
cache writes) is written through the injector as one label, the module it runs in (its path in
the model, e.g. model.layers.7.mlp.down_proj), the op and its inputs' dtypes and shapes, right
before it runs, and an empty label right after; gpuobsd gives the op every eager launch its
thread makes in between (daemon/op_attribution.py; the launch trace must be on, as only then is
there a record per eager launch). Launches between ops (fused kernels a compiled graph launches
itself, without the dispatcher) belong to no op rather than to the op before them.

It costs a Python call and two ring records per op while it is on: a window, never steady state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MAX_LABEL = 4096  # bytes of one label (a few hundred in practice)
SHORT_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}


def describe(args: Any) -> str:
    """The tensors among an op's inputs, in order, as dtype[shape]."""
    return " ".join(
        f"{SHORT_DTYPES.get(leaf.dtype, str(leaf.dtype).removeprefix('torch.'))}"
        f"[{','.join(str(size) for size in leaf.shape)}]"
        for leaf in tree_leaves(args)
        if isinstance(leaf, torch.Tensor)
    )


def op_name(func: Any) -> str:
    """aten::mm, vllm::unified_attention: the op's namespace and name, without its overload."""
    namespace = getattr(func, "namespace", None)
    name = getattr(func, "_opname", None)
    return f"{namespace}::{name}" if namespace and name else str(func)


class ModulePaths:
    """The path of the module that runs now on this thread, from global forward hooks on every
    module (paths of `model`'s modules; other modules by their class name)."""

    def __init__(self, model: Any) -> None:
        modules = model.named_modules() if isinstance(model, torch.nn.Module) else ()
        self.names = {id(module): name or "model" for name, module in modules}
        self.known = frozenset(self.names.values())
        self.local = threading.local()

    @property
    def stack(self) -> list[str]:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    @contextlib.contextmanager
    def hooked(self) -> Iterator[ModulePaths]:
        hooks = torch.nn.modules.module
        pre = hooks.register_module_forward_pre_hook(self._enter)
        post = hooks.register_module_forward_hook(self._leave)
        try:
            yield self
        finally:
            pre.remove()
            post.remove()
            self.stack.clear()

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        self.stack.append(self.names.get(id(module), type(module).__name__))

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self.stack:
            self.stack.pop()

    def current(self) -> str:
        return self.stack[-1] if self.stack else "-"

    def of_op(self, args: Any) -> str:
        """The op's module: one its arguments name (a layer name given as a string, or as an
        object holding one in `value`), else the module running now."""
        for leaf in tree_leaves(args):
            text = leaf if isinstance(leaf, str) else getattr(leaf, "value", None)
            if isinstance(text, str) and text in self.known:
                return text
        return self.current()


class OpRecorder(TorchDispatchMode):
    """Labels each op with `record` before it runs and closes it after (an empty label); under
    graph capture, `capture` gets the capturing stream before the op opens (what was added in
    between is no op's) and after it ran, while it is still open."""

    def __init__(
        self, record: Callable[[str], object], paths: ModulePaths, capture: Callable[[int], object] | None = None
    ) -> None:
        super().__init__()
        self.record = record
        self.capture = capture
        self.paths = paths
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.capture is not None:
            self._captured(self.capture)  # nodes added since the last op (outside the dispatcher) belong to no op
        self._say(lambda: f"{self.paths.of_op((args, kwargs))} {op_name(func)} {describe((args, kwargs))}".rstrip())
        self.ops += 1
        try:
            result = func(*args, **kwargs)  # the only thing here that may raise into the model
            if self.capture is not None:
                self._captured(self.capture)
            return result
        finally:
            self._say(lambda: "")

    def _captured(self, capture: Callable[[int], object]) -> None:
        try:
            if torch.cuda.is_current_stream_capturing():
                capture(torch.cuda.current_stream().cuda_stream)
        except Exception:  # noqa: BLE001 - the graph is captured whatever happened to its labels
            pass

    def _say(self, label: Callable[[], str]) -> None:
        """A label that cannot be built (a tensor without sizes) or recorded is skipped."""
        try:
            self.record(label()[:MAX_LABEL])
        except Exception:  # noqa: BLE001 - the op runs whatever happened to its label
            pass


@contextlib.contextmanager
def recording_ops(
    record: Callable[[str], object],
    model: torch.nn.Module | None = None,
    capture: Callable[[int], object] | None = None,
) -> Iterator[OpRecorder]:
    """Every op of the block labelled, with module paths of `model`, and the graph nodes of ops
    under capture (for a plain PyTorch program: `notes = InjectorAnnotations(path)`, then
    `with recording_ops(notes.record_op, model, notes.record_capture): ...`)."""
    paths = ModulePaths(model)
    with paths.hooked(), OpRecorder(record, paths, capture) as recorder, reported_at_capture_end(recorder):
        yield recorder


class _CaptureEndHook:
    """CUDAGraph.capture_end wrapped once for every recorder that records captures, restored when
    the last of them is done (recorders on several threads may end in any order)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recorders: list[OpRecorder] = []
        self.own: Any = None  # the class's own capture_end before the wrap (None: inherited)

    def add(self, graph_class: Any, recorder: OpRecorder) -> None:
        with self.lock:
            if not self.recorders:
                self.own = graph_class.__dict__.get("capture_end")
                original = graph_class.capture_end

                def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
                    with self.lock:
                        active = list(self.recorders)
                    for each in active:  # the injector keeps per thread what was reported: a repeat adds nothing
                        if each.capture is not None:  # (always: reported_at_capture_end adds no other)
                            each._captured(each.capture)
                    return original(graph, *args, **kwargs)

                graph_class.capture_end = capture_end
            self.recorders.append(recorder)

    def remove(self, graph_class: Any, recorder: OpRecorder) -> None:
        with self.lock:
            self.recorders.remove(recorder)
            if self.recorders:
                return
            if self.own is None:
                delattr(graph_class, "capture_end")
            else:
                graph_class.capture_end = self.own


_CAPTURE_END = _CaptureEndHook()


@contextlib.contextmanager
def reported_at_capture_end(recorder: OpRecorder) -> Iterator[None]:
    """The nodes a capture adds after its last op (kernels a compiled region launches itself at its
    end) reported before the capture ends, as every op's are: without this, an exec would have
    kernel nodes its capture never reported, and its labels could not be placed by position.
    torch.cuda.graph ends a capture with CUDAGraph.capture_end, wrapped while recording."""
    graph_class = getattr(torch.cuda, "CUDAGraph", None)
    if recorder.capture is None or getattr(graph_class, "capture_end", None) is None:
        yield
        return
    _CAPTURE_END.add(graph_class, recorder)
    try:
        yield
    finally:
        _CAPTURE_END.remove(graph_class, recorder)
