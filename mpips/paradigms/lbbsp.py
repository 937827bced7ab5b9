"""LB-BSP: load-balanced BSP by worker-adaptive batch sizes (Chen et al.).

BSP's gate and whole-round applies, with a fixed global batch X split every
round in proportion to the workers' predicted speeds, x_i = X v_i / sum_j v_j
(`mpips.paradigms.balance.allocate`), and every push weighted x_i / X: the servers' sum
sum_i x_i g_i / X of per-batch mean-loss gradients is the mean-loss gradient
of the round's X samples, so a round is one SGD step on X samples as in BSP.

Agreement without messages: every worker computes each round's whole split
from numbers all workers published. At the tick that ends round r, worker j
publishes (its predicted speed for round r+1, its compute seconds of round r)
in the extras pair of parity (r+1) % 2. Worker i computes round c's split
once its gate has passed, i.e. once every round c-1 push is applied, so every
worker has published its round-c pair. A fast worker may meanwhile have done
round c and published for round c+1, but into the other parity, and it cannot
tick again before i's round-c push is applied. Round 0 is an equal split.

Speed: v = batch / compute seconds of the worker's last iteration, compute
being forward/backward plus the emulated slowdown sleep (the `compute` column
of the iterations table): the part of a round that grows with the batch. Pull
and push move the whole parameter vector whatever the batch, and the gate wait
is what balancing removes, so neither belongs in a speed. The speed (and,
for NARX, the machine's CPU and memory utilisation) feeds the worker's own
predictor (`predictor`: ewma or narx).

Refinement (`lbbsp_refine`), for compute time not linear in batch size: from
round 2 on, every worker runs the same `BatchRefiner` on the previous split
and the published compute times, so the replicas stay identical. When the
refiner has settled (it stops moving) and the spread of compute times grows
past twice its epsilon again, the cluster changed: the split restarts from
the predictions and the refiner from its initial step.

Log: the iterations table's `batch` column is the split over time. Events:
`lbbsp_speed`, every worker every round (round, batch, compute, actual =
batch/compute, predicted = what this worker predicted for the round, next =
its prediction for the next round, cpu, mem: nan unless the predictor uses
them); `lbbsp_round`, from worker 0 when round r+1's gate opens (round r,
spread = latest minus earliest push time of round r, finish = the push
times, compute = the compute seconds, batches = the split).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..settings import MAX_COUNT, setting
from .balance import BatchRefiner, allocate
from .base import Options, Push
from .bsp import BSP
from .gates import Gate
from .predict import PREDICTORS, SpeedPredictor, make_predictor, utilisation
from .view import ClusterView


def published(view: ClusterView, round_: int) -> tuple[np.ndarray, np.ndarray]:
    """Every worker's (predicted speed for `round_`, compute seconds of
    `round_ - 1`), from the extras pair of the round's parity."""
    p = 2 * (round_ % 2)
    return view.extras[:, p].copy(), view.extras[:, p + 1].copy()


def round_push_times(view: ClusterView, round_: int) -> np.ndarray:
    """Each worker's push time of `round_` (nan if not in the view): a worker
    that has pushed round_ + 1 already keeps it as its previous push."""
    latest = view.clocks == round_ + 1
    previous = view.clocks == round_ + 2
    return np.where(latest, view.push_times[:, 0], np.where(previous, view.push_times[:, 1], np.nan))


@dataclass(frozen=True)
class LBBSPOptions(Options):
    global_batch: int = setting(0, "the global batch X; 0 = workers x batch-size", low=0, high=MAX_COUNT)
    predictor: str = setting("ewma", "the speed predictor", choices=PREDICTORS)
    batch_cap: int = setting(0, "largest batch of one worker; 0 = no cap", low=0, high=MAX_COUNT)
    lbbsp_refine: bool = setting(False, "after the first predicted split, move samples from the slowest "
                                        "to the fastest worker by measured compute times (time not "
                                        "linear in batch size)")


class LBBSP(BSP):
    name = "lbbsp"
    Options = LBBSPOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        options = self.options
        self.total = options.global_batch or num_workers * config.batch_size
        self.cap = options.batch_cap
        self.equal = allocate(self.total, np.ones(num_workers), self.cap)  # ConfigError at set-up
        self.refiner = BatchRefiner(self.total, cap=self.cap) if options.lbbsp_refine else None
        self.splits: dict[int, np.ndarray] = {}     # round -> split (the last two rounds)
        self.predictors: dict[int, SpeedPredictor] = {}     # worker -> its predictor (one per process)
        self.slots: dict[int, list[float]] = {}     # worker -> its four published extras
        self.predicted: dict[int, float] = {}       # worker -> its prediction for its next round

    # the split ----------------------------------------------------------------
    def split(self, view: ClusterView, round_: int) -> np.ndarray:
        """Batch sizes of every worker in `round_`; the same in every worker."""
        if round_ in self.splits:
            return self.splits[round_]
        if round_ == 0:
            x = self.equal
        else:
            speeds, times = published(view, round_)
            previous = self.splits.get(round_ - 1)
            if self.refiner is None or round_ == 1 or previous is None:
                x = allocate(self.total, speeds, self.cap)
                if self.refiner is not None:
                    self.refiner.reset()
            elif self.refiner.settled and self.refiner.spread(times) > 2 * self.refiner.epsilon:
                self.refiner.reset()
                x = allocate(self.total, speeds, self.cap)
            else:
                x = self.refiner.update(previous, times)
        self.splits = {r: s for r, s in self.splits.items() if r == round_ - 1}
        self.splits[round_] = x
        return x

    def batch_size(self, worker, view):
        return int(self.split(view, view.clock(worker))[worker])

    def round_samples(self):
        return self.total

    @property
    def round_setting(self):
        return "global_batch" if self.options.global_batch else "batch_size"

    def iterations_per_epoch(self, num_train):
        return max(1, num_train // self.total)

    def push(self, worker, view, *, batch_size, read_updates, read_path_length, distance=math.nan):
        # Sample-weighted mean: the round's sum is sum_i x_i g_i / X.
        return Push(scale=batch_size / self.total)

    def gate(self, worker, view):
        gate = super().gate(worker, view)
        c = view.clock(worker)
        if worker == 0 and gate.ok and c >= 1 and c - 1 in self.splits:
            # Every push of round c-1 is in: log how unevenly the round ended.
            finish = round_push_times(view, c - 1)
            _, times = published(view, c)
            gate = Gate(True, event={
                "kind": "lbbsp_round", "round": c - 1,
                "spread": float(np.nanmax(finish) - np.nanmin(finish)),
                "finish": finish.tolist(), "compute": times.tolist(),
                "batches": self.splits[c - 1].tolist()})
        return gate

    # this worker's speed --------------------------------------------------------
    def measured(self, worker, *, clock, batch, compute):
        predictor = self.predictors.get(worker)
        if predictor is None:
            predictor = make_predictor(self.options.predictor, seed=self.config.seed + worker)
            self.predictors[worker] = predictor
        slots = self.slots.setdefault(worker, [0.0] * 4)
        speed = batch / compute if compute > 0 else math.nan
        # psutil costs ~0.1-0.5 ms on the round's critical path: only for a predictor that uses it.
        cpu, mem = utilisation() if predictor.exogenous else (math.nan, math.nan)
        predictor.observe(speed, cpu, mem)
        nxt = predictor.predict()
        nxt = nxt if math.isfinite(nxt) and nxt > 0 else 0.0   # 0: unknown to allocate()
        p = 2 * ((clock + 1) % 2)
        slots[p:p + 2] = [nxt, compute]
        event = {"kind": "lbbsp_speed", "round": clock, "batch": batch, "compute": compute,
                 "actual": speed, "predicted": self.predicted.get(worker, math.nan),
                 "next": nxt, "cpu": cpu, "mem": mem}
        self.predicted[worker] = nxt
        return event

    def extras(self, worker, clock):
        return tuple(self.slots.get(worker, ()))

    def state(self):
        # The slots above all: a tick rewrites both pairs, and zeros in the
        # pair a slower worker has yet to read would split its round differently.
        # Predictors are not kept: they learn again from the first round.
        return {"splits": dict(self.splits), "slots": dict(self.slots),
                "predicted": dict(self.predicted),
                "refiner": None if self.refiner is None else self.refiner.state()}

    def load_state(self, state):
        self.splits = {int(r): np.asarray(x, dtype=np.int64) for r, x in state["splits"].items()}
        self.slots = {int(w): list(v) for w, v in state["slots"].items()}
        self.predicted = {int(w): float(v) for w, v in state["predicted"].items()}
        if self.refiner is not None and state["refiner"] is not None:
            self.refiner.load_state(state["refiner"])
