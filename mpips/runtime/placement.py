"""Which of the launched ranks take which role, chosen by host (`--placement`).

The layout gives roles by rank number, servers first (mpips/runtime/layout.py).
Under Slurm's block distribution the first ranks share the first node, so
with several servers every one of them sat there, and that node's link
carried every pull and push. A placement reorders the launched ranks by
their hosts before the layout is applied: the transport renumbers them
(`Comm.Split(0, key=position)`, MPITransport's `order`), and the roles'
code stays written once over rank numbers.

- packed: the launcher's order (servers on the first ranks, so on the first node);
- spread: servers one per node, round robin over the nodes in the order of
  their first rank, group servers likewise from the first node, then the
  workers (and the evaluator) node by node, so that GSSP's groups, cut
  from workers in index order when speeds are equal, fall one per node:
  group g's server and workers on node g when the counts divide evenly.

On one node every placement is the launcher's order. Placement never
changes what is computed: a role's index, not its host, chooses its data
and its place in every sum (BSP's parameters are bit for bit the same).
"""
from __future__ import annotations

from typing import Sequence

from ..config import PLACEMENTS, ConfigError
from .layout import Layout, make_layout


def role_order(hosts: Sequence[str], layout: Layout, placement: str) -> list[int]:
    """The launched ranks (indices of `hosts`, each rank's host) in the order
    that takes the layout's ranks 0, 1, ...: entry r is the launched rank
    that becomes rank r."""
    if placement not in PLACEMENTS:
        raise ConfigError("placement", placement, f"allowed: {', '.join(PLACEMENTS)}")
    if len(hosts) != layout.size:
        raise ConfigError("ranks", len(hosts), f"the layout has {layout.size} ranks")
    if placement == "packed":
        return list(range(len(hosts)))
    nodes = list(dict.fromkeys(hosts))
    free = {node: [r for r, host in enumerate(hosts) if host == node] for node in nodes}
    order: list[int] = []
    for count in (layout.servers, layout.group_servers):
        order += _round_robin(free, nodes, count)
    return order + [r for node in nodes for r in free[node]]


def _round_robin(free: dict[str, list[int]], nodes: list[str], count: int) -> list[int]:
    """`count` ranks, the first free rank of each node in turn from the
    first node, skipping nodes with none left (more servers than nodes wrap)."""
    taken: list[int] = []
    k = 0
    while len(taken) < count:
        node = nodes[k % len(nodes)]
        if free[node]:
            taken.append(free[node].pop(0))
        k += 1
    return taken


def placed_order(config, hosts: Sequence[str]) -> list[int]:
    """role_order for `config`'s layout; the launcher's order when the layout
    is refused (the layout's own check says why, on every rank, next)."""
    try:
        layout = make_layout(config, len(hosts))
    except ConfigError:
        return list(range(len(hosts)))
    return role_order(hosts, layout, config.placement)
