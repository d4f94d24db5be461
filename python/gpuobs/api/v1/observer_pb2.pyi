from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StageCounts(_message.Message):
    __slots__ = ("stage", "produced", "delivered", "dropped", "torn", "corrupt", "in_flight", "unpublished")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    TORN_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    UNPUBLISHED_FIELD_NUMBER: _ClassVar[int]
    stage: str
    produced: int
    delivered: int
    dropped: int
    torn: int
    corrupt: int
    in_flight: int
    unpublished: int
    def __init__(self, stage: _Optional[str] = ..., produced: _Optional[int] = ..., delivered: _Optional[int] = ..., dropped: _Optional[int] = ..., torn: _Optional[int] = ..., corrupt: _Optional[int] = ..., in_flight: _Optional[int] = ..., unpublished: _Optional[int] = ...) -> None: ...

class Process(_message.Message):
    __slots__ = ("pid", "producer", "label", "segment", "alive", "mode", "shift", "patch_set", "kernel_filter", "generation", "control_status", "control_message", "launches", "kernels", "stages", "ring_fill_ratio", "accounting_errors", "injector", "engine_steps", "identity_set", "role", "rank", "world_size", "local_rank", "model", "gpus", "gpu_count", "memory_kernels", "block_events_unanalysed")
    PID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    PATCH_SET_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONTROL_STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    RING_FILL_RATIO_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTING_ERRORS_FIELD_NUMBER: _ClassVar[int]
    INJECTOR_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STEPS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_SET_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_KERNELS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_EVENTS_UNANALYSED_FIELD_NUMBER: _ClassVar[int]
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
    stages: _containers.RepeatedCompositeFieldContainer[StageCounts]
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
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    gpu_count: int
    memory_kernels: str
    block_events_unanalysed: int
    def __init__(self, pid: _Optional[int] = ..., producer: _Optional[str] = ..., label: _Optional[str] = ..., segment: _Optional[str] = ..., alive: bool = ..., mode: _Optional[str] = ..., shift: _Optional[int] = ..., patch_set: _Optional[str] = ..., kernel_filter: _Optional[str] = ..., generation: _Optional[int] = ..., control_status: _Optional[str] = ..., control_message: _Optional[str] = ..., launches: _Optional[int] = ..., kernels: _Optional[int] = ..., stages: _Optional[_Iterable[_Union[StageCounts, _Mapping]]] = ..., ring_fill_ratio: _Optional[float] = ..., accounting_errors: _Optional[int] = ..., injector: _Optional[_Union[InjectorStats, _Mapping]] = ..., engine_steps: _Optional[int] = ..., identity_set: bool = ..., role: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., local_rank: _Optional[int] = ..., model: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., gpu_count: _Optional[int] = ..., memory_kernels: _Optional[str] = ..., block_events_unanalysed: _Optional[int] = ...) -> None: ...

class Gpu(_message.Message):
    __slots__ = ("ordinal", "context", "pci_bus_id", "uuid")
    ORDINAL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    ordinal: int
    context: int
    pci_bus_id: str
    uuid: str
    def __init__(self, ordinal: _Optional[int] = ..., context: _Optional[int] = ..., pci_bus_id: _Optional[str] = ..., uuid: _Optional[str] = ...) -> None: ...

class InjectorStats(_message.Message):
    __slots__ = ("modules_loaded", "modules_patched", "patch_failures", "cubins_kept", "cubins_skipped", "resource_callback_seconds", "launch_callback_seconds", "graph_callback_seconds", "patch_seconds", "cubin_seconds", "profiler_starts", "modules_access_hooked", "replay_spans", "replay_spans_unclean")
    MODULES_LOADED_FIELD_NUMBER: _ClassVar[int]
    MODULES_PATCHED_FIELD_NUMBER: _ClassVar[int]
    PATCH_FAILURES_FIELD_NUMBER: _ClassVar[int]
    CUBINS_KEPT_FIELD_NUMBER: _ClassVar[int]
    CUBINS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_CALLBACK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_CALLBACK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_CALLBACK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PATCH_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CUBIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROFILER_STARTS_FIELD_NUMBER: _ClassVar[int]
    MODULES_ACCESS_HOOKED_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SPANS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SPANS_UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    modules_loaded: int
    modules_patched: int
    patch_failures: int
    cubins_kept: int
    cubins_skipped: int
    resource_callback_seconds: float
    launch_callback_seconds: float
    graph_callback_seconds: float
    patch_seconds: float
    cubin_seconds: float
    profiler_starts: int
    modules_access_hooked: int
    replay_spans: int
    replay_spans_unclean: int
    def __init__(self, modules_loaded: _Optional[int] = ..., modules_patched: _Optional[int] = ..., patch_failures: _Optional[int] = ..., cubins_kept: _Optional[int] = ..., cubins_skipped: _Optional[int] = ..., resource_callback_seconds: _Optional[float] = ..., launch_callback_seconds: _Optional[float] = ..., graph_callback_seconds: _Optional[float] = ..., patch_seconds: _Optional[float] = ..., cubin_seconds: _Optional[float] = ..., profiler_starts: _Optional[int] = ..., modules_access_hooked: _Optional[int] = ..., replay_spans: _Optional[int] = ..., replay_spans_unclean: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("version", "segment_dir", "uptime_ms", "processes", "rejected_segments", "rejected_segments_total", "rejected_segments_forgotten")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_DIR_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_SEGMENTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REJECTED_SEGMENTS_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    version: str
    segment_dir: str
    uptime_ms: int
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    rejected_segments: _containers.RepeatedScalarFieldContainer[str]
    rejected_segments_total: int
    rejected_segments_forgotten: int
    def __init__(self, version: _Optional[str] = ..., segment_dir: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ..., rejected_segments: _Optional[_Iterable[str]] = ..., rejected_segments_total: _Optional[int] = ..., rejected_segments_forgotten: _Optional[int] = ...) -> None: ...

class SetModeRequest(_message.Message):
    __slots__ = ("mode", "shift", "pids", "kernel_regex", "timeout_ms", "ranks", "gpus")
    MODE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_REGEX_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    shift: int
    pids: _containers.RepeatedScalarFieldContainer[int]
    kernel_regex: str
    timeout_ms: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    gpus: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[str] = ..., shift: _Optional[int] = ..., pids: _Optional[_Iterable[int]] = ..., kernel_regex: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., gpus: _Optional[_Iterable[str]] = ...) -> None: ...

class OpenOpsWindowRequest(_message.Message):
    __slots__ = ("steps", "pids", "ranks", "gpus", "timeout_ms")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    steps: int
    pids: _containers.RepeatedScalarFieldContainer[int]
    ranks: _containers.RepeatedScalarFieldContainer[int]
    gpus: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, steps: _Optional[int] = ..., pids: _Optional[_Iterable[int]] = ..., ranks: _Optional[_Iterable[int]] = ..., gpus: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ModeResult(_message.Message):
    __slots__ = ("pid", "acknowledged", "status", "message", "generation")
    PID_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    pid: int
    acknowledged: bool
    status: str
    message: str
    generation: int
    def __init__(self, pid: _Optional[int] = ..., acknowledged: bool = ..., status: _Optional[str] = ..., message: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class SetModeResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ModeResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ModeResult, _Mapping]]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    def __init__(self, processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ...) -> None: ...

class ListKernelsRequest(_message.Message):
    __slots__ = ("pids", "top", "page_size", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    top: int
    page_size: int
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., top: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Kernel(_message.Message):
    __slots__ = ("pid", "slot", "name", "mangled", "launches", "blocks_expected", "blocks_observed", "blocks_unpatched", "blocks_unobserved", "memory_accesses", "events_delivered", "events_dropped", "shapes", "other_shape_launches", "block_durations", "graph_launches", "function_pc", "cubin", "access_hooks", "blocks_in_flight", "records", "kernel_id")
    PID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MANGLED_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_OBSERVED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_UNPATCHED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_UNOBSERVED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ACCESSES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    OTHER_SHAPE_LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_DURATIONS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_PC_FIELD_NUMBER: _ClassVar[int]
    CUBIN_FIELD_NUMBER: _ClassVar[int]
    ACCESS_HOOKS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_ID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    slot: int
    name: str
    mangled: str
    launches: int
    blocks_expected: int
    blocks_observed: int
    blocks_unpatched: int
    blocks_unobserved: int
    memory_accesses: int
    events_delivered: int
    events_dropped: int
    shapes: _containers.RepeatedCompositeFieldContainer[LaunchShape]
    other_shape_launches: int
    block_durations: BlockDurations
    graph_launches: int
    function_pc: int
    cubin: str
    access_hooks: bool
    blocks_in_flight: int
    records: str
    kernel_id: str
    def __init__(self, pid: _Optional[int] = ..., slot: _Optional[int] = ..., name: _Optional[str] = ..., mangled: _Optional[str] = ..., launches: _Optional[int] = ..., blocks_expected: _Optional[int] = ..., blocks_observed: _Optional[int] = ..., blocks_unpatched: _Optional[int] = ..., blocks_unobserved: _Optional[int] = ..., memory_accesses: _Optional[int] = ..., events_delivered: _Optional[int] = ..., events_dropped: _Optional[int] = ..., shapes: _Optional[_Iterable[_Union[LaunchShape, _Mapping]]] = ..., other_shape_launches: _Optional[int] = ..., block_durations: _Optional[_Union[BlockDurations, _Mapping]] = ..., graph_launches: _Optional[int] = ..., function_pc: _Optional[int] = ..., cubin: _Optional[str] = ..., access_hooks: bool = ..., blocks_in_flight: _Optional[int] = ..., records: _Optional[str] = ..., kernel_id: _Optional[str] = ...) -> None: ...

class LaunchShape(_message.Message):
    __slots__ = ("grid", "block", "launches")
    GRID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    grid: _containers.RepeatedScalarFieldContainer[int]
    block: _containers.RepeatedScalarFieldContainer[int]
    launches: int
    def __init__(self, grid: _Optional[_Iterable[int]] = ..., block: _Optional[_Iterable[int]] = ..., launches: _Optional[int] = ...) -> None: ...

class BlockDurations(_message.Message):
    __slots__ = ("count", "mean_ns", "min_ns", "p50_ns", "p99_ns", "max_ns", "unpaired", "unanalysed")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MEAN_NS_FIELD_NUMBER: _ClassVar[int]
    MIN_NS_FIELD_NUMBER: _ClassVar[int]
    P50_NS_FIELD_NUMBER: _ClassVar[int]
    P99_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    UNPAIRED_FIELD_NUMBER: _ClassVar[int]
    UNANALYSED_FIELD_NUMBER: _ClassVar[int]
    count: int
    mean_ns: float
    min_ns: int
    p50_ns: int
    p99_ns: int
    max_ns: int
    unpaired: int
    unanalysed: int
    def __init__(self, count: _Optional[int] = ..., mean_ns: _Optional[float] = ..., min_ns: _Optional[int] = ..., p50_ns: _Optional[int] = ..., p99_ns: _Optional[int] = ..., max_ns: _Optional[int] = ..., unpaired: _Optional[int] = ..., unanalysed: _Optional[int] = ...) -> None: ...

class ListKernelsResponse(_message.Message):
    __slots__ = ("kernels", "next_page_token")
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kernels: _containers.RepeatedCompositeFieldContainer[Kernel]
    next_page_token: str
    def __init__(self, kernels: _Optional[_Iterable[_Union[Kernel, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StreamEventsRequest(_message.Message):
    __slots__ = ("pids", "max_events", "queue_batches")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BATCHES_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    max_events: int
    queue_batches: int
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., max_events: _Optional[int] = ..., queue_batches: _Optional[int] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("pid", "records", "count", "dropped_for_client")
    PID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FOR_CLIENT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    records: bytes
    count: int
    dropped_for_client: int
    def __init__(self, pid: _Optional[int] = ..., records: _Optional[bytes] = ..., count: _Optional[int] = ..., dropped_for_client: _Optional[int] = ...) -> None: ...

class RecordRequest(_message.Message):
    __slots__ = ("path", "duration_ms", "max_events", "pids")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    path: str
    duration_ms: int
    max_events: int
    pids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, path: _Optional[str] = ..., duration_ms: _Optional[int] = ..., max_events: _Optional[int] = ..., pids: _Optional[_Iterable[int]] = ...) -> None: ...

class RecordedFile(_message.Message):
    __slots__ = ("pid", "path", "events", "launches", "dropped", "stopped")
    PID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    path: str
    events: int
    launches: int
    dropped: int
    stopped: str
    def __init__(self, pid: _Optional[int] = ..., path: _Optional[str] = ..., events: _Optional[int] = ..., launches: _Optional[int] = ..., dropped: _Optional[int] = ..., stopped: _Optional[str] = ...) -> None: ...

class RecordResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[RecordedFile]
    def __init__(self, files: _Optional[_Iterable[_Union[RecordedFile, _Mapping]]] = ...) -> None: ...

class RecordChunk(_message.Message):
    __slots__ = ("pid", "data", "file")
    PID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    data: bytes
    file: RecordedFile
    def __init__(self, pid: _Optional[int] = ..., data: _Optional[bytes] = ..., file: _Optional[_Union[RecordedFile, _Mapping]] = ...) -> None: ...

class ListGraphsRequest(_message.Message):
    __slots__ = ("pids", "replays", "page_size", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    replays: int
    page_size: int
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., replays: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GraphNode(_message.Message):
    __slots__ = ("node", "slot", "name", "grid", "block", "executions", "blocks_per_execution", "grid_ids", "position", "executions_matched", "executions_mismatched", "executions_unrecorded", "blocks_observed", "executions_unjoined", "executions_sampled")
    NODE_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_PER_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    GRID_IDS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_MATCHED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_MISMATCHED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_UNRECORDED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_OBSERVED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_UNJOINED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    node: int
    slot: int
    name: str
    grid: _containers.RepeatedScalarFieldContainer[int]
    block: _containers.RepeatedScalarFieldContainer[int]
    executions: int
    blocks_per_execution: int
    grid_ids: _containers.RepeatedScalarFieldContainer[int]
    position: int
    executions_matched: int
    executions_mismatched: int
    executions_unrecorded: int
    blocks_observed: int
    executions_unjoined: int
    executions_sampled: int
    def __init__(self, node: _Optional[int] = ..., slot: _Optional[int] = ..., name: _Optional[str] = ..., grid: _Optional[_Iterable[int]] = ..., block: _Optional[_Iterable[int]] = ..., executions: _Optional[int] = ..., blocks_per_execution: _Optional[int] = ..., grid_ids: _Optional[_Iterable[int]] = ..., position: _Optional[int] = ..., executions_matched: _Optional[int] = ..., executions_mismatched: _Optional[int] = ..., executions_unrecorded: _Optional[int] = ..., blocks_observed: _Optional[int] = ..., executions_unjoined: _Optional[int] = ..., executions_sampled: _Optional[int] = ...) -> None: ...

class Replay(_message.Message):
    __slots__ = ("replay", "launch_id", "host_time_ns", "mode", "node_executions", "nodes_matched", "node_blocks", "device_start_ns", "device_end_ns", "span_ns", "gap_ns", "joined", "busy_ns")
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NODE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    NODES_MATCHED_FIELD_NUMBER: _ClassVar[int]
    NODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_START_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_END_NS_FIELD_NUMBER: _ClassVar[int]
    SPAN_NS_FIELD_NUMBER: _ClassVar[int]
    GAP_NS_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    BUSY_NS_FIELD_NUMBER: _ClassVar[int]
    replay: int
    launch_id: int
    host_time_ns: int
    mode: str
    node_executions: int
    nodes_matched: int
    node_blocks: _containers.RepeatedScalarFieldContainer[int]
    device_start_ns: int
    device_end_ns: int
    span_ns: int
    gap_ns: int
    joined: bool
    busy_ns: int
    def __init__(self, replay: _Optional[int] = ..., launch_id: _Optional[int] = ..., host_time_ns: _Optional[int] = ..., mode: _Optional[str] = ..., node_executions: _Optional[int] = ..., nodes_matched: _Optional[int] = ..., node_blocks: _Optional[_Iterable[int]] = ..., device_start_ns: _Optional[int] = ..., device_end_ns: _Optional[int] = ..., span_ns: _Optional[int] = ..., gap_ns: _Optional[int] = ..., joined: bool = ..., busy_ns: _Optional[int] = ...) -> None: ...

class Graph(_message.Message):
    __slots__ = ("pid", "graph_exec", "replays", "first_launch_id", "last_launch_id", "node_executions", "order_stable", "blocks_per_replay", "nodes", "alive", "executions_matched", "executions_mismatched", "executions_unrecorded", "events_unmatched", "device_order_stable", "recent_replays", "executions_unjoined", "replays_nodes_unknown", "instance", "executions_sampled")
    PID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_EXEC_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_FIELD_NUMBER: _ClassVar[int]
    FIRST_LAUNCH_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_LAUNCH_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    ORDER_STABLE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_PER_REPLAY_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_MATCHED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_MISMATCHED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_UNRECORDED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_UNMATCHED_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ORDER_STABLE_FIELD_NUMBER: _ClassVar[int]
    RECENT_REPLAYS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_UNJOINED_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_NODES_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    graph_exec: int
    replays: int
    first_launch_id: int
    last_launch_id: int
    node_executions: int
    order_stable: bool
    blocks_per_replay: int
    nodes: _containers.RepeatedCompositeFieldContainer[GraphNode]
    alive: bool
    executions_matched: int
    executions_mismatched: int
    executions_unrecorded: int
    events_unmatched: int
    device_order_stable: bool
    recent_replays: _containers.RepeatedCompositeFieldContainer[Replay]
    executions_unjoined: int
    replays_nodes_unknown: int
    instance: int
    executions_sampled: int
    def __init__(self, pid: _Optional[int] = ..., graph_exec: _Optional[int] = ..., replays: _Optional[int] = ..., first_launch_id: _Optional[int] = ..., last_launch_id: _Optional[int] = ..., node_executions: _Optional[int] = ..., order_stable: bool = ..., blocks_per_replay: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[GraphNode, _Mapping]]] = ..., alive: bool = ..., executions_matched: _Optional[int] = ..., executions_mismatched: _Optional[int] = ..., executions_unrecorded: _Optional[int] = ..., events_unmatched: _Optional[int] = ..., device_order_stable: bool = ..., recent_replays: _Optional[_Iterable[_Union[Replay, _Mapping]]] = ..., executions_unjoined: _Optional[int] = ..., replays_nodes_unknown: _Optional[int] = ..., instance: _Optional[int] = ..., executions_sampled: _Optional[int] = ...) -> None: ...

class ListGraphsResponse(_message.Message):
    __slots__ = ("graphs", "next_page_token")
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    graphs: _containers.RepeatedCompositeFieldContainer[Graph]
    next_page_token: str
    def __init__(self, graphs: _Optional[_Iterable[_Union[Graph, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListHangsRequest(_message.Message):
    __slots__ = ("pids", "min_age_ms", "page_size", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    MIN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    min_age_ms: int
    page_size: int
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., min_age_ms: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class BlockIndex(_message.Message):
    __slots__ = ("x", "y", "z")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    Z_FIELD_NUMBER: _ClassVar[int]
    x: int
    y: int
    z: int
    def __init__(self, x: _Optional[int] = ..., y: _Optional[int] = ..., z: _Optional[int] = ...) -> None: ...

class HungLaunch(_message.Message):
    __slots__ = ("pid", "kernel", "slot", "grid_id", "graph_exec", "replay", "blocks", "sms", "oldest_enter_ns", "age_ns", "kernel_events_dropped", "block_count")
    PID_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    GRID_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_EXEC_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SMS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_ENTER_NS_FIELD_NUMBER: _ClassVar[int]
    AGE_NS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_EVENTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_COUNT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    kernel: str
    slot: int
    grid_id: int
    graph_exec: int
    replay: int
    blocks: _containers.RepeatedCompositeFieldContainer[BlockIndex]
    sms: _containers.RepeatedScalarFieldContainer[int]
    oldest_enter_ns: int
    age_ns: int
    kernel_events_dropped: int
    block_count: int
    def __init__(self, pid: _Optional[int] = ..., kernel: _Optional[str] = ..., slot: _Optional[int] = ..., grid_id: _Optional[int] = ..., graph_exec: _Optional[int] = ..., replay: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[BlockIndex, _Mapping]]] = ..., sms: _Optional[_Iterable[int]] = ..., oldest_enter_ns: _Optional[int] = ..., age_ns: _Optional[int] = ..., kernel_events_dropped: _Optional[int] = ..., block_count: _Optional[int] = ...) -> None: ...

class HangEvidence(_message.Message):
    __slots__ = ("pid", "exits_hooked", "blocks_in_flight", "oldest_age_ns", "alive", "exits_counted", "events_unanalysed", "stalled")
    PID_FIELD_NUMBER: _ClassVar[int]
    EXITS_HOOKED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    OLDEST_AGE_NS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    EXITS_COUNTED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_UNANALYSED_FIELD_NUMBER: _ClassVar[int]
    STALLED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    exits_hooked: bool
    blocks_in_flight: int
    oldest_age_ns: int
    alive: bool
    exits_counted: bool
    events_unanalysed: int
    stalled: _containers.RepeatedCompositeFieldContainer[StalledKernel]
    def __init__(self, pid: _Optional[int] = ..., exits_hooked: bool = ..., blocks_in_flight: _Optional[int] = ..., oldest_age_ns: _Optional[int] = ..., alive: bool = ..., exits_counted: bool = ..., events_unanalysed: _Optional[int] = ..., stalled: _Optional[_Iterable[_Union[StalledKernel, _Mapping]]] = ...) -> None: ...

class StalledKernel(_message.Message):
    __slots__ = ("slot", "kernel", "blocks_in_flight", "no_exit_ns")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NO_EXIT_NS_FIELD_NUMBER: _ClassVar[int]
    slot: int
    kernel: str
    blocks_in_flight: int
    no_exit_ns: int
    def __init__(self, slot: _Optional[int] = ..., kernel: _Optional[str] = ..., blocks_in_flight: _Optional[int] = ..., no_exit_ns: _Optional[int] = ...) -> None: ...

class ListHangsResponse(_message.Message):
    __slots__ = ("launches", "processes", "next_page_token")
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    launches: _containers.RepeatedCompositeFieldContainer[HungLaunch]
    processes: _containers.RepeatedCompositeFieldContainer[HangEvidence]
    next_page_token: str
    def __init__(self, launches: _Optional[_Iterable[_Union[HungLaunch, _Mapping]]] = ..., processes: _Optional[_Iterable[_Union[HangEvidence, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListHotPcsRequest(_message.Message):
    __slots__ = ("pids", "top", "page_size", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    top: int
    page_size: int
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., top: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class HotPc(_message.Message):
    __slots__ = ("pid", "slot", "kernel", "mangled", "pc", "events", "function_pc", "cubin")
    PID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    MANGLED_FIELD_NUMBER: _ClassVar[int]
    PC_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_PC_FIELD_NUMBER: _ClassVar[int]
    CUBIN_FIELD_NUMBER: _ClassVar[int]
    pid: int
    slot: int
    kernel: str
    mangled: str
    pc: int
    events: int
    function_pc: int
    cubin: str
    def __init__(self, pid: _Optional[int] = ..., slot: _Optional[int] = ..., kernel: _Optional[str] = ..., mangled: _Optional[str] = ..., pc: _Optional[int] = ..., events: _Optional[int] = ..., function_pc: _Optional[int] = ..., cubin: _Optional[str] = ...) -> None: ...

class ListHotPcsResponse(_message.Message):
    __slots__ = ("pcs", "events_counted", "events_skipped", "next_page_token")
    PCS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_COUNTED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pcs: _containers.RepeatedCompositeFieldContainer[HotPc]
    events_counted: int
    events_skipped: int
    next_page_token: str
    def __init__(self, pcs: _Optional[_Iterable[_Union[HotPc, _Mapping]]] = ..., events_counted: _Optional[int] = ..., events_skipped: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListStepsRequest(_message.Message):
    __slots__ = ("pids", "last", "replay", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    last: int
    replay: int
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., last: _Optional[int] = ..., replay: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class StepReplay(_message.Message):
    __slots__ = ("graph_exec", "replay", "node_executions", "nodes_matched", "blocks_observed", "joined", "mode", "device_start_ns", "device_end_ns", "device_busy_ns")
    GRAPH_EXEC_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    NODE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    NODES_MATCHED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_OBSERVED_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_START_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_END_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BUSY_NS_FIELD_NUMBER: _ClassVar[int]
    graph_exec: int
    replay: int
    node_executions: int
    nodes_matched: int
    blocks_observed: int
    joined: bool
    mode: str
    device_start_ns: int
    device_end_ns: int
    device_busy_ns: int
    def __init__(self, graph_exec: _Optional[int] = ..., replay: _Optional[int] = ..., node_executions: _Optional[int] = ..., nodes_matched: _Optional[int] = ..., blocks_observed: _Optional[int] = ..., joined: bool = ..., mode: _Optional[str] = ..., device_start_ns: _Optional[int] = ..., device_end_ns: _Optional[int] = ..., device_busy_ns: _Optional[int] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("pid", "label", "step", "host_time_ns", "thread", "requests", "tokens", "request_ids", "request_ids_complete", "kernel_launches", "blocks_expected", "replays", "device_span_ns", "host_step_ns", "busy_ratio", "device_busy_ns", "flops", "device_flops_per_s", "host_flops_per_s")
    PID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    HOST_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SPAN_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_STEP_NS_FIELD_NUMBER: _ClassVar[int]
    BUSY_RATIO_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BUSY_NS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FLOPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    HOST_FLOPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    pid: int
    label: str
    step: int
    host_time_ns: int
    thread: int
    requests: int
    tokens: int
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    request_ids_complete: bool
    kernel_launches: int
    blocks_expected: int
    replays: _containers.RepeatedCompositeFieldContainer[StepReplay]
    device_span_ns: int
    host_step_ns: int
    busy_ratio: float
    device_busy_ns: int
    flops: int
    device_flops_per_s: float
    host_flops_per_s: float
    def __init__(self, pid: _Optional[int] = ..., label: _Optional[str] = ..., step: _Optional[int] = ..., host_time_ns: _Optional[int] = ..., thread: _Optional[int] = ..., requests: _Optional[int] = ..., tokens: _Optional[int] = ..., request_ids: _Optional[_Iterable[str]] = ..., request_ids_complete: bool = ..., kernel_launches: _Optional[int] = ..., blocks_expected: _Optional[int] = ..., replays: _Optional[_Iterable[_Union[StepReplay, _Mapping]]] = ..., device_span_ns: _Optional[int] = ..., host_step_ns: _Optional[int] = ..., busy_ratio: _Optional[float] = ..., device_busy_ns: _Optional[int] = ..., flops: _Optional[int] = ..., device_flops_per_s: _Optional[float] = ..., host_flops_per_s: _Optional[float] = ...) -> None: ...

class StepTotals(_message.Message):
    __slots__ = ("pid", "steps", "launches_before_steps")
    PID_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_BEFORE_STEPS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    steps: int
    launches_before_steps: int
    def __init__(self, pid: _Optional[int] = ..., steps: _Optional[int] = ..., launches_before_steps: _Optional[int] = ...) -> None: ...

class ListStepsResponse(_message.Message):
    __slots__ = ("steps", "totals", "next_page_token")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    totals: _containers.RepeatedCompositeFieldContainer[StepTotals]
    next_page_token: str
    def __init__(self, steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., totals: _Optional[_Iterable[_Union[StepTotals, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRequestsRequest(_message.Message):
    __slots__ = ("pids", "top", "request", "every", "page_token")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    top: int
    request: str
    every: bool
    page_token: str
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., top: _Optional[int] = ..., request: _Optional[str] = ..., every: bool = ..., page_token: _Optional[str] = ...) -> None: ...

class RequestKernel(_message.Message):
    __slots__ = ("kernel", "executions", "blocks", "kv_cache")
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_FIELD_NUMBER: _ClassVar[int]
    kernel: str
    executions: int
    blocks: int
    kv_cache: bool
    def __init__(self, kernel: _Optional[str] = ..., executions: _Optional[int] = ..., blocks: _Optional[int] = ..., kv_cache: bool = ...) -> None: ...

class RequestTime(_message.Message):
    __slots__ = ("pid", "request", "steps", "tokens", "device_ns", "steps_untimed", "kernel_launches", "blocks", "first_step", "last_step", "kernels", "kernel_steps", "cache_stores", "cache_steps", "cache_slots", "cache_slots_complete", "cache_slot_ranges")
    PID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NS_FIELD_NUMBER: _ClassVar[int]
    STEPS_UNTIMED_FIELD_NUMBER: _ClassVar[int]
    KERNEL_LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_STEPS_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_FIELD_NUMBER: _ClassVar[int]
    CACHE_STEPS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SLOTS_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    CACHE_SLOT_RANGES_FIELD_NUMBER: _ClassVar[int]
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
    kernels: _containers.RepeatedCompositeFieldContainer[RequestKernel]
    kernel_steps: int
    cache_stores: int
    cache_steps: int
    cache_slots: int
    cache_slots_complete: bool
    cache_slot_ranges: _containers.RepeatedCompositeFieldContainer[SlotRange]
    def __init__(self, pid: _Optional[int] = ..., request: _Optional[str] = ..., steps: _Optional[int] = ..., tokens: _Optional[int] = ..., device_ns: _Optional[int] = ..., steps_untimed: _Optional[int] = ..., kernel_launches: _Optional[int] = ..., blocks: _Optional[int] = ..., first_step: _Optional[int] = ..., last_step: _Optional[int] = ..., kernels: _Optional[_Iterable[_Union[RequestKernel, _Mapping]]] = ..., kernel_steps: _Optional[int] = ..., cache_stores: _Optional[int] = ..., cache_steps: _Optional[int] = ..., cache_slots: _Optional[int] = ..., cache_slots_complete: bool = ..., cache_slot_ranges: _Optional[_Iterable[_Union[SlotRange, _Mapping]]] = ...) -> None: ...

class SlotRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class ListRequestsResponse(_message.Message):
    __slots__ = ("requests", "steps_device_ns", "next_page_token", "requests_let_go", "device_ns_let_go", "steps_settled", "steps_lost", "cache_stores", "cache_stores_outside", "cache_stores_skipped", "cache_stores_dropped", "cache_stores_attributed", "cache_stores_unattributed", "cache_owners_forgotten", "kv_cache_layouts", "cache_stores_before_layout", "cache_stores_ambiguous", "kv_cache_layouts_refused", "step_text_refused")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STEPS_DEVICE_NS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_LET_GO_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NS_LET_GO_FIELD_NUMBER: _ClassVar[int]
    STEPS_SETTLED_FIELD_NUMBER: _ClassVar[int]
    STEPS_LOST_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_OUTSIDE_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_ATTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_UNATTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    CACHE_OWNERS_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_LAYOUTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_BEFORE_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CACHE_STORES_AMBIGUOUS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_LAYOUTS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    STEP_TEXT_REFUSED_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[RequestTime]
    steps_device_ns: int
    next_page_token: str
    requests_let_go: int
    device_ns_let_go: int
    steps_settled: int
    steps_lost: int
    cache_stores: int
    cache_stores_outside: int
    cache_stores_skipped: int
    cache_stores_dropped: int
    cache_stores_attributed: int
    cache_stores_unattributed: int
    cache_owners_forgotten: int
    kv_cache_layouts: int
    cache_stores_before_layout: int
    cache_stores_ambiguous: int
    kv_cache_layouts_refused: int
    step_text_refused: int
    def __init__(self, requests: _Optional[_Iterable[_Union[RequestTime, _Mapping]]] = ..., steps_device_ns: _Optional[int] = ..., next_page_token: _Optional[str] = ..., requests_let_go: _Optional[int] = ..., device_ns_let_go: _Optional[int] = ..., steps_settled: _Optional[int] = ..., steps_lost: _Optional[int] = ..., cache_stores: _Optional[int] = ..., cache_stores_outside: _Optional[int] = ..., cache_stores_skipped: _Optional[int] = ..., cache_stores_dropped: _Optional[int] = ..., cache_stores_attributed: _Optional[int] = ..., cache_stores_unattributed: _Optional[int] = ..., cache_owners_forgotten: _Optional[int] = ..., kv_cache_layouts: _Optional[int] = ..., cache_stores_before_layout: _Optional[int] = ..., cache_stores_ambiguous: _Optional[int] = ..., kv_cache_layouts_refused: _Optional[int] = ..., step_text_refused: _Optional[int] = ...) -> None: ...

class ListOpsRequest(_message.Message):
    __slots__ = ("pids", "top")
    PIDS_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[int]
    top: int
    def __init__(self, pids: _Optional[_Iterable[int]] = ..., top: _Optional[int] = ...) -> None: ...

class OpKernel(_message.Message):
    __slots__ = ("pid", "op", "kernel", "launches", "blocks", "node_executions", "graph_nodes", "device_ns", "timed", "partial", "share")
    PID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NODE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_NODES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NS_FIELD_NUMBER: _ClassVar[int]
    TIMED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    op: str
    kernel: str
    launches: int
    blocks: int
    node_executions: int
    graph_nodes: int
    device_ns: int
    timed: int
    partial: int
    share: float
    def __init__(self, pid: _Optional[int] = ..., op: _Optional[str] = ..., kernel: _Optional[str] = ..., launches: _Optional[int] = ..., blocks: _Optional[int] = ..., node_executions: _Optional[int] = ..., graph_nodes: _Optional[int] = ..., device_ns: _Optional[int] = ..., timed: _Optional[int] = ..., partial: _Optional[int] = ..., share: _Optional[float] = ...) -> None: ...

class OpTotals(_message.Message):
    __slots__ = ("pid", "ops", "launches_attributed", "launches_without_op", "labels", "launches_other", "nodes_captured", "nodes_without_op", "device_ns", "timed", "partial", "timings_let_go")
    PID_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_ATTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_WITHOUT_OP_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_OTHER_FIELD_NUMBER: _ClassVar[int]
    NODES_CAPTURED_FIELD_NUMBER: _ClassVar[int]
    NODES_WITHOUT_OP_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NS_FIELD_NUMBER: _ClassVar[int]
    TIMED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_LET_GO_FIELD_NUMBER: _ClassVar[int]
    pid: int
    ops: int
    launches_attributed: int
    launches_without_op: int
    labels: int
    launches_other: int
    nodes_captured: int
    nodes_without_op: int
    device_ns: int
    timed: int
    partial: int
    timings_let_go: int
    def __init__(self, pid: _Optional[int] = ..., ops: _Optional[int] = ..., launches_attributed: _Optional[int] = ..., launches_without_op: _Optional[int] = ..., labels: _Optional[int] = ..., launches_other: _Optional[int] = ..., nodes_captured: _Optional[int] = ..., nodes_without_op: _Optional[int] = ..., device_ns: _Optional[int] = ..., timed: _Optional[int] = ..., partial: _Optional[int] = ..., timings_let_go: _Optional[int] = ...) -> None: ...

class ListOpsResponse(_message.Message):
    __slots__ = ("ops", "totals")
    OPS_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[OpKernel]
    totals: _containers.RepeatedCompositeFieldContainer[OpTotals]
    def __init__(self, ops: _Optional[_Iterable[_Union[OpKernel, _Mapping]]] = ..., totals: _Optional[_Iterable[_Union[OpTotals, _Mapping]]] = ...) -> None: ...
