"""The registry and the service in this process, on a segment written here with the injector's
writer code: a drain pass at a time, every record placed by the test, no subprocess."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.daemon import messages, results
from gpuobs_testing.records import NODES, block_events, graph_launches
from gpuobs_testing.written import WrittenProcess


def test_the_drain_feeds_every_analysis_and_the_service_reads_them(written: WrittenProcess) -> None:
    """Two replays of a two-node graph, recorded node by node, with every block's events: the
    kernels count them as graph launches, the graph is matched node by node, block durations
    pair, and status shows the process with its accounting."""
    writer = written.writer
    for slot, (_, blocks) in enumerate(NODES.values()):
        for _ in range(2):
            writer.count_launch(slot, [blocks, 1, 1], [128, 1, 1])
    written.put_launches(graph_launches(range(1, 3)))
    for replay in (1, 2):
        for slot, (grid_id, blocks) in enumerate(NODES.values()):
            t0 = replay * 10_000 + slot * 1000
            written.put_events(
                np.concatenate(
                    [
                        block_events(grid_id, replay, blocks, slot=slot, t0=t0),
                        block_events(grid_id, replay, blocks, slot=slot, t0=t0 + 500, kind="block_exit"),
                    ]
                )
            )
    written.drain()
    kernels = {k.slot: k for k in written.service.kernels([], 0).rows}
    for slot, (_, blocks) in enumerate(NODES.values()):
        kernel = kernels[slot]
        assert (kernel.launches, kernel.graph_launches, kernel.blocks_expected) == (2, 2, 2 * blocks)
        assert (kernel.block_durations.count, kernel.block_durations.unpaired) == (2 * blocks, 0)
        assert kernel.block_durations.min_ns == kernel.block_durations.max_ns == 500
    (graph,) = written.service.graphs([]).rows
    assert (graph.replays, graph.node_executions, graph.executions_matched, graph.events_unmatched) == (2, 4, 4, 0)
    assert [r.node_blocks for r in graph.recent_replays] == [[4, 3], [4, 3]]
    (process,) = written.service.status().processes
    device = next(stage for stage in process.stages if stage.stage == "device")
    assert process.alive and device.delivered == 2 * 2 * (4 + 3)
    assert process.mode == "counter" and process.engine_steps == 0


def test_a_process_that_exits_is_drained_retained_and_then_forgotten(tmp_path: Path) -> None:
    """The producer marks its segment exited: the next passes read what is left, the process is
    shown as gone with its final counts, and once its retention is over its segment is deleted
    and it is no longer listed."""
    now = [0.0]
    directory = tmp_path / "segments"
    directory.mkdir()
    written = WrittenProcess(directory)
    written.registry.clock = lambda: now[0]
    written.registry.exited_retention_s = 60.0
    written.put_events(block_events(5, 0, 10, slot=1, t0=1000))
    written.writer.publish(quiescent=True)
    written.writer.mark_exited()
    written.drain()
    (process,) = written.service.processes()
    assert not process.alive and next(s for s in process.stages if s.stage == "device").delivered == 10
    now[0] = 61.0
    written.registry.discover()
    assert written.service.processes() == [] and not Path(written.writer.path).exists()
    written.close()


def test_every_result_has_exactly_its_messages_fields() -> None:
    """A field added to the proto and not to its result (or the other way round) would go
    missing from replies or fail them: each result class names its message's fields."""
    replies = {
        "Status": "GetStatusResponse",
        "Steps": "ListStepsResponse",
        "HotPcs": "ListHotPcsResponse",
        "Ops": "ListOpsResponse",
        "Requests": "ListRequestsResponse",
    }
    checked = 0
    for name, cls in vars(results).items():
        if not dataclasses.is_dataclass(cls) or cls is results.Page:
            continue
        message = getattr(pb, replies.get(name, name))
        assert sorted(f.name for f in dataclasses.fields(cls)) == sorted(f.name for f in message.DESCRIPTOR.fields), (
            name
        )
        checked += 1
    assert checked >= 20
    page = results.Page([results.HotPc(1, 2, "k", "_Zk", 0x10, 5, 0, "")], "p1.1.0.1")
    assert messages.hot_pcs_response(results.HotPcs(page.rows, 5, 0, page.next_page_token)).pcs[0].pc == 0x10
