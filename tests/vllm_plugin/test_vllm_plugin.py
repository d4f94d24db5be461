"""The vLLM plugin without vLLM: its hook on a stand-in for vLLM's worker module, the step
records it makes, and its behaviour when anything is missing (it must never stop the engine)."""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
import types
from pathlib import Path

import gpuobs
import numpy as np
import pytest
from gpuobs import step_text
from gpuobs.daemon.cache_writes import slots_of
from gpuobs.injector_functions import NOT_OBSERVING, InjectorAnnotations
from gpuobs.segment import PROCESS_ROLES
from gpuobs.vllm_plugin.engine_hook import install_step_hook
from gpuobs.vllm_plugin.step_flops import flops_estimator
from gpuobs.vllm_plugin.step_recorder import LAYOUT_EVERY, MAX_ATTEMPTS, SAME_REQUESTS, StepRecorder

INJECTOR = Path(gpuobs.__file__).parent / "lib" / "libgpuobs_injector.so"


class FakeAnnotations:
    def __init__(self, available: bool = True, fail_on_step: int = 0) -> None:
        self.is_available = available
        self.fail_on_step = fail_on_step
        self.steps: list[tuple[int, int, int, bytes | None, int]] = []
        self.flops: list[int] = []  # each recorded step's FLOP estimate (0: none)
        self.labels: list[str] = []
        self.identities: list[tuple[int, int, int, int, str]] = []

    def available(self) -> bool:
        return self.is_available

    def record_step(self, step: int, requests: int, tokens: int, ids: bytes | None, flags: int, flops: int = 0) -> int:
        if step == self.fail_on_step:
            raise RuntimeError("boom")
        self.steps.append((step, requests, tokens, ids, flags))
        self.flops.append(flops)
        return 0

    def set_label(self, label: str) -> int:
        self.labels.append(label)
        return 0

    def set_identity(self, role: int, rank: int, world_size: int, local_rank: int, model: str) -> int:
        self.identities.append((role, rank, world_size, local_rank, model))
        return 0


def scheduled(**tokens: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(num_scheduled_tokens=dict(tokens), total_num_scheduled_tokens=sum(tokens.values()))


def worker(rank: int = 0, model: str = "/models/tiny") -> types.SimpleNamespace:
    return types.SimpleNamespace(rank=rank, model_config=types.SimpleNamespace(served_model_name=None, model=model))


@pytest.fixture
def fake_worker_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("fake_vllm_worker")
    calls: list[object] = []

    class Worker:
        def execute_model(self, scheduler_output: object) -> str:
            calls.append(scheduler_output)
            return "output"

    module.Worker = Worker
    module.calls = calls
    monkeypatch.setitem(sys.modules, "fake_vllm_worker", module)
    return module


def test_steps_carry_each_requests_tokens_only_when_they_change() -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink)
    record(worker(rank=1), scheduled(a=7, b=1))  # prefill of a, decode of b
    record(worker(rank=1), scheduled(a=1, b=1))  # same requests, a's count changed
    record(worker(rank=1), scheduled(a=1, b=1))  # same requests and counts
    record(worker(rank=1), scheduled(b=1))  # a finished
    assert sink.steps == [
        (1, 2, 8, b"a\t7\nb\t1", 0),
        (2, 2, 2, b"a\t1\nb\t1", 0),
        (3, 2, 2, None, SAME_REQUESTS),
        (4, 1, 1, b"b\t1", 0),
    ]
    assert sink.labels == ["vllm engine rank 1 tiny"]  # once, at the first step
    assert sink.identities == [(PROCESS_ROLES["engine"], 1, 1, 0, "tiny")]  # no parallel config: one rank


def test_a_vllm_shaped_scheduler_output_gives_tokens_that_add_up() -> None:
    """vLLM's SchedulerOutput: num_scheduled_tokens a dict request id -> tokens in scheduling order,
    total_num_scheduled_tokens their sum; an id with a tab or newline stays on its line."""

    class SchedulerOutput:
        def __init__(self, tokens: dict[str, int]) -> None:
            self.num_scheduled_tokens = tokens
            self.total_num_scheduled_tokens = sum(tokens.values())

    sink = FakeAnnotations()
    StepRecorder(sink)(worker(), SchedulerOutput({"cmpl-2\tx": 512, "cmpl-1": 1, "cmpl-3\n": 37}))
    ((_, requests, tokens, text, flags),) = sink.steps
    assert text is not None and flags == 0
    parsed = step_text.parse(text.decode())
    ids, counts = parsed.ids, parsed.tokens
    assert (ids, counts) == (["cmpl-2 x", "cmpl-1", "cmpl-3 "], [512, 1, 37])
    assert (requests, tokens) == (3, sum(counts))


def test_the_identity_has_the_workers_rank_world_size_and_local_rank() -> None:
    sink = FakeAnnotations()
    tensor_parallel = worker(rank=3, model="/models/Qwen3-8B/")
    tensor_parallel.local_rank = 1
    tensor_parallel.parallel_config = types.SimpleNamespace(world_size=4)
    StepRecorder(sink)(tensor_parallel, scheduled(a=1))
    assert sink.identities == [(PROCESS_ROLES["engine"], 3, 4, 1, "Qwen3-8B")]


def test_the_hook_wraps_once_and_records_before_the_step(fake_worker_module: types.ModuleType) -> None:
    seen: list[tuple[object, object]] = []
    assert install_step_hook(lambda w, out: seen.append((w, out)), "fake_vllm_worker")
    assert not install_step_hook(lambda w, out: seen.append((w, out)), "fake_vllm_worker")  # idempotent
    instance = fake_worker_module.Worker()
    output = scheduled(x=3)
    assert instance.execute_model(output) == "output"
    assert seen == [(instance, output)] and fake_worker_module.calls == [output]  # one record per step


def test_a_missing_hook_is_an_error_register_logs_once(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    import gpuobs.vllm_plugin as plugin

    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setenv("CUDA_INJECTION64_PATH", str(INJECTOR))
    monkeypatch.setattr(
        plugin, "install_step_hook", lambda recorder, **kwargs: install_step_hook(recorder, "no_such_vllm.worker")
    )
    monkeypatch.setattr(plugin, "install_profiler_notice", lambda annotations: True)  # torch is not here
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        plugin.register()
        plugin.register()  # vLLM may call it again: nothing more happens
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "engine steps are not recorded" in warnings[0] and "no_such_vllm" in warnings[0]


def test_without_the_injector_the_plugin_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuobs.vllm_plugin as plugin

    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    installed: list[object] = []
    monkeypatch.setattr(plugin, "install_step_hook", installed.append)
    plugin.register()
    assert installed == []


def test_a_failing_record_disables_the_recorder_and_the_engine_runs_on(caplog) -> None:
    sink = FakeAnnotations(fail_on_step=2)
    record = StepRecorder(sink)
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        for _ in range(5):
            record(worker(), scheduled(a=1))  # never raises
    assert [s[0] for s in sink.steps] == [1] and not record.enabled
    assert len(caplog.records) == 1 and "RuntimeError: boom" in caplog.records[0].getMessage()


def test_it_waits_for_cuda_to_load_the_injector_then_gives_up(caplog) -> None:
    sink = FakeAnnotations(available=False)
    record = StepRecorder(sink)
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        for _ in range(MAX_ATTEMPTS + 10):
            record(worker(), scheduled(a=1))
    assert sink.steps == [] and not record.enabled and len(caplog.records) == 1
    sink.is_available = True
    record(worker(), scheduled(a=1))
    assert sink.steps == []


def test_the_real_injector_exports_the_annotation_functions() -> None:
    """In a fresh process: not loaded -> unavailable (the plugin never loads a second copy);
    loaded but never initialised by CUDA (no GPU here) -> the calls answer 'not observing', and
    the injector lacks none of them (a hidden one answers the same, silently but for one log line)."""
    script = f"""
import ctypes
from gpuobs.injector_functions import InjectorAnnotations
annotations = InjectorAnnotations({str(INJECTOR)!r})
print(annotations.available())
ctypes.CDLL({str(INJECTOR)!r})
print(annotations.available(), annotations.record_step(1, 2, 3, b"a\\nb", 0), annotations.set_label("x"),
      annotations.note_profiler("torch.profiler"), annotations.set_identity(1, 0, 1, 0, "m"),
      annotations.record_op("model.layers.0 aten::mm"), annotations.take_ops_window(),
      annotations.launch_trace_window(True), list(annotations.missing))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", *[str(NOT_OBSERVING)] * 7, "[]"]  # every one exported


def test_the_plugin_is_an_entry_point_vllm_finds() -> None:
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "gpuobs"]
    assert entry.load() is __import__("gpuobs.vllm_plugin", fromlist=["register"]).register
    assert isinstance(InjectorAnnotations(str(INJECTOR)), InjectorAnnotations)


class StandInModelMetrics:
    """vLLM 0.25's vllm.v1.metrics.perf.ModelMetrics as the plugin uses it: built from the config,
    is_enabled(), and a step's PerfStats (num_flops_per_gpu) from its scheduler output; here
    2 x 1000 FLOPs per token scheduled, split over the tensor-parallel ranks."""

    def __init__(self, config: types.SimpleNamespace) -> None:
        self.ranks = config.parallel_config.tensor_parallel_size

    def is_enabled(self) -> bool:
        return True

    def get_step_perf_stats_per_gpu(self, scheduler_output: types.SimpleNamespace) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            num_flops_per_gpu=2 * 1000 * scheduler_output.total_num_scheduled_tokens // self.ranks
        )


def mfu_worker(enabled: bool) -> types.SimpleNamespace:
    engine = worker()
    engine.vllm_config = types.SimpleNamespace(
        observability_config=types.SimpleNamespace(enable_mfu_metrics=enabled),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=2),
    )
    return engine


@pytest.fixture
def stand_in_perf(monkeypatch: pytest.MonkeyPatch) -> str:
    module = types.ModuleType("stand_in_vllm_perf")
    module.ModelMetrics = StandInModelMetrics
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_steps_carry_vllms_flop_estimate_where_its_mfu_metrics_are_on(stand_in_perf: str) -> None:
    """Every step carries the estimate, the same-requests ones too (their context grows)."""
    sink = FakeAnnotations()
    record = StepRecorder(sink, functools.partial(flops_estimator, module_name=stand_in_perf))
    engine = mfu_worker(enabled=True)
    for output in (scheduled(a=7, b=1), scheduled(a=1, b=1), scheduled(a=1, b=1)):
        record(engine, output)
    assert [flags for *_, flags in sink.steps] == [0, 0, SAME_REQUESTS]
    assert sink.flops == [8 * 1000, 2 * 1000, 2 * 1000]  # 2 x 1000 a token, over 2 ranks


def test_without_mfu_metrics_no_estimate_is_made() -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, functools.partial(flops_estimator, module_name="no_such_vllm.perf"))
    record(mfu_worker(enabled=False), scheduled(a=3))
    record(worker(), scheduled(a=1))  # no vllm_config at all
    assert sink.flops == [0, 0] and len(sink.steps) == 2


def test_a_failing_estimate_stops_estimating_not_recording(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def estimate(scheduler_output: types.SimpleNamespace) -> int:
        calls.append(scheduler_output)
        if len(calls) == 2:
            raise KeyError("a field this vLLM lacks")
        return 5

    sink = FakeAnnotations()
    record = StepRecorder(sink, lambda engine: estimate)
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        for tokens in (1, 2, 3, 4):
            record(worker(), scheduled(a=tokens))
    assert sink.flops == [5, 0, 0, 0] and len(sink.steps) == 4 and len(calls) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "gpuobs: engine steps no longer carry a FLOP estimate (KeyError: 'a field this vLLM lacks')"
    ]


def test_an_estimator_that_cannot_be_made_leaves_the_steps_without_one(caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, functools.partial(flops_estimator, module_name="no_such_vllm.perf"))
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        record(mfu_worker(enabled=True), scheduled(a=3))
    assert sink.flops == [0] and record.enabled
    assert "no FLOP estimate" in caplog.records[0].getMessage()


def test_a_step_with_an_estimate_goes_to_the_injector_that_takes_one_else_without_it() -> None:
    """gpuobs_record_step_flops came after gpuobs_record_step: an older injector records the
    step without the estimate rather than not at all."""
    calls: list[tuple[str, tuple]] = []

    def function(name: str):  # noqa: ANN202 - stands in for a ctypes function
        return lambda *args: calls.append((name, args)) or 0

    newer = InjectorAnnotations("unused")
    newer._functions = {name: function(name) for name in ("gpuobs_record_step", "gpuobs_record_step_flops")}
    assert newer.record_step(7, 1, 3, b"a\t3", 0, flops=6000) == 0
    assert newer.record_step(8, 1, 1, None, SAME_REQUESTS) == 0  # no estimate: the first function
    older = InjectorAnnotations("unused")
    older._functions = {"gpuobs_record_step": function("gpuobs_record_step")}
    assert older.record_step(9, 1, 3, b"a\t3", 0, flops=6000) == 0
    assert calls == [
        ("gpuobs_record_step_flops", (7, 1, 3, b"a\t3", 3, 0, 6000)),
        ("gpuobs_record_step", (8, 1, 1, None, 0, SAME_REQUESTS)),
        ("gpuobs_record_step", (9, 1, 3, b"a\t3", 3, 0)),
    ]


# -- the KV cache's blocks and layout (#33: the cache slots a request wrote) -----------------------

CACHE_ENV = {"GPUOBS_MEMORY_KERNELS": "reshape_and_cache"}


class FakeCache:
    """A layer's cache tensor as vLLM's FlashAttention backend shapes it: (blocks, key/value,
    positions, heads, head size), bf16, contiguous."""

    def __init__(self, base: int, blocks: int = 32, shape_tail: tuple[int, ...] = (2, 16, 2, 64)) -> None:
        self.base = base
        self.shape = (blocks, *shape_tail)
        strides, size = [], 1
        for extent in reversed(self.shape):
            strides.insert(0, size)
            size *= extent
        self._strides = tuple(strides)

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return 2

    def data_ptr(self) -> int:
        return self.base


class FlashBackend:
    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int) -> tuple[int, ...]:
        return (num_blocks, 2, block_size, num_kv_heads, head_size)


def cache_worker(caches: list) -> types.SimpleNamespace:
    serving = worker()
    serving.model_runner = types.SimpleNamespace(
        kv_caches=caches,
        attn_groups=[[types.SimpleNamespace(backend=FlashBackend)]],
        cache_config=types.SimpleNamespace(block_size=16),
    )
    return serving


def blocks_step(tokens: dict[str, int], new: dict[str, list[int]], cached: dict[str, list[int] | None]):
    """A SchedulerOutput with its new requests (each with its block ids) and its running ones
    (each with the blocks appended this step, or None)."""
    output = scheduled(**tokens)
    output.scheduled_new_reqs = [types.SimpleNamespace(req_id=r, block_ids=(ids,)) for r, ids in new.items()]
    output.scheduled_cached_reqs = types.SimpleNamespace(
        req_ids=list(cached), new_block_ids=[(ids,) if ids is not None else None for ids in cached.values()]
    )
    return output


def test_with_the_cache_kernels_stores_hooked_each_step_hands_out_its_blocks_and_the_layout() -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    serving = cache_worker([FakeCache(0x7000_0000), FakeCache(0x7100_0000)])
    record(serving, blocks_step({"a": 5, "b": 2}, {"a": [3, 4], "b": [7]}, {}))
    record(serving, blocks_step({"a": 1, "b": 1}, {}, {"a": None, "b": [8]}))
    record(serving, blocks_step({"a": 1, "b": 1}, {}, {"a": None, "b": None}))
    record(serving, blocks_step({"a": 1, "b": 1}, {}, {"a": [9], "b": None}))
    texts = [step_text.parse(text.decode()) if text else None for _, _, _, text, _ in sink.steps]
    flags = [flags for *_, flags in sink.steps]
    assert flags == [0, 0, SAME_REQUESTS, 0]
    first, second, third, fourth = texts
    assert (first.ids, first.tokens, first.blocks) == (["a", "b"], [5, 2], {"a": [3, 4], "b": [7]})
    assert (second.ids, second.tokens, second.blocks, second.kv_cache) == (["a", "b"], [1, 1], {"b": [8]}, "")
    assert third is None
    assert (fourth.same, fourth.ids, fourth.blocks) == (True, [], {"a": [9]})
    layout = step_text.KvCacheLayout.from_json(first.kv_cache)
    assert (layout.block_size, layout.block_dim, layout.position_dim, layout.bases) == (
        16,
        0,
        2,
        (0x7000_0000, 0x7100_0000),
    )
    # an address the cache kernel stores to (layer 1, block 4, value, position 3, head 1, element 9)
    cache = FakeCache(0x7100_0000)
    offset = sum(i * s for i, s in zip((4, 1, 3, 1, 9), cache.stride(), strict=True))
    address = np.array([0x7100_0000 + 2 * offset], dtype=np.uint64)
    assert slots_of(layout, address).tolist() == [4 * 16 + 3]


def test_the_layout_waits_for_the_cache_and_comes_again_every_thousand_steps() -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    serving = cache_worker([])
    record(serving, blocks_step({"a": 1}, {}, {}))  # the runner has no cache yet
    serving.model_runner.kv_caches = [FakeCache(0x9000_0000)]
    for _ in range(LAYOUT_EVERY + 1):
        record(serving, blocks_step({"a": 1}, {}, {"a": None}))
    sent = [step for step, *_, text, _ in sink.steps if text and b"\x1fkv-cache" in text]
    assert sent == [2, 2 + LAYOUT_EVERY]


def test_without_the_stores_hooked_nothing_of_the_cache_is_sent() -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment={"GPUOBS_MEMORY_KERNELS": " "})
    record(cache_worker([FakeCache(0x7000_0000)]), blocks_step({"a": 5}, {"a": [3]}, {}))
    ((*_, text, _),) = sink.steps
    assert text == b"a\t5"
    memory_set = StepRecorder(FakeAnnotations(), environment={"GPUOBS_PATCH_SET": "memory"})
    assert memory_set.track_cache


def test_a_cache_it_cannot_describe_stops_the_blocks_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A hybrid model's layers differ: no layout, so blocks would name no slot and are not sent."""
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    serving = cache_worker([FakeCache(0x7000_0000), FakeCache(0x7100_0000, shape_tail=(2, 16, 4, 64))])
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        record(serving, blocks_step({"a": 5}, {"a": [3]}, {}))
        record(serving, blocks_step({"a": 1}, {}, {"a": [4]}))
    assert [text for *_, text, _ in sink.steps] == [b"a\t5\t3", b"a\t1"]
    assert sum("cannot be described" in r.getMessage() for r in caplog.records) == 1


def test_a_hybrid_models_state_in_the_cache_list_stops_the_slots_not_the_steps() -> None:
    """vLLM puts a Mamba layer's state (a list of tensors) in model_runner.kv_caches: no layout,
    so no blocks after the first step, and every step still recorded."""
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    serving = cache_worker([FakeCache(0x7000_0000), [FakeCache(0x7100_0000), FakeCache(0x7200_0000)]])
    record(serving, blocks_step({"a": 5}, {"a": [3]}, {}))
    record(serving, blocks_step({"a": 1}, {}, {"a": [4]}))
    assert record.enabled and not record.track_cache
    assert [text for *_, text, _ in sink.steps] == [b"a\t5\t3", b"a\t1"]


def test_every_kv_cache_groups_blocks_are_handed_out() -> None:
    """Sliding-window and full-attention groups (gpt-oss, Gemma 3) draw on one block pool: a
    request's blocks are all its groups' ids."""
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    output = blocks_step({"a": 5}, {}, {})
    output.scheduled_new_reqs = [types.SimpleNamespace(req_id="a", block_ids=([3], [9, 10]))]
    record(cache_worker([FakeCache(0x7000_0000)]), output)
    ((*_, text, _),) = sink.steps
    assert step_text.parse(text.decode()).blocks == {"a": [3, 9, 10]}


def test_a_scheduler_output_without_block_ids_stops_the_slots_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeAnnotations()
    record = StepRecorder(sink, estimator_for=lambda _: None, environment=CACHE_ENV)
    with caplog.at_level(logging.WARNING, logger="gpuobs.vllm_plugin"):
        record(cache_worker([FakeCache(0x7000_0000)]), scheduled(a=5))  # an older vLLM's output
        record(cache_worker([FakeCache(0x7000_0000)]), scheduled(a=1))
    assert record.enabled and [text for *_, text, _ in sink.steps] == [b"a\t5", b"a\t1"]
    assert sum("no KV-cache slots are recorded" in r.getMessage() for r in caplog.records) == 1
