"""LB-BSP without MPI: replicas of the paradigm, one per worker as in a real
run, driven through rounds on a constructed control table, must compute the
same split every round, even when fast workers publish for the next round
before slow ones have read this one."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from mpips.config import Config, ConfigError
from mpips.paradigms import lbbsp as lbbsp_module
from mpips.paradigms import make_paradigm
from mpips.paradigms.balance import allocate
from mpips.paradigms.lbbsp import published, round_push_times
from mpips.paradigms.view import EXTRAS, ClusterView


@pytest.fixture(autouse=True)
def fixed_utilisation(monkeypatch):
    # The machine's load must not make replicas (or reruns) differ.
    monkeypatch.setattr(lbbsp_module, "utilisation", lambda: (0.5, 0.3))


def lbbsp(workers=4, **kw):
    return make_paradigm(Config(paradigm="lbbsp", **kw), workers)


class Cluster:
    """W paradigm replicas over one control table (clocks, applied counts,
    push times, extras), advanced the way the runtime does it."""

    def __init__(self, workers, seconds, transfer=lambda i, c: 0.0, **config):
        self.w = workers
        self.seconds = seconds                  # (worker, round, batch) -> compute seconds
        self.transfer = transfer                # (worker, round) -> pull + push seconds
        self.replicas = [lbbsp(workers, **config) for _ in range(workers)]
        self.clocks = np.zeros(workers, np.int64)
        self.applied = np.zeros(workers, np.int64)
        self.push_times = np.full((workers, 2), math.nan)
        self.extras = np.zeros((workers, EXTRAS))
        self.now = 0.0
        self.splits = []                        # per round: the split each worker computed
        self.stale_would_differ = 0             # rounds where reading the newest pair would not agree

    def view(self):
        w = self.w
        return ClusterView(now=self.now, clocks=self.clocks.copy(), applied=self.applied.copy(),
                           push_times=self.push_times.copy(), iter_times=np.full(w, math.nan),
                           done=np.zeros(w, bool),
                           updates=int(self.applied.sum()), extras=self.extras.copy())

    def start(self, i, c):
        view = self.view()
        p = self.replicas[i]
        assert p.gate(i, view).ok
        batch = p.batch_size(i, view)
        split = p.split(view, c)
        assert batch == split[i]
        newest = np.where((self.clocks == c + 1)[:, None], self.extras[:, [3 * ((c + 1) % 2)]],
                          self.extras[:, [3 * (c % 2)]])[:, 0]
        if c >= 1 and not np.array_equal(allocate(p.total, newest, p.cap), split):
            self.stale_would_differ += 1
        return batch, split

    def finish(self, i, c, batch):
        t, fixed = self.seconds(i, c, batch), self.transfer(i, c)
        self.now += t + fixed
        p = self.replicas[i]
        event = p.measured(i, clock=c, batch=batch, compute=t, transfer=fixed)
        assert event["kind"] == "lbbsp_speed" and event["round"] == c
        self.extras[i, :] = 0.0
        self.extras[i, :len(p.extras(i, c + 1))] = p.extras(i, c + 1)
        self.clocks[i] += 1
        self.push_times[i] = [self.now, self.push_times[i, 0]]

    def round(self, c, rng, first=None):
        """Round c: a random half of the workers (led by `first`) starts and
        finishes (and publishes for round c+1) before the others read the view."""
        order = rng.permutation(self.w)
        if first is not None:
            order = np.array([first] + [i for i in order if i != first])
        early = order[: self.w // 2]
        splits = {}
        for i in early:
            batch, splits[i] = self.start(i, c)
            self.finish(i, c, batch)
        late = [(i, *self.start(i, c)) for i in order[self.w // 2:]]
        for i, batch, split in late:
            splits[i] = split
            self.finish(i, c, batch)
        self.applied = self.clocks.copy()       # the server applies the complete round
        self.splits.append(np.array([splits[i] for i in range(self.w)]))


def linear_time(speeds, rng, noise=0.2):
    """Compute seconds = batch / speed, the speed varying by `noise` each round."""
    jitter = {}

    def seconds(i, c, batch):
        key = (i, c)
        if key not in jitter:
            jitter[key] = 1.0 + noise * rng.uniform(-1, 1)
        return batch / (speeds[i] * jitter[key])
    return seconds


def jittered_links(seconds, rng, noise=0.3):
    """Pull + push seconds of each worker, varying by `noise` each round."""
    return lambda i, c: seconds[i] * (1.0 + noise * rng.uniform(-1, 1))


@pytest.mark.parametrize("predictor", ["ewma", "narx"])
@pytest.mark.parametrize("refine", [False, True])
@pytest.mark.parametrize("transfer", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_every_worker_computes_the_same_split(predictor, refine, transfer, seed):
    rng = np.random.default_rng(seed)
    cluster = Cluster(4, linear_time([4000, 4000, 2000, 1000], rng),
                      jittered_links([0.002, 0.02, 0.002, 0.002], rng), predictor=predictor,
                      global_batch=256, lbbsp_refine=refine, lbbsp_transfer=transfer, seed=seed)
    for c in range(30):
        cluster.round(c, rng)
    for c, splits in enumerate(cluster.splits):
        assert (splits == splits[0]).all(), f"round {c}: workers disagree:\n{splits}"
        assert splits[0].sum() == 256 and (splits[0] >= 1).all()
    # The set-up really tests the parity slots: reading each worker's newest
    # prediction instead would have given a different split in some rounds.
    assert cluster.stale_would_differ > 0


@pytest.mark.parametrize("refine", [False, True])
def test_a_replica_restored_from_its_state_keeps_agreeing(refine):
    # A checkpoint between rounds: worker 2's process restarts from state().
    rng = np.random.default_rng(4)
    cluster = Cluster(4, linear_time([4000, 4000, 2000, 1000], rng), global_batch=256,
                      lbbsp_refine=refine)
    for c in range(12):
        cluster.round(c, rng)
    restored = lbbsp(4, global_batch=256, lbbsp_refine=refine)
    restored.load_state(copy.deepcopy(cluster.replicas[2].state()))
    cluster.replicas[2] = restored
    for c in range(12, 30):
        cluster.round(c, rng, first=2 if c == 12 else None)   # others read after its tick
    assert all((s == s[0]).all() and s[0].sum() == 256 for s in cluster.splits)


def test_round_zero_is_even_and_the_split_follows_speeds():
    rng = np.random.default_rng(0)
    speeds = np.array([4000, 4000, 2000, 1000])
    cluster = Cluster(4, linear_time(speeds, rng, noise=0.0), global_batch=220)
    for c in range(5):
        cluster.round(c, rng)
    assert cluster.splits[0][0].tolist() == [55, 55, 55, 55]
    assert cluster.splits[-1][0].tolist() == allocate(220, speeds).tolist() == [80, 80, 40, 20]


def test_refiner_balances_time_that_is_not_linear_in_batch():
    # compute seconds = a_i * batch^1.5: a speed-proportional split is off;
    # the replicated refiner brings the compute times within its epsilon.
    a = np.array([1e-5, 1.5e-5, 3e-5, 6e-5])
    rng = np.random.default_rng(1)
    cluster = Cluster(4, lambda i, c, b: a[i] * b ** 1.5, global_batch=512, lbbsp_refine=True)
    for c in range(60):
        cluster.round(c, rng)
    final = cluster.splits[-1][0]
    t = a * final ** 1.5
    assert (t.max() - t.min()) / t.max() <= 0.05
    t_linear = a * allocate(512, 1.0 / a) ** 1.5          # the first, predicted split
    assert (t_linear.max() - t_linear.min()) / t_linear.max() > 0.2
    assert all((s == s[0]).all() for s in cluster.splits)


def test_push_weights_are_batch_over_global_batch():
    p = lbbsp(global_batch=100)
    scales = [p.push(i, None, batch_size=b, read_updates=0, read_path_length=0.0).scale
              for i, b in enumerate([10, 20, 30, 40])]
    assert scales == pytest.approx([0.1, 0.2, 0.3, 0.4]) and sum(scales) == pytest.approx(1.0)


def test_global_batch_defaults_and_sets_the_epoch():
    p = lbbsp(batch_size=16)
    assert p.total == 64 and p.iterations_per_epoch(1438) == 1438 // 64
    assert lbbsp(global_batch=500).iterations_per_epoch(1438) == 2


@pytest.mark.parametrize("kw, needle", [({"global_batch": 3}, "number of workers"),
                                        ({"global_batch": 100, "batch_cap": 20}, "batch_cap")])
def test_infeasible_global_batch_fails_at_construction(kw, needle):
    with pytest.raises(ConfigError) as e:
        lbbsp(**kw)
    assert e.value.field == "global_batch" and needle in str(e.value)


def test_round_event_reports_the_spread_of_push_times():
    rng = np.random.default_rng(2)
    cluster = Cluster(4, linear_time([4000, 4000, 2000, 1000], rng), global_batch=64)
    cluster.round(0, rng)
    # worker 3 already finished round 1 too: its round-0 push is its previous one
    round0 = cluster.push_times[:, 0].copy()
    view = cluster.view()
    cluster.finish(3, 1, int(cluster.replicas[3].batch_size(3, view)))
    view = cluster.view()
    assert np.array_equal(round_push_times(view, 0), round0)
    gate = cluster.replicas[0].gate(0, view)
    assert gate.ok and gate.event["kind"] == "lbbsp_round" and gate.event["round"] == 0
    assert gate.event["spread"] == pytest.approx(round0.max() - round0.min())
    assert gate.event["batches"] == [16, 16, 16, 16]
    assert gate.event["compute"] == published(view, 1)[1].tolist()
    assert cluster.replicas[1].gate(1, view).event is None      # worker 0 logs it alone


@pytest.mark.parametrize("predictor", ["ewma", "narx"])
def test_speed_event_pairs_prediction_with_measurement(predictor):
    p = lbbsp(predictor=predictor)
    first = p.measured(2, clock=0, batch=16, compute=0.01, transfer=0.004)
    assert first["actual"] == pytest.approx(1600) and math.isnan(first["predicted"])
    assert first["transfer"] == first["next_transfer"] == 0.004
    second = p.measured(2, clock=1, batch=32, compute=0.01, transfer=0.002)
    assert second["next_transfer"] == pytest.approx(0.003)      # the EWMA's
    assert second["predicted"] == pytest.approx(first["next"]) and second["actual"] == pytest.approx(3200)
    if predictor == "narx":      # the only one that uses the load
        assert (second["cpu"], second["mem"]) == (0.5, 0.3)
    else:
        assert math.isnan(second["cpu"]) and math.isnan(second["mem"])


def test_with_transfer_a_worker_behind_a_slow_link_gets_fewer_samples_and_rounds_end_together():
    # Equal speeds; worker 1's pull + push take 40 ms of a round, the others' 4 ms.
    rng = np.random.default_rng(5)
    links = [0.004, 0.04, 0.004, 0.004]
    speeds = [4000] * 4
    kw = dict(global_batch=512)
    compute_only = Cluster(4, linear_time(speeds, rng, noise=0.0), lambda i, c: links[i], **kw)
    balanced = Cluster(4, linear_time(speeds, rng, noise=0.0), lambda i, c: links[i], lbbsp_transfer=True, **kw)
    for c in range(6):
        compute_only.round(c, rng)
        balanced.round(c, rng)
    assert compute_only.splits[-1][0].tolist() == [128] * 4          # the paper's rule: compute alone
    x = balanced.splits[-1][0]
    # T = (X + sum v t) / sum v = (512 + 4000 * 0.052) / 16000 = 45 ms: x_i = v (T - t_i)
    assert x.tolist() == [164, 20, 164, 164]
    ends = x / 4000 + np.array(links)
    assert ends.max() - ends.min() < 1 / 4000        # within one sample's compute
    # the round's time, its slowest worker's, shrinks from 72 ms to 45 ms
    assert (128 / 4000 + 0.04) == pytest.approx(0.072) and ends.max() == pytest.approx(0.045, abs=1e-3)


def test_a_checkpoint_of_the_two_pair_layout_loads_with_transfer_unknown():
    p = lbbsp(lbbsp_transfer=True)
    p.load_state({"splits": {}, "slots": {0: [1000.0, 0.01, 2000.0, 0.02]}, "predicted": {}, "refiner": None})
    assert p.extras(0, 1) == (1000.0, 0.01, -1.0, 2000.0, 0.02, -1.0)
