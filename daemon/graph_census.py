"""Per process, what its CUDA graphs did, built from launch records (node launches carry graph
exec, node and replay launch id). One numpy pass per drained batch; no per-record Python."""

from __future__ import annotations

import dataclasses

import numpy as np

GRAPH_NODE = 2  # LaunchKind::GraphNode


@dataclasses.dataclass
class NodeCensus:
    node: int
    slot: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    executions: int = 0
    grid_ids: set[int] = dataclasses.field(default_factory=set)

    @property
    def blocks_per_execution(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclasses.dataclass
class GraphCensus:
    graph_exec: int
    nodes: dict[int, NodeCensus] = dataclasses.field(default_factory=dict)
    first_launch_id: int = 0
    last_launch_id: int = 0
    node_executions: int = 0
    order: list[int] = dataclasses.field(default_factory=list)  # node order of the first replay seen
    order_stable: bool = True

    @property
    def replays(self) -> int:
        return self.last_launch_id - self.first_launch_id + 1 if self.last_launch_id else 0


class GraphCensuses:
    """All graph execs of one process."""

    MAX_GRAPHS = 4096  # bounded: a process that makes more graph execs than this is summarised partly

    def __init__(self) -> None:
        self.graphs: dict[int, GraphCensus] = {}
        self.graphs_dropped = 0

    def update(self, launches: np.ndarray) -> None:
        nodes = launches[launches["kind"] == GRAPH_NODE]
        if not len(nodes):
            return
        for graph_exec in np.unique(nodes["graph_exec"]).tolist():
            mine = nodes[nodes["graph_exec"] == graph_exec]
            census = self.graphs.get(graph_exec)
            if census is None:
                if len(self.graphs) >= self.MAX_GRAPHS:
                    self.graphs_dropped += 1
                    continue
                census = self.graphs[graph_exec] = GraphCensus(graph_exec, first_launch_id=int(mine["graph_launch_id"].min()))
            census.last_launch_id = max(census.last_launch_id, int(mine["graph_launch_id"].max()))
            census.first_launch_id = min(census.first_launch_id, int(mine["graph_launch_id"].min()))
            census.node_executions += len(mine)
            node_ids, first_index, counts = np.unique(mine["graph_node"], return_index=True, return_counts=True)
            for node, index, count in zip(node_ids.tolist(), first_index.tolist(), counts.tolist()):
                entry = census.nodes.get(node)
                if entry is None:
                    row = mine[index]
                    entry = census.nodes[node] = NodeCensus(
                        node, int(row["kernel_slot"]), (int(row["grid_x"]), int(row["grid_y"]), int(row["grid_z"])),
                        (int(row["block_x"]), int(row["block_y"]), int(row["block_z"])))
                entry.executions += count
                if len(entry.grid_ids) < 4:
                    entry.grid_ids.update(np.unique(mine["grid_id"][mine["graph_node"] == node]).tolist()[:4])
            self._check_order(census, mine)

    @staticmethod
    def _check_order(census: GraphCensus, mine: np.ndarray) -> None:
        """Every complete replay in the batch must run the nodes in the first replay's order."""
        for launch_id in np.unique(mine["graph_launch_id"]).tolist():
            replay = mine[mine["graph_launch_id"] == launch_id]
            order = replay["graph_node"][np.argsort(replay["host_time_ns"], kind="stable")].tolist()
            if len(order) > len(census.order):
                census.order = order  # a longer replay: the first ones seen may have been cut by a batch
            elif len(order) == len(census.order) and order != census.order:
                census.order_stable = False
