"""The nodes of a simulated cluster (`--sim-nodes`, a cluster profile's
`nodes`): which ranks sit on which node, and each node's link.

    --sim-nodes 'servers=1,workers=2,latency=5e-5,bandwidth=1.25e8; workers=2,latency=5e-5,bandwidth=1.25e9'

One item per node, separated by ';': how many servers, group servers and
workers it holds (each role's ranks fill the nodes in item order: the
first node's servers are servers 0, 1, ..., the next node's the next
ones; servers and group servers it leaves out go one per node, server k
on node k mod the nodes, as `--placement spread` puts them) and its
link's latency (seconds) and bandwidth (bytes/s). A pull or
a push between ranks of one node costs the intra-node path
(--sim-latency, --sim-bandwidth); between two nodes the slower of their
links: the larger latency, the smaller bandwidth. An evaluator (it
observes in no virtual time) sits on the first node. The cost itself:
mpips/runtime/transport/local.py's `Link`; docs/simulator.md.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from .settings import MAX_WORKERS
from .validate import ConfigError

MAX_NODES = MAX_WORKERS
MAX_LINK_SECONDS = 3600.0   # as a modelled message's (config.MAX_SIM_SECONDS)
FORM = "items 'servers=S,group_servers=G,workers=W,latency=SECONDS,bandwidth=BYTES_PER_S' separated by ';'"


class BadNode(ValueError):
    """One field of one node: `where` (nodes[1].bandwidth), its value and what is allowed."""

    def __init__(self, where: str, value: Any, allowed: str):
        self.where, self.value, self.allowed = where, value, allowed
        super().__init__(f"{where}={value!r}: {allowed}")


@dataclass(frozen=True)
class NodeLink:
    """One node: the ranks of each role on it, and its link to the others."""
    latency: float
    bandwidth: float
    servers: int = 0
    group_servers: int = 0
    workers: int = 0

    def to_dict(self) -> dict[str, float]:
        """Its fields, the counts that are not 0 (a profile's entry)."""
        return {**{name: getattr(self, name) for name in ROLES if getattr(self, name)},
                "latency": self.latency, "bandwidth": self.bandwidth}

    def items(self) -> str:
        """Its item of the `sim_nodes` setting."""
        return ",".join(f"{key}={value!r}" for key, value in self.to_dict().items())


ROLES = ("servers", "group_servers", "workers")   # NodeLink's counts, by the layout's role names + s
FIELDS = tuple(f.name for f in fields(NodeLink))


def node_link(data: Any, where: str) -> NodeLink:
    """A node from a mapping of its fields (a YAML entry or a parsed item);
    raises BadNode naming `where`.field."""
    if not isinstance(data, Mapping):
        raise BadNode(where, data, f"a mapping of {', '.join(FIELDS)}")
    for key in data:
        if key not in FIELDS:
            raise BadNode(f"{where}.{key}", data[key], f"unknown field; allowed: {', '.join(FIELDS)}")
    for key in ("latency", "bandwidth"):
        if key not in data:
            raise BadNode(where, dict(data), f"needs {key}")
    counts = {k: _count(data.get(k, 0), f"{where}.{k}") for k in ROLES}
    if not any(counts.values()):
        raise BadNode(where, dict(data), "holds no rank: give servers, group_servers or workers >= 1")
    latency = _number(data["latency"], f"{where}.latency", 0.0, MAX_LINK_SECONDS, "a finite number of "
                      f"seconds in [0, {MAX_LINK_SECONDS:g}]")
    bandwidth = _number(data["bandwidth"], f"{where}.bandwidth", 1.0, float("inf"),
                        "a finite number of bytes/s >= 1")
    return NodeLink(latency, bandwidth, **counts)


def _count(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_WORKERS:
        raise BadNode(where, value, f"an integer in [0, {MAX_WORKERS}]")
    return value


def _number(raw: Any, where: str, low: float, high: float, allowed: str) -> float:
    value = raw
    if isinstance(raw, str):
        try:
            value = float(raw)
        except ValueError:
            raise BadNode(where, raw, allowed) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
            or value == float("inf"):
        raise BadNode(where, raw, allowed)
    return float(value)


@dataclass(frozen=True)
class NodeLinks:
    """Every node of the setting, in order; none: one node (every transfer intra-node)."""
    nodes: tuple[NodeLink, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "NodeLinks":
        """The `sim_nodes` setting's text; a ConfigError naming it otherwise."""
        nodes = []
        for k, item in enumerate(s.strip() for s in text.split(";") if s.strip()):
            pairs = [p.partition("=") for p in item.split(",")]
            if any(not eq or not key.strip() for key, eq, _ in pairs):
                raise ConfigError("sim_nodes", text, FORM)
            try:
                nodes.append(node_link({key.strip(): raw.strip() for key, _, raw in pairs}, f"node {k}"))
            except BadNode as e:
                raise ConfigError("sim_nodes", text, str(e)) from None
            if len(nodes) > MAX_NODES:
                raise ConfigError("sim_nodes", text, f"at most {MAX_NODES} nodes")
        return cls(tuple(nodes))

    def text(self) -> str:
        """The setting's text of these nodes."""
        return "; ".join(node.items() for node in self.nodes)

    def check(self, layout) -> None:
        """Every worker of `layout` (mpips/runtime/layout.py) placed once, and
        no more servers or group servers than it has; a ConfigError otherwise.
        Servers and group servers the nodes leave out are placed as
        `--placement spread` places them (`node_of`): a profile measured with
        one server still simulates a candidate with two, or with GSSP's."""
        if not self.nodes:
            return
        for name in ROLES:
            placed, ranks = sum(getattr(n, name) for n in self.nodes), getattr(layout, name)
            if placed > ranks or (name == "workers" and placed != ranks):
                raise ConfigError("sim_nodes", self.text(), f"places {placed} {name.replace('_', ' ')}; "
                                                            f"the job has {ranks}")

    def node_of(self, role: str, index: int) -> int:
        """The node of the `index`-th rank of `role` (server, group_server,
        worker: the layout's names; an evaluator: the first node). A server
        or group server beyond those the nodes place is on node index mod
        the nodes (one per node, round robin, as `--placement spread`)."""
        name = role + "s"
        if not self.nodes or name not in ROLES:
            return 0
        rest = index
        for k, node in enumerate(self.nodes):
            rest -= getattr(node, name)
            if rest < 0:
                return k
        if name != "workers":
            return index % len(self.nodes)
        raise IndexError(f"{role} {index} is on no node of {self.text()!r}")
