"""A run's budget, and where a worker's next batch comes from (docs/paradigms.md,
"What a run's budget means").

global (the default): `--epochs E` is E passes over the whole training set
by all workers together, E x N samples. The training set is one stream
(data.GlobalStream); a worker claims the next slice of its batch size from a
counter in the control table (`Fetch_and_op`), so a fast worker does more
iterations than a slow one and each sample is used once per epoch whatever
the speeds. The claim comes after the gate: a worker stopped at its gate for
a checkpoint holds no claimed samples, and the counter is saved with the
table. The last claim is cut to what is left (a smaller last batch, whose
mean gradient is pushed with the usual scale); a claim after that returns
nothing and the worker is done. Under BSP-like paradigms the last round is
therefore the workers that still got samples. `--time-limit T` also ends the
budget: no claim succeeds after T seconds of training.

per-worker: every worker runs the same number of iterations on its own shard
(data.WorkerShard), as in clock-based comparisons; an asynchronous run then
lasts as long as its slowest worker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...training.data import GlobalStream, WorkerShard


@dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor
    start: int          # position in the global stream; -1 under a per-worker budget
    epoch: int          # 1-based epoch of the batch's first sample (GDTopK's schedule)
    last: bool          # known to be this worker's last batch
    flush: bool         # send the compressor's residual with this push (epoch end)

    @property
    def size(self) -> int:
        return self.y.shape[0]   # (len() of a tensor is a Python call in torch)


class SharedBudget:
    """A worker's claims on the global sample budget."""

    def __init__(self, stream: GlobalStream, total: int, fetch_add: Callable[[int], float], *,
                 time_limit: float = 0.0, now: Callable[[], float] = lambda: 0.0):
        self.stream, self.total = stream, int(total)
        self.fetch_add, self.time_limit, self.now = fetch_add, time_limit, now
        self.epoch_seen = 0     # epoch of this worker's previous batch's last sample

    def take(self, n: int) -> Batch | None:
        if self.time_limit and self.now() >= self.time_limit:
            return None
        start = int(self.fetch_add(n))
        if start >= self.total:
            return None
        n = min(n, self.total - start)
        end_epoch = (start + n - 1) // len(self.stream)
        # Error feedback's residual goes out once per epoch: with this worker's
        # first push whose samples reach into a later epoch, and with its last.
        last = start + n == self.total
        flush = end_epoch > self.epoch_seen or last
        self.epoch_seen = end_epoch
        x, y = self.stream.batch(start, n)
        return Batch(x, y, start, start // len(self.stream) + 1, last, flush)

    def state(self) -> dict:
        return {"epoch_seen": self.epoch_seen}

    def load_state(self, state: dict) -> None:
        self.epoch_seen = int(state["epoch_seen"])


class ShardBudget:
    """`iterations` batches from this worker's own shard."""

    def __init__(self, shard: WorkerShard, iterations: int, iterations_per_epoch: int):
        self.shard, self.iterations, self.ipe = shard, iterations, iterations_per_epoch
        self.taken = 0

    def take(self, n: int) -> Batch | None:
        if self.taken >= self.iterations:
            return None
        it = self.taken
        self.taken += 1
        x, y = self.shard.next_batch(n)
        last = it == self.iterations - 1
        return Batch(x, y, -1, it // self.ipe + 1, last, (it + 1) % self.ipe == 0 or last)

    def state(self) -> dict:
        return {"taken": self.taken, "shard": self.shard.state()}

    def load_state(self, state: dict) -> None:
        self.taken = int(state["taken"])
        self.shard.load_state(state["shard"])
