"""What the service answers, as typed values: one dataclass per message of gpuobs.v1 that a
reply carries, with the message's field names, so that daemon/messages.py maps every one of
them the same way and the metrics read attributes, not dictionary keys. Pages are a list of
rows and the token of the next page."""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

from gpuobs.segment import StageAccount as StageCounts  # one stage's accounting is the message as it is

Row = TypeVar("Row")


@dataclasses.dataclass
class Page(Generic[Row]):
    rows: list[Row]
    next_page_token: str = ""  # empty after the last page


@dataclasses.dataclass
class InjectorStats:
    modules_loaded: int
    modules_patched: int
    patch_failures: int
    cubins_kept: int
    cubins_skipped: int
    profiler_starts: int
    modules_access_hooked: int
    replay_spans: int  # graph replays whose device span the injector read (counter mode and up)
    replay_spans_unclean: int  # span slots read that could not say one replay's span
    resource_callback_seconds: float
    launch_callback_seconds: float
    graph_callback_seconds: float
    patch_seconds: float
    cubin_seconds: float


@dataclasses.dataclass
class Gpu:
    ordinal: int
    context: int
    pci_bus_id: str
    uuid: str


@dataclasses.dataclass
class Process:
    pid: int
    producer: str
    label: str
    segment: str
    alive: bool
    mode: str
    shift: int
    patch_set: str
    kernel_filter: str
    generation: int
    control_status: str
    control_message: str
    launches: int
    kernels: int
    stages: list[StageCounts]
    ring_fill_ratio: float
    accounting_errors: int
    injector: InjectorStats
    engine_steps: int
    identity_set: bool
    role: str
    rank: int
    world_size: int
    local_rank: int
    model: str
    gpus: list[Gpu]
    gpu_count: int
    memory_kernels: str
    block_events_unanalysed: int


@dataclasses.dataclass
class Status:
    version: str
    segment_dir: str
    uptime_ms: int
    processes: list[Process]
    rejected_segments: list[str]
    rejected_segments_total: int
    rejected_segments_forgotten: int


@dataclasses.dataclass
class LaunchShape:
    grid: list[int]
    block: list[int]
    launches: int


@dataclasses.dataclass
class BlockDurations:
    count: int = 0
    mean_ns: float = 0.0
    min_ns: int = 0
    p50_ns: int = 0
    p99_ns: int = 0
    max_ns: int = 0
    unpaired: int = 0
    unanalysed: int = 0


@dataclasses.dataclass
class Kernel:
    pid: int
    slot: int
    name: str
    mangled: str
    kernel_id: str  # the metrics' kernel_id label (kernel_labels.kernel_id)
    launches: int
    blocks_expected: int
    blocks_observed: int
    blocks_unpatched: int
    blocks_unobserved: int
    memory_accesses: int
    events_delivered: int
    events_dropped: int
    shapes: list[LaunchShape]
    other_shape_launches: int
    block_durations: BlockDurations
    graph_launches: int
    function_pc: int
    cubin: str
    access_hooks: bool
    records: str
    blocks_in_flight: int


@dataclasses.dataclass
class GraphNode:
    node: int
    slot: int
    name: str
    grid: list[int]
    block: list[int]
    executions: int
    blocks_per_execution: int
    grid_ids: list[int]
    position: int
    executions_matched: int
    executions_mismatched: int
    executions_unrecorded: int
    blocks_observed: int
    executions_unjoined: int
    executions_sampled: int


@dataclasses.dataclass
class Replay:
    replay: int
    launch_id: int
    host_time_ns: int
    mode: str
    node_executions: int
    nodes_matched: int
    node_blocks: list[int]
    device_start_ns: int
    device_end_ns: int
    span_ns: int
    gap_ns: int
    joined: bool
    busy_ns: int | None = None  # the time some node execution ran; None unless every one ran whole


@dataclasses.dataclass
class Graph:
    pid: int
    graph_exec: int
    instance: int
    alive: bool
    replays: int
    first_launch_id: int
    last_launch_id: int
    node_executions: int
    replays_nodes_unknown: int
    order_stable: bool
    device_order_stable: bool
    blocks_per_replay: int
    nodes: list[GraphNode]
    executions_matched: int
    executions_mismatched: int
    executions_unrecorded: int
    executions_unjoined: int
    events_unmatched: int
    recent_replays: list[Replay]
    executions_sampled: int


@dataclasses.dataclass
class StepReplay:
    graph_exec: int
    replay: int
    node_executions: int = 0  # the rest stay 0 once the replay is no longer kept in detail
    nodes_matched: int = 0
    blocks_observed: int = 0
    joined: bool = False
    mode: str = ""
    device_start_ns: int = 0  # first block enter of its node executions; 0 without events
    device_end_ns: int = 0
    device_busy_ns: int | None = None  # the time some node execution ran; None unless all ran whole


@dataclasses.dataclass
class Step:
    pid: int
    label: str
    step: int
    host_time_ns: int
    thread: int
    requests: int
    tokens: int
    request_ids: list[str]
    request_ids_complete: bool
    kernel_launches: int
    blocks_expected: int
    replays: list[StepReplay]
    device_span_ns: int = 0  # first start to last end over its replays with events
    host_step_ns: int | None = None  # to the next kept step's start; None for the newest
    busy_ratio: float | None = None  # device_span_ns / host_step_ns; None where either is unknown
    device_busy_ns: int | None = None  # its replays' busy times, summed; None unless each is known
    flops: int | None = None  # the engine's estimate for the step per GPU; None where it gives none
    device_flops_per_s: float | None = None  # flops over the device span: the GPU's achieved rate
    host_flops_per_s: float | None = None  # flops over the host step time: what the engine's own figure divides by


@dataclasses.dataclass
class StepTotals:
    pid: int
    steps: int
    launches_before_steps: int


@dataclasses.dataclass
class RequestTime:
    pid: int
    request: str
    steps: int
    tokens: int
    device_ns: int
    steps_untimed: int
    kernel_launches: int
    blocks: int
    first_step: int
    last_step: int
    kernels: list[RequestKernel] = dataclasses.field(default_factory=list)  # asked for one request
    kernel_steps: int = 0  # of its settled steps, those still kept in detail, which its kernels cover
    cache_stores: int = 0
    cache_steps: int = 0
    cache_slots: int = 0
    cache_slots_complete: bool = True
    cache_slot_ranges: list[SlotRange] = dataclasses.field(default_factory=list)  # asked for one request


@dataclasses.dataclass
class SlotRange:
    first: int
    last: int


@dataclasses.dataclass
class RequestKernel:
    kernel: str
    executions: int
    blocks: int
    kv_cache: bool


@dataclasses.dataclass
class Requests:
    requests: list[RequestTime]
    steps_device_ns: int  # the settled steps' split spans: kept rows + device_ns_let_go add up to it
    next_page_token: str = ""
    requests_let_go: int = 0
    device_ns_let_go: int = 0
    steps_settled: int = 0
    steps_lost: int = 0
    cache_stores: int = 0
    cache_stores_outside: int = 0
    cache_stores_skipped: int = 0
    cache_stores_dropped: int = 0
    cache_stores_attributed: int = 0
    cache_stores_unattributed: int = 0
    cache_owners_forgotten: int = 0
    kv_cache_layouts: int = 0
    cache_stores_before_layout: int = 0
    cache_stores_ambiguous: int = 0
    kv_cache_layouts_refused: int = 0
    step_text_refused: int = 0


@dataclasses.dataclass
class OpKernel:
    pid: int
    op: str
    kernel: str
    launches: int  # eager launches
    blocks: int  # of the launches and of the node executions
    node_executions: int = 0  # executions of graph nodes captured under the op
    graph_nodes: int = 0  # those nodes (in every exec made from the graphs)
    device_ns: int = 0  # of the launches and node executions timed
    timed: int = 0
    partial: int = 0  # with some block events, not all: not timed
    share: float | None = None  # device_ns over the process's; None when none timed


@dataclasses.dataclass
class OpTotals:
    pid: int
    ops: int
    launches_attributed: int
    launches_without_op: int
    labels: int
    launches_other: int
    nodes_captured: int = 0
    nodes_without_op: int = 0
    device_ns: int = 0  # of every launch and node execution timed, in an op or not
    timed: int = 0
    partial: int = 0
    timings_let_go: int = 0


@dataclasses.dataclass
class Ops:
    ops: list[OpKernel]
    totals: list[OpTotals]


@dataclasses.dataclass
class Steps:
    steps: list[Step]
    totals: list[StepTotals]
    next_page_token: str = ""


@dataclasses.dataclass
class BlockIndex:
    x: int
    y: int
    z: int


@dataclasses.dataclass
class HungLaunch:
    pid: int
    kernel: str
    slot: int
    grid_id: int
    graph_exec: int
    replay: int
    blocks: list[BlockIndex]
    sms: list[int]
    oldest_enter_ns: int
    age_ns: int
    kernel_events_dropped: int
    block_count: int


@dataclasses.dataclass
class StalledKernel:
    slot: int
    kernel: str
    blocks_in_flight: int
    no_exit_ns: int  # since a block of it last exited (or since its blocks in flight were first seen)


@dataclasses.dataclass
class HangEvidence:
    pid: int
    exits_hooked: bool
    blocks_in_flight: int
    oldest_age_ns: int
    alive: bool
    exits_counted: bool
    events_unanalysed: int
    stalled: list[StalledKernel]


@dataclasses.dataclass
class HotPc:
    pid: int
    slot: int
    kernel: str
    mangled: str
    pc: int
    events: int
    function_pc: int
    cubin: str


@dataclasses.dataclass
class HotPcs:
    pcs: list[HotPc]
    events_counted: int
    events_skipped: int
    next_page_token: str = ""


@dataclasses.dataclass
class ModeResult:
    pid: int
    acknowledged: bool
    status: str
    message: str
    generation: int


@dataclasses.dataclass
class RecordedFile:
    pid: int
    path: str
    events: int
    launches: int
    dropped: int
    stopped: str = ""  # why it ended before its duration or count ("" when it ran its course)
