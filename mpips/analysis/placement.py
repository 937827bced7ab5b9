"""Where a run's ranks ran, in words: the layout by node (`mpips info`,
`mpips summarize`, the timeline). From `RunLog.by_node()`: host -> its
ranks (rank, host, role, index), hosts in the order of their first rank."""
from __future__ import annotations

# a role as the tables abbreviate it
SHORT = {"server": "S", "group_server": "G", "worker": "W", "evaluator": "E"}


def node_line(ranks: list[dict]) -> str:
    """One node's ranks: 'server 0 (rank 0), worker 0 (rank 1)'."""
    return ", ".join(f"{r['role'].replace('_', ' ')} {r['index']} (rank {r['rank']})" for r in ranks)


def nodes_label(by_node: dict[str, list[dict]]) -> str:
    """The shape of a placement without the hosts' names (runs on other
    nodes alike compare and pool): '1 node', '3 nodes: S+W, 2W, W'."""
    if len(by_node) <= 1:
        return "1 node" if by_node else "-"
    shapes = []
    for ranks in by_node.values():
        counts = {short: sum(SHORT[r["role"]] == short for r in ranks) for short in SHORT.values()}
        shapes.append("+".join(f"{n if n > 1 else ''}{short}" for short, n in counts.items() if n))
    return f"{len(by_node)} nodes: {', '.join(shapes)}"
