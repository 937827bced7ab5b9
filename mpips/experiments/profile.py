"""A cluster profile: what one cluster does with one job (each worker's
device time, slowdown and stragglers; the network; the servers' applies),
as a YAML file that `mpips plan` writes from a probe (mpips/experiments/probe.py)
or a user writes by hand, and the `mpips simulate` settings it stands for
(`mpips simulate --cluster FILE`, `mpips plan --profile FILE`). The format,
field by field: docs/plan.md.

    workers:                  # in worker order; `count` repeats an entry
      - device_time: {a: 0.0, c: 0.00125, p: 1.0}   # seconds of one iteration on b samples: a + c*b**p
        slowdown: 1.0                               # persistent factor on that
        stragglers: {rate: 0.01, length: 10, factor: 4}
        count: 6
    network: {latency: 2.0e-05, bandwidth: 1.0e+10, jitter: 2.0e-04}   # within a node (all of it without nodes)
    nodes:                    # optional: the ranks on each node and its link (--sim-nodes, mpips/node_links.py)
      - {servers: 1, workers: 3, latency: 5.0e-05, bandwidth: 1.25e+09}
      - {workers: 3, latency: 5.0e-05, bandwidth: 1.25e+08}
    apply: {fixed: 2.0e-04, per_push: 0.0}

A worker's own device-time model becomes the simulator's one `--device-time`
(the fastest worker's model at the run's batch size) and a `--slowdown`
factor per worker relative to it: exact at every batch size when the
workers' models are proportional (as the probe fits them: one shape, a
factor per worker), and at the run's batch size when they are not (only
LB-BSP then trains other batch sizes).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..heterogeneity import MAX_EXPONENT, MAX_FACTOR, MAX_ITERATION, MAX_SECONDS, DeviceTime, format_slowdown
from ..node_links import BadNode, NodeLink, NodeLinks, node_link
from ..settings import MAX_WORKERS
from ..validate import ConfigError


def _number(low: float, *, low_open: bool = False, high: float = math.inf, interval: bool = False):
    """A field's bounds; `interval`: said as [low, high] (a fraction), else as >= low, at most high."""
    return {"low": low, "low_open": low_open, "high": high, "interval": interval}


@dataclass(frozen=True)
class Stragglers:
    """Transient stragglers: each iteration not already slowed starts a straggle
    with probability `rate`, lasting a geometric number of iterations of mean
    `length`, `factor` times slower (--random-stragglers rate:length:factor)."""
    rate: float = field(default=0.0, metadata=_number(0.0, high=1.0, interval=True))
    length: float = field(default=1.0, metadata=_number(1.0, high=MAX_ITERATION))
    factor: float = field(default=1.0, metadata=_number(1.0, high=MAX_FACTOR))


@dataclass(frozen=True)
class Network:
    """A pull or a push: latency + bytes / bandwidth, plus a random delay of
    mean jitter (--sim-latency, --sim-bandwidth, --sim-jitter); with nodes,
    this is a transfer within a node."""
    latency: float = field(default=20e-6, metadata=_number(0.0, high=MAX_SECONDS))
    bandwidth: float = field(default=10e9, metadata=_number(0.0, low_open=True))
    jitter: float = field(default=2e-4, metadata=_number(0.0, high=MAX_SECONDS))


@dataclass(frozen=True)
class Apply:
    """A server's step: fixed + per_push x pushes summed, beyond moving the
    pushes' bytes at the network's bandwidth (--sim-apply, --sim-apply-per-push)."""
    fixed: float = field(default=2e-4, metadata=_number(0.0, high=MAX_SECONDS))
    per_push: float = field(default=0.0, metadata=_number(0.0, high=MAX_SECONDS))


@dataclass(frozen=True)
class WorkerProfile:
    device_time: DeviceTime
    slowdown: float = 1.0
    stragglers: Stragglers = Stragglers()

    def seconds(self, batch: int) -> float:
        """Its iteration on `batch` samples, outside straggles."""
        return self.slowdown * self.device_time.seconds(batch)


@dataclass(frozen=True)
class ClusterProfile:
    workers: tuple[WorkerProfile, ...]
    network: Network = Network()
    apply: Apply = Apply()
    nodes: tuple[NodeLink, ...] = ()   # none: one node

    def settings(self, batch_size: int) -> dict[str, Any]:
        """The `mpips simulate` settings (Config fields) of this cluster for a
        run of `batch_size` samples per worker and iteration."""
        times = [w.seconds(batch_size) for w in self.workers]
        least = min(times)   # once, not per worker: O(W), for 100,000 workers too
        fastest = self.workers[times.index(least)]
        base = dataclasses.replace(fastest.device_time, a=fastest.slowdown * fastest.device_time.a,
                                   c=fastest.slowdown * fastest.device_time.c)
        factors = [max(1.0, t / least) for t in times]   # max: a rounding below 1 is 1
        stragglers = [dataclasses.astuple(w.stragglers) for w in self.workers]
        if len(set(stragglers)) == 1:
            stragglers = stragglers[:1]
        return {
            "workers": len(self.workers),
            "device_time": f"a={base.a!r}s,c={base.c!r}s,p={base.p!r}",
            "slowdown": format_slowdown(factors) if max(factors) > 1 else "",
            "random_stragglers": ",".join(":".join(repr(float(x)) for x in s) for s in stragglers)
                                 if any(s[0] > 0 for s in stragglers) else "",
            "sim_latency": self.network.latency, "sim_bandwidth": self.network.bandwidth,
            "sim_jitter": self.network.jitter, "sim_nodes": NodeLinks(self.nodes).text(),
            "sim_apply": self.apply.fixed,
            "sim_apply_per_push": self.apply.per_push,
        }

    def to_dict(self) -> dict:
        """The YAML file's content, runs of equal workers as one entry with `count`."""
        entries: list[dict] = []
        for w in self.workers:
            entry = {"device_time": dataclasses.asdict(w.device_time), "slowdown": w.slowdown,
                     "stragglers": dataclasses.asdict(w.stragglers)}
            if entries and {k: v for k, v in entries[-1].items() if k != "count"} == entry:
                entries[-1]["count"] = entries[-1].get("count", 1) + 1
            else:
                entries.append(entry)
        nodes = [node.to_dict() for node in self.nodes]
        return {"workers": entries, "network": dataclasses.asdict(self.network),
                **({"nodes": nodes} if nodes else {}), "apply": dataclasses.asdict(self.apply)}


def save(profile: ClusterProfile, path: str, comment: str = "") -> None:
    import yaml

    with open(path, "w") as fh:
        fh.write("# mpips cluster profile (docs/plan.md)\n")
        fh.writelines(f"# {line}\n" for line in comment.splitlines())
        yaml.safe_dump(_plain(profile.to_dict()), fh, sort_keys=False, default_flow_style=None)


def _plain(value):
    """Floats as Python floats (numpy's would be written as objects)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value if isinstance(value, (int, str, bool)) else float(value)


def load(path: str) -> ClusterProfile:
    """Read and check a profile; a bad one raises ConfigError naming the file,
    the field and what is allowed."""
    import yaml

    try:
        with open(path, "rb") as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError("cluster", path, f"cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError("cluster", path, f"not valid YAML ({e.__class__.__name__})") from None
    try:
        return parse(data)
    except _Bad as e:
        raise ConfigError("cluster", path, str(e)) from None


class _Bad(ValueError):
    def __init__(self, where: str, value: Any, allowed: str):
        super().__init__(f"{where}={value!r}: {allowed}")


def parse(data: Any) -> ClusterProfile:
    """A profile from the YAML file's content (raises _Bad naming the field)."""
    _keys(data, "the file", ("workers", "network", "nodes", "apply"), required=("workers",))
    entries = data["workers"]
    if not isinstance(entries, list) or not entries:
        raise _Bad("workers", entries, "a list of at least one worker entry")
    workers: list[WorkerProfile] = []
    for k, entry in enumerate(entries):
        where = f"workers[{k}]"
        _keys(entry, where, ("device_time", "slowdown", "stragglers", "count"), required=("device_time",))
        count = entry.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_WORKERS - len(workers):
            # checked before the list grows by it (a count of 10**12 would take all the memory)
            raise _Bad(f"{where}.count", count, f"an integer >= 1, at most {MAX_WORKERS} workers in all")
        worker = WorkerProfile(_device_time(entry["device_time"], f"{where}.device_time"),
                               _value(entry.get("slowdown", 1.0), f"{where}.slowdown",
                                      _number(1.0, high=MAX_FACTOR)),
                               _section(Stragglers, entry.get("stragglers", {}), f"{where}.stragglers"))
        workers += [worker] * count
    return ClusterProfile(tuple(workers), _section(Network, data.get("network", {}), "network"),
                          _section(Apply, data.get("apply", {}), "apply"), _nodes(data.get("nodes", []), len(workers)))


def _nodes(entries: Any, workers: int) -> tuple[NodeLink, ...]:
    if not isinstance(entries, list):
        raise _Bad("nodes", entries, "a list of node entries")
    try:
        nodes = tuple(node_link(entry, f"nodes[{k}]") for k, entry in enumerate(entries))
    except BadNode as e:
        raise _Bad(e.where, e.value, e.allowed) from None
    placed = sum(node.workers for node in nodes)
    if nodes and placed != workers:
        raise _Bad("nodes", entries, f"places {placed} workers; the profile has {workers}")
    return nodes


def _keys(data: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
    if not isinstance(data, dict):
        raise _Bad(where, data, f"a mapping of {', '.join(allowed)}")
    for key in data:
        if key not in allowed:
            raise _Bad(f"{where}.{key}" if where != "the file" else str(key), data[key],
                       f"unknown field; allowed: {', '.join(allowed)}")
    for key in required:
        if key not in data:
            raise _Bad(where, data, f"needs {key}")


def _value(value: Any, where: str, rule: Mapping) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > rule["low"] if rule["low_open"] else value >= rule["low"]) and value <= rule["high"]
    if not ok:
        bounds = f"{'>' if rule['low_open'] else '>='} {rule['low']:g}"
        if rule["interval"]:
            bounds = f"in {'(' if rule['low_open'] else '['}{rule['low']:g}, {rule['high']:g}]"
        elif rule["high"] < math.inf:
            bounds += f", at most {rule['high']:g}"
        raise _Bad(where, value, f"a finite number {bounds}")
    return float(value)


def _section(cls, data: Any, where: str):
    names = tuple(f.name for f in dataclasses.fields(cls))
    _keys(data, where, names)
    return cls(**{f.name: _value(data[f.name], f"{where}.{f.name}", f.metadata)
                  for f in dataclasses.fields(cls) if f.name in data})


def _device_time(data: Any, where: str) -> DeviceTime:
    _keys(data, where, ("a", "c", "p"))
    model = DeviceTime(_value(data.get("a", 0.0), f"{where}.a", _number(0.0, high=MAX_SECONDS)),
                       _value(data.get("c", 0.0), f"{where}.c", _number(0.0, high=MAX_SECONDS)),
                       _value(data.get("p", 1.0), f"{where}.p", _number(0.0, low_open=True, high=MAX_EXPONENT)))
    if model.seconds(1) <= 0:
        raise _Bad(where, data, "a + c must be > 0 (seconds of an iteration)")
    return model
