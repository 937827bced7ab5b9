"""`mpips plan`'s probe: measure the cluster a job will train on, with the
job's own model and data, under the user's launcher, and fit a
ClusterProfile (mpips/experiments/profile.py).

It is three short real runs of the job (mpips.train over the launch's ranks,
the time split evenly, each ended by --time-limit), read back from their
run logs; nothing is timed outside the runtime:

    batch b/2, BSP, dense   compute at b/2; applies of W pushes
    batch b,   ASP, top-k   compute at b; pushes of few bytes (the latency)
    batch 2b,  ASP, dense   compute at 2b; applies of about one push

- Device time: per worker and batch size the usual `compute` (the real
  forward/backward, and the --device-time emulation's sleep when given: the
  median of the iterations not slowed by a straggle);
  one shape a + c*b**p for the cluster, fitted to the medians each divided
  by the worker's own at b (linear, p = 1, unless another p fits more than
  2% better), and a slowdown per worker (its medians over the fastest's).
- Stragglers: per worker, an iteration more than STRAGGLE times its usual
  compute is slowed; the emulation's model (rate, geometric length, factor)
  fitted by maximum likelihood to the sequence of slowed and fast
  iterations, a two-state chain (fit_stragglers); workers whose sequences do
  not differ significantly are fitted together.
- Network: pulls and pushes, latency + bytes / bandwidth through the 10th
  percentile of the small (top-k) pushes and of the dense pulls and pushes;
  jitter from the median's excess over it (an exponential's median is ln 2
  of its mean).
- Nodes: when the runs' ranks are on several hosts, the network within the
  servers' node and each other node's link, each from its own workers'
  transfers (fit_links).
- Applies: the `apply` column against `pushes`, a line through the medians
  per push count; the per-push part beyond moving a push's bytes.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..config import Config
from ..heterogeneity import DeviceTime
from ..node_links import NodeLink
from .profile import Apply, ClusterProfile, Network, Stragglers, WorkerProfile

STRAGGLE = 1.5        # an iteration this many times its worker's usual is straggling (at least)
SAME = 0.01           # workers whose straggle counts are this likely (or more) under one model are pooled
SAME_FACTOR = 0.05    # pooled workers share the factor when each one's is this close to the pooled
LINEAR_UNLESS = 0.02  # keep p = 1 unless another p fits this much better (relative error)
ROLES = ("server", "group_server", "worker")   # the placement's roles of node_links.ROLES
MIN_TRANSFERS = 10    # a node's dense transfers and small pushes, each, to fit its own link
LONG = 1e5            # epochs: the runs end by their time limit


def probe_settings(config: Config, seconds: float, out: str) -> list[Config]:
    """The probe's three runs of the job `config`: settings each (an evaluator
    rank, if the job has one, stays: the launch counts it; it evaluates at the end)."""
    b = config.batch_size
    runs = [(max(1, b // 2), "bsp", "none"), (b, "asp", "topk"), (2 * b, "asp", "none")]
    model = config.device_time_model()
    # '20ms' means 20 ms at the batch size: pinned to the job's, not each run's
    device_time = f"a={model.a!r}s,c={model.c!r}s,p={model.p!r}" if model else ""
    return [dataclasses.replace(
        config, batch_size=size, device_time=device_time, paradigm=paradigm, compressor=compressor, topk_ratio=0.01,
        time_limit=seconds / len(runs), epochs=LONG, iterations=0, budget="global",
        eval_every=LONG, seed=config.seed + k, run_dir=os.path.join(out, f"probe-{k}-{paradigm}-b{size}"),
        overwrite=True, checkpoint_every=0.0)
        for k, (size, paradigm, compressor) in enumerate(runs)]


def run_probe(config: Config, comm, *, seconds: float, out: str) -> ClusterProfile | None:
    """Run the probe over `comm` (every rank); the fitted profile on rank 0, None elsewhere."""
    from ..io.log import RunLog
    from ..runtime.job.train import train

    run_dirs = []
    for c in probe_settings(config, seconds, out):
        run_dirs.append(train(c, comm))
        comm.Barrier()   # every rank has closed its log file (and rank 0 written run.h5)
    if comm.Get_rank() != 0:
        return None
    return fit([RunLog(d) for d in run_dirs], say=lambda line: print(f"mpips plan: {line}", flush=True))


def fit(logs, say: Callable[[str], None] = print) -> ClusterProfile:
    """The profile from the probe's run logs (mpips.io.log.RunLog); `say`:
    a line on what the fit could not do (fit_links())."""
    n = int(logs[0].layout["parameters"])
    its = [log.iterations[log.iterations["rejected"] == 0] for log in logs]
    workers = int(logs[0].layout["workers"])
    shape, factors = device_time(its, workers)
    worker_stragglers = fit_stragglers([[it[it["worker"] == w] for it in its] for w in range(workers)])
    network, nodes = fit_links(its, logs[0].placement, say)
    return ClusterProfile(
        tuple(WorkerProfile(shape, f, s) for f, s in zip(factors, worker_stragglers)), network,
        fit_apply([log.applies for log, it in zip(logs, its) if (it["bytes_sent"] == 4 * n).all()],
                  4 * n / network.bandwidth), nodes)


def device_time(its: list[np.ndarray], workers: int) -> tuple[DeviceTime, list[float]]:
    """The fastest worker's model a + c*b**p and every worker's factor on it."""
    sizes = np.array([int(np.median(it["batch"])) for it in its], float)
    # outside straggles: the usual compute, not the median, which a short run that straggled often is not
    medians = np.array([[usual_compute(it["compute"][it["worker"] == w])[0] for it in its] for w in range(workers)])
    middle = int(np.argsort(sizes)[len(sizes) // 2])
    shape = np.median(medians / medians[:, [middle]], axis=0)     # the cluster's curve, 1 at b
    scale = np.median(medians / shape, axis=1)                    # each worker's time at b
    fastest = scale.min()
    a, c, p = fit_curve(sizes, shape * fastest)
    return DeviceTime(a, c, p), [float(s / fastest) for s in scale]


def fit_curve(b: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """a, c >= 0 and p of a + c*b**p through the points (b, t), least
    relative squares; p = 1 unless another fits LINEAR_UNLESS better."""
    def best(p: float) -> tuple[float, float, float]:
        x = np.stack([np.ones_like(b), b ** p], axis=1) / t[:, None]   # relative: rows divided by t
        (a, c), *_ = np.linalg.lstsq(x, np.ones_like(t), rcond=None)
        if a < 0 or c < 0:   # the better one-term model
            fits = [(0.0, float(np.sum(b ** p * t) / np.sum(b ** (2 * p)))),
                    (float(np.mean(t)), 0.0)]
            a, c = min(fits, key=lambda ac: _error(b, t, ac[0], ac[1], p))
        return float(a), float(c), _error(b, t, a, c, p)

    a, c, linear = best(1.0)
    if len(np.unique(b)) < 3:
        return a, c, 1.0
    others = [(best(p), p) for p in np.arange(0.25, 2.001, 0.01)]
    (oa, oc, error), op = min(others, key=lambda o: o[0][2])
    if error < linear - LINEAR_UNLESS:
        return oa, oc, float(round(op, 2))
    return a, c, 1.0


def _error(b, t, a, c, p) -> float:
    """Largest relative error of the model at the points."""
    return float(np.max(np.abs(a + c * b ** p - t) / t))


def classify(it: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One worker's iterations of one run, in iteration order: (iteration
    numbers, slowed or not, compute over the worker's usual compute).

    The usual compute is the median of the iterations not slowed, first of
    those within STRAGGLE x the 10th percentile (so a short run that
    straggled more often than not is read from its fast iterations, not its
    median); an iteration is slowed above STRAGGLE x the usual, or above the
    geometric middle sqrt(factor) x the usual where the slowed ones are more
    than STRAGGLE**2 times slower (the emulation's 4x: a threshold of 2), so
    that a fast iteration the machine delayed (a late wake-up) is not a straggle."""
    order = np.argsort(it["iteration"], kind="stable")
    compute = it["compute"][order].astype(float)
    usual, threshold = usual_compute(compute)
    return it["iteration"][order], compute > threshold * usual, compute / usual


def usual_compute(compute: np.ndarray) -> tuple[float, float]:
    """(the usual compute, the threshold over it of a slowed iteration): classify()'s."""
    compute = np.asarray(compute, float)
    usual = float(np.median(compute[compute <= STRAGGLE * np.percentile(compute, 10)]))
    threshold = STRAGGLE
    for _ in range(3):
        slow = compute > threshold * usual
        if not slow.any():
            break
        usual = float(np.median(compute[~slow]))
        threshold = max(STRAGGLE, math.sqrt(float(np.median(compute[slow])) / usual))
    return usual, threshold


@dataclass
class Chain:
    """One worker's slowed and fast iterations as the two-state chain they
    are (fit_stragglers()): counts over the pairs of consecutive iterations."""
    trials: int = 0      # fast iterations with a next one, and each run's iteration 0
    starts: int = 0      # of them, the next (iteration 0 itself) slowed
    slowed: int = 0      # slowed iterations with a next one
    ends: int = 0        # of them, the next fast
    ratios: list = field(default_factory=list)   # each slowed iteration's compute over the usual

    def add(self, iteration: np.ndarray, slow: np.ndarray, ratio: np.ndarray | None = None) -> "Chain":
        """Count one run (in iteration order); a gap in the numbers (a
        rejected push's iteration dropped) breaks the pairs there."""
        paired = np.diff(iteration) == 1
        now, then = slow[:-1][paired], slow[1:][paired]
        self.trials += int(np.sum(~now))
        self.starts += int(np.sum(~now & then))
        self.slowed += int(np.sum(now))
        self.ends += int(np.sum(now & ~then))
        if iteration.size and iteration[0] == 0:   # the emulation's iteration 0 may start one
            self.trials += 1
            self.starts += int(slow[0])
        if ratio is not None:
            self.ratios += ratio[slow].tolist()
        return self

    def __add__(self, other: "Chain") -> "Chain":
        return Chain(self.trials + other.trials, self.starts + other.starts, self.slowed + other.slowed,
                     self.ends + other.ends, self.ratios + other.ratios)

    def rows(self) -> list[tuple[int, int]]:
        """(successes, trials) of the chain's two rows: starts after a fast iteration, ends of a slowed one."""
        return [(self.starts, self.trials), (self.ends, self.slowed)]

    def fit(self) -> tuple[float, float]:
        """Maximum likelihood (rate, mean length) of the emulation's model on these counts."""
        if not self.starts and not self.slowed:
            return 0.0, 1.0
        rate = self.starts / self.trials if self.trials else 1.0
        if not self.slowed:          # one straggle, on the last iteration: nothing seen of its length
            return rate, 1.0
        if not self.ends:            # slowed to the end: at least that long
            return rate, float(self.slowed + 1)
        end = self.ends / self.slowed                # q (1 - rate)
        if end >= 1.0 - rate:        # q <= 1: at the bound, every straggle one iteration, then after a
            # slowed iteration the next is slowed with probability rate as after a fast one
            rate = (self.starts + self.slowed - self.ends) / (self.trials + self.slowed)
            return rate, 1.0
        return rate, (1.0 - rate) / end


def stragglers(runs: list[np.ndarray]) -> Stragglers:
    """One worker's transient stragglers from its iterations in each run
    (fit_stragglers(), one worker)."""
    return fit_stragglers([runs])[0]


def chain(runs: list[np.ndarray]) -> Chain:
    """One worker's chain counts over its runs."""
    counts = Chain()
    for it in runs:
        if it.size:
            counts.add(*classify(it))
    return counts


def fit_stragglers(workers: list[list[np.ndarray]]) -> list[Stragglers]:
    """Every worker's transient stragglers, from its iterations in each run.

    The emulation's model (mpips/training/emulation.py): an iteration not in
    a straggle starts one with probability `rate`; it lasts a geometric
    number of iterations of mean `length` (after each, it ends with
    probability q = 1/length). A geometric length is memoryless, so whether
    an iteration is slowed is a two-state chain: after a fast iteration the
    next is slowed with probability rate; after a slowed one the next is fast
    with probability q (1 - rate) (the straggle ended, and the iteration
    after it, free, started none: two straggles back to back are seen as one).
    The maximum-likelihood rate and q from the pairs of consecutive logged
    iterations: rate = starts / trials, q (1 - rate) = ends / slowed (a run
    cut by its time limit inside a straggle counts what it saw, not a short
    straggle). The factor is the median over the slowed iterations of their
    compute over the worker's usual.

    Workers whose chains do not differ significantly (a G-test of the two
    rows' counts over the workers, level SAME) are one model with the
    counts pooled: a probe sees few straggles per worker (rate 0.01, 60 s:
    about 15), the workers together several times more. They share the
    pooled factor too where each one's is within SAME_FACTOR of it."""
    return fit_chains([chain(runs) for runs in workers])


def fit_chains(chains: list[Chain]) -> list[Stragglers]:
    """fit_stragglers() on the workers' chain counts."""
    fitted = [_stragglers(*c.fit(), c.ratios) for c in chains]
    if len(chains) < 2 or same_chain(chains) < SAME:
        return fitted
    pooled = sum(chains, Chain())
    rate, length = pooled.fit()
    if not rate:
        return [Stragglers() for _ in chains]
    common = float(np.median(pooled.ratios))
    if all(abs(f.factor / common - 1) <= SAME_FACTOR for f, c in zip(fitted, chains) if c.ratios):
        return [_stragglers(rate, length, pooled.ratios)] * len(chains)
    return [_stragglers(rate, length, c.ratios or pooled.ratios) for c in chains]


def _stragglers(rate: float, length: float, ratios: list[float]) -> Stragglers:
    if not rate:
        return Stragglers()
    return Stragglers(rate=rate, length=max(1.0, length), factor=max(1.0, float(np.median(ratios))))


def same_chain(chains: list[Chain]) -> float:
    """The p-value of the workers' chains being one (the G-test of
    homogeneity over both rows: starts per trial, ends per slowed iteration)."""
    from scipy.stats import chi2

    g, df = 0.0, 0
    for row in range(2):
        counts = [c.rows()[row] for c in chains if c.rows()[row][1] > 0]
        if len(counts) < 2:
            continue
        k, n = np.array(counts, float).T
        p = k.sum() / n.sum()
        for observed, expected in ((k, n * p), (n - k, n * (1 - p))):
            seen = observed > 0
            g += 2 * float(np.sum(observed[seen] * np.log(observed[seen] / expected[seen])))
        df += len(counts) - 1
    return float(chi2.sf(g, df)) if df else 1.0


def _transfers(its: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(the dense pulls and pushes, the small pushes, their bytes, the dense bytes) of these rows."""
    dense = max(int(it["bytes_dense"].max()) for it in its)
    pulls = np.concatenate([it["pull"] for it in its])
    pushes = np.concatenate([it["push"] for it in its])
    sent = np.concatenate([it["bytes_sent"] for it in its])
    return np.concatenate([pulls, pushes[sent == dense]]), pushes[sent < dense], sent[sent < dense], dense


def fit_network(its: list[np.ndarray]) -> Network:
    """latency + bytes / bandwidth through the small and the dense transfers, and the jitter."""
    big, small, small_bytes, dense = _transfers(its)
    floor_big = float(np.percentile(big, 10))
    if small.size:
        floor_small, nbytes = float(np.percentile(small, 10)), float(np.median(small_bytes))
    else:
        floor_small, nbytes = floor_big, float(dense)
    if floor_big > floor_small and dense > nbytes:
        bandwidth = (dense - nbytes) / (floor_big - floor_small)
        latency = max(0.0, floor_small - nbytes / bandwidth)
    else:   # no measurable cost per byte: all of it is latency
        bandwidth, latency = 1e12, min(floor_big, floor_small)
    excess = [np.median(x) - np.percentile(x, 10) for x in (big, small) if x.size]
    jitter = max(0.0, float(np.mean(excess)) / math.log(2))
    return Network(latency=latency, bandwidth=float(bandwidth), jitter=jitter)


def fit_links(its: list[np.ndarray], placement: list[dict] | None,
              say: Callable[[str], None] = print) -> tuple[Network, tuple[NodeLink, ...]]:
    """The network and, when the probe's ranks ran on several hosts
    (`placement`: RunLog.placement), each node's link, as the simulator
    models them (mpips/node_links.py): a transfer within a node costs
    `network`, one between two nodes the slower of their links.

    With the servers on one node, the transfers of that node's workers are
    the network within a node, and those of another node's workers its link
    to the servers' node (fit_network() on each node's rows). Only the
    slower of two links is ever seen, so the servers' node gets the fastest
    link seen (the least latency, the most bandwidth): every other node's
    transfers then cost its own fit exactly. The jitter (one for every
    transfer in the simulator) is the fits' mean, weighted by their rows.
    A node with fewer than MIN_TRANSFERS dense transfers or small pushes
    takes the fit of every row (`say` says so); servers on several nodes,
    or ranks not in node order, give the one network of every row."""
    common = fit_network(its)
    hosts = _hosts(placement)
    if len(hosts) < 2:
        return common, ()
    servers = [h for h, roles in hosts.items() if roles["server"]]
    if len(servers) > 1:
        say(f"the servers ran on {len(servers)} nodes: the profile has one network for every transfer "
            f"(a node's link is fitted with every server on one node)")
        return common, ()
    order = list(hosts)
    for role in ROLES:
        on = sorted((index, order.index(h)) for h, roles in hosts.items() for index in roles[role])
        if [k for _, k in on] != sorted(k for _, k in on):
            say(f"the {role.replace('_', ' ')}s are not in the order of their nodes' first ranks: the profile "
                f"has one network for every transfer (its nodes fill each role in node order)")
            return common, ()
    fits: dict[str, tuple[Network, int]] = {}
    for host, roles in hosts.items():
        rows = [r for it in its if (r := it[np.isin(it["worker"], roles["worker"])]).size]
        big, small = _transfers(rows)[:2] if rows else (np.zeros(0), np.zeros(0))
        if min(len(big), len(small)) >= MIN_TRANSFERS:
            fits[host] = fit_network(rows), sum(r.size for r in rows)
        elif roles["worker"]:
            say(f"node {host}: {len(big)} dense transfers and {len(small)} small pushes, fewer than "
                f"{MIN_TRANSFERS}: its link is the fit of every node's transfers")
    link = {h: fits[h][0] if h in fits else common for h in hosts}
    remote = [link[h] for h in hosts if h != servers[0]]
    home = fits[servers[0]][0] if servers[0] in fits else common
    if servers[0] not in fits and not hosts[servers[0]]["worker"]:
        say(f"no worker ran on the servers' node {servers[0]}: the network within a node is the fit of every "
            f"node's transfers")
    link[servers[0]] = Network(min(n.latency for n in remote), max(n.bandwidth for n in remote))
    rows_fitted = sum(count for _, count in fits.values())
    jitter = (sum(n.jitter * count for n, count in fits.values()) / rows_fitted) if fits else common.jitter
    return (Network(home.latency, home.bandwidth, jitter),
            tuple(NodeLink(link[h].latency, link[h].bandwidth, **{f"{role}s": len(roles[role]) for role in ROLES})
                  for h, roles in hosts.items()))


def _hosts(placement: list[dict] | None) -> dict[str, dict[str, list[int]]]:
    """host -> role -> the indices of its ranks of that role, hosts in the
    order of their first rank; hosts of an evaluator alone left out (the
    simulator puts it on the first node)."""
    hosts: dict[str, dict[str, list[int]]] = {}
    for rank in placement or ():
        if rank["role"] != "evaluator":
            hosts.setdefault(rank["host"], {role: [] for role in ROLES})[rank["role"]].append(int(rank["index"]))
    return hosts


def fit_apply(applies: list[np.ndarray], moving: float) -> Apply:
    """fixed + per_push x pushes through the median apply per push count;
    `moving`: the seconds of one push's bytes at the network's bandwidth,
    which the simulator charges apart."""
    ap: np.ndarray = np.concatenate(applies) if applies else np.zeros(0)
    counts: np.ndarray = np.unique(ap["pushes"]) if ap.size else np.zeros(0)
    points = [(k, float(np.median(ap["apply"][ap["pushes"] == k]))) for k in counts if k > 0]
    if not points:
        return Apply()
    if len(points) == 1:
        k, t = points[0]
        return Apply(fixed=max(0.0, t - k * moving), per_push=0.0)
    k, t = np.array(points).T
    per_push, fixed = np.polyfit(k, t, 1)
    return Apply(fixed=max(0.0, float(fixed)), per_push=max(0.0, float(per_push) - moving))
