"""CUDA graph execs (ListGraphs): each exec's nodes in launch order and its recent replays, as the
graph join joined them to the device's events."""

from __future__ import annotations

import time

from gpuobs.segment import MODE_NAMES

from . import results
from .errors import InvalidArgument
from .graph_exec import GraphExec
from .paging import GRAPH_TOKEN, walk_pages
from .registry import ObservedProcess, Registry, kernel_names
from .service_targets import Targets

DEFAULT_GRAPH_PAGE = 32  # a 313-node graph with 16 replays in detail is ~30 kB of reply
MAX_GRAPH_PAGE = 512
GRAPH_PAGE_BYTES = 16 << 20  # and about this much of reply at most


class GraphQueries:
    def __init__(self, registry: Registry, targets: Targets) -> None:
        self.registry = registry
        self.targets = targets

    def graphs(
        self, pids: list[int], replays: int = 16, page_size: int = 0, page_token: str = ""
    ) -> results.Page[results.Graph]:
        """Graph execs a page at a time in (pid, first seen) order, which new execs only extend
        (whatever their handle). Each graph is read under its process's lock alone, then the
        drain gets its turn."""
        if not 0 <= replays <= 1024:
            raise InvalidArgument("replays must be within 0..1024")
        if not 0 <= page_size <= MAX_GRAPH_PAGE:
            raise InvalidArgument(f"page_size must be within 0..{MAX_GRAPH_PAGE}")
        size = page_size or DEFAULT_GRAPH_PAGE
        reply_bytes = [0]  # roughly: a page of big graphs with many replays stops short of `size`

        def full(rows: list) -> bool:
            return len(rows) >= size or reply_bytes[0] >= GRAPH_PAGE_BYTES

        def take(process: ObservedProcess, at: tuple[int, ...], rows: list) -> tuple[int, ...] | None:
            first = at[0] if at else 0
            with process.lock:
                instances = [i for i in list(process.analyses.graph_join.execs) if i >= first]  # first seen first
            for instance in instances:
                if full(rows):
                    return (instance,)
                began = time.perf_counter()
                with process.lock:
                    graph = process.analyses.graph_join.execs.get(instance)
                    if graph is not None:
                        rows.append(self._graph_row(process, graph, replays))
                        reply_bytes[0] += 64 * len(rows[-1].nodes) + sum(
                            48 + 6 * len(r.node_blocks) for r in rows[-1].recent_replays
                        )
                self.registry.yield_to_drain(time.perf_counter() - began)
            return None

        return results.Page(
            *walk_pages(
                GRAPH_TOKEN,
                self.targets.processes(pids, live_only=False),
                page_token,
                take,
                full,
                lambda process: bool(process.analyses.graph_join.execs),
            )
        )

    def _graph_row(self, process: ObservedProcess, graph: GraphExec, replays: int) -> results.Graph:
        report = process.analyses.graph_join.exec_report(graph, replays)
        names = kernel_names(process.segment, (n.slot for n in graph.nodes.values()))
        order = report["order"]
        position = {node: index for index, node in enumerate(order)}
        nodes = []
        for n in sorted(graph.nodes.values(), key=lambda n: position.get(n.node, len(order))):
            counts = report["per_node"][n.node]
            nodes.append(
                results.GraphNode(
                    node=n.node,
                    slot=n.slot,
                    name=names.get(n.slot, f"slot {n.slot}"),
                    grid=list(n.grid),
                    block=list(n.block),
                    executions=graph.executions_of(n),
                    blocks_per_execution=n.blocks_per_execution,
                    grid_ids=sorted(n.grid_ids),
                    position=position.get(n.node, len(order)),
                    executions_matched=counts["matched"],
                    executions_mismatched=counts["mismatched"],
                    executions_unrecorded=counts["unrecorded"],
                    blocks_observed=counts["blocks_observed"],
                    executions_unjoined=counts["unjoined"],
                    executions_sampled=counts["sampled"],
                )
            )
        recent = [results.Replay(**{**r, "mode": MODE_NAMES.get(r["mode"], "unknown")}) for r in report["replays"]]
        totals = report["totals"]
        return results.Graph(
            pid=process.pid,
            graph_exec=graph.graph_exec,
            instance=graph.instance,
            alive=graph.alive,
            replays=graph.replays,
            first_launch_id=graph.first_launch_id,
            last_launch_id=graph.last_launch_id,
            node_executions=graph.node_executions,
            replays_nodes_unknown=graph.replays_nodes_unknown,
            order_stable=report["order_stable"],
            device_order_stable=report["device_order_stable"],
            blocks_per_replay=sum(n.blocks_per_execution for n in nodes),
            nodes=nodes,
            executions_matched=totals["matched"],
            executions_mismatched=totals["mismatched"],
            executions_unrecorded=totals["unrecorded"],
            executions_unjoined=totals["unjoined"],
            events_unmatched=report["events_unmatched"],
            recent_replays=recent,
            executions_sampled=totals["sampled"],
        )
