"""LB-BSP: load-balanced BSP by worker-adaptive batch sizes (Chen et al.).

BSP's gate and whole-round applies, with a fixed global batch X split every
round in proportion to the workers' predicted speeds, x_i = X v_i / sum_j v_j
(`mpips.paradigms.balance.allocate`), and every push weighted x_i / X: the servers' sum
sum_i x_i g_i / X of per-batch mean-loss gradients is the mean-loss gradient
of the round's X samples, so a round is one SGD step on X samples as in BSP.

Agreement without messages: every worker computes each round's whole split
from numbers all workers published. At the tick that ends round r, worker j
publishes (its predicted speed for round r+1, its compute seconds of round r,
its predicted transfer seconds for round r+1) in the extras triple of parity
(r+1) % 2. Worker i computes round c's split once its gate has passed, i.e.
once every round c-1 push is applied, so every worker has published its
round-c triple. A fast worker may meanwhile have done round c and published
for round c+1, but into the other parity, and it cannot tick again before
i's round-c push is applied. Round 0 is an equal split.

Speed: v = batch / compute seconds of the worker's last iteration, compute
being forward/backward plus the emulated slowdown sleep (the `compute` column
of the iterations table): the part of a round that grows with the batch. Pull
and push move the whole parameter vector whatever the batch, and the gate wait
is what balancing removes, so neither belongs in a speed. The speed (and,
for NARX, the machine's CPU and memory utilisation) feeds the worker's own
predictor (`predictor`: ewma or narx).

Transfer (`lbbsp_transfer`): the seconds of a worker's iteration outside its
compute (pull, push), an EWMA of them, are fixed costs of its round. With
the option the split makes compute plus transfer end together,
x_i = v_i (T - t_i) (`allocate`'s `fixed`): a worker behind a slower link,
whose pulls and pushes take longer, computes on fewer samples, as a slower
worker does. Without it (the default) the split balances compute alone, as
in the paper, whose workers share one network.

Refinement (`lbbsp_refine`), for compute time not linear in batch size: from
round 2 on, every worker runs the same `BatchRefiner` on the previous split
and the published compute times (plus transfer times with `lbbsp_transfer`),
so the replicas stay identical. When the refiner has settled (it stops
moving) and the spread of those times grows past twice its epsilon again,
the cluster changed: the split restarts from the predictions and the
refiner from its initial step.

Log: the iterations table's `batch` column is the split over time. Events:
`lbbsp_speed`, every worker every round (round, batch, compute, actual =
batch/compute, predicted = what this worker predicted for the round, next =
its prediction for the next round, cpu, mem: nan unless the predictor uses
them, transfer = pull and push seconds, next_transfer = their EWMA);
`lbbsp_round`, from worker 0 when round r+1's gate opens (round r, spread =
latest minus earliest push time of round r, finish = the push times,
compute = the compute seconds, transfer = the published transfer
predictions for round r+1, batches = the split).
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
from .predict import EWMA, PREDICTORS, SpeedPredictor, make_predictor, utilisation
from .view import ClusterView


def published(view: ClusterView, round_: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every worker's (predicted speed for `round_`, compute seconds of
    `round_ - 1`, predicted transfer seconds for `round_`: < 0 unknown), from
    the extras triple of the round's parity."""
    p = 3 * (round_ % 2)
    return view.extras[:, p].copy(), view.extras[:, p + 1].copy(), view.extras[:, p + 2].copy()


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
    lbbsp_transfer: bool = setting(False, "split so that compute plus each worker's measured pull and "
                                          "push end together: a worker behind a slower link gets "
                                          "fewer samples")


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
        self.transfers: dict[int, EWMA] = {}        # worker -> the EWMA of its pull + push seconds
        self.slots: dict[int, list[float]] = {}     # worker -> its six published extras
        self.predicted: dict[int, float] = {}       # worker -> its prediction for its next round

    # the split ----------------------------------------------------------------
    def split(self, view: ClusterView, round_: int) -> np.ndarray:
        """Batch sizes of every worker in `round_`; the same in every worker."""
        if round_ in self.splits:
            return self.splits[round_]
        if round_ == 0:
            x = self.equal
        else:
            speeds, times, transfers = published(view, round_)
            fixed = None
            if self.options.lbbsp_transfer:
                fixed = transfers
                times = times + np.maximum(transfers, 0.0)
            previous = self.splits.get(round_ - 1)
            if self.refiner is None or round_ == 1 or previous is None:
                x = allocate(self.total, speeds, self.cap, fixed)
                if self.refiner is not None:
                    self.refiner.reset()
            elif self.refiner.settled and self.refiner.spread(times) > 2 * self.refiner.epsilon:
                self.refiner.reset()
                x = allocate(self.total, speeds, self.cap, fixed)
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
            _, times, transfers = published(view, c)
            gate = Gate(True, event={
                "kind": "lbbsp_round", "round": c - 1,
                "spread": float(np.nanmax(finish) - np.nanmin(finish)),
                "finish": finish.tolist(), "compute": times.tolist(), "transfer": transfers.tolist(),
                "batches": self.splits[c - 1].tolist()})
        return gate

    # this worker's speed --------------------------------------------------------
    def measured(self, worker, *, clock, batch, compute, transfer):
        predictor = self.predictors.get(worker)
        if predictor is None:
            predictor = make_predictor(self.options.predictor, seed=self.config.seed + worker)
            self.predictors[worker] = predictor
        slots = self.slots.setdefault(worker, [0.0, 0.0, -1.0] * 2)
        speed = batch / compute if compute > 0 else math.nan
        # psutil costs ~0.1-0.5 ms on the round's critical path: only for a predictor that uses it.
        cpu, mem = utilisation() if predictor.exogenous else (math.nan, math.nan)
        predictor.observe(speed, cpu, mem)
        nxt = predictor.predict()
        nxt = nxt if math.isfinite(nxt) and nxt > 0 else 0.0   # 0: unknown to allocate()
        fixed = self.transfers.setdefault(worker, EWMA())
        fixed.observe(transfer)
        next_transfer = fixed.predict()
        next_transfer = next_transfer if math.isfinite(next_transfer) else -1.0   # < 0: unknown
        p = 3 * ((clock + 1) % 2)
        slots[p:p + 3] = [nxt, compute, next_transfer]
        event = {"kind": "lbbsp_speed", "round": clock, "batch": batch, "compute": compute,
                 "actual": speed, "predicted": self.predicted.get(worker, math.nan),
                 "next": nxt, "cpu": cpu, "mem": mem, "transfer": transfer, "next_transfer": next_transfer}
        self.predicted[worker] = nxt
        return event

    def extras(self, worker, clock):
        return tuple(self.slots.get(worker, ()))

    def state(self):
        # The slots above all: a tick rewrites both triples, and zeros in the
        # triple a slower worker has yet to read would split its round differently.
        # Predictors (speed and transfer) are not kept: they learn again from the first round.
        return {"splits": dict(self.splits), "slots": dict(self.slots),
                "predicted": dict(self.predicted),
                "refiner": None if self.refiner is None else self.refiner.state()}

    def load_state(self, state):
        self.splits = {int(r): np.asarray(x, dtype=np.int64) for r, x in state["splits"].items()}
        # an older checkpoint's pairs (speed, compute) by parity: transfer unknown
        self.slots = {int(w): list(v) if len(v) == 6 else [*v[:2], -1.0, *v[2:], -1.0]
                      for w, v in state["slots"].items()}
        self.predicted = {int(w): float(v) for w, v in state["predicted"].items()}
        if self.refiner is not None and state["refiner"] is not None:
            self.refiner.load_state(state["refiner"])
