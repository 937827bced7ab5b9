"""VSGD: SSP or ASP gating, with each push's step damped by its value staleness.

v = ||w_now - w_read|| / C counts the "average updates" the parameters moved
while the worker computed; the push's learning rate becomes eta / max(1, v)
(or eta / (1 + lambda v)), applied as a factor on the push scale on top of
the base 1/W. Two measures of the distance (docs/paradigms.md, VSGD):

- bound: the path length, the servers' running sum of applied update norms,
  read at pull and at push. Free (it is in the control table). By the
  triangle inequality it is >= the exact distance.
- exact: ||w_now - w_read||, measured by the worker with one extra pull
  (`wants_exact_distance`). With it both are logged, so the logs show how
  tight the bound is.

Units with several servers: the path length is summed over the servers'
shards, and C (`ClusterView.update_norm_ema`) combines the servers' EMAs of
their shard norms as sqrt(sum of squares) (`norm_of_shards`), the norm of
one full-vector update, so v_exact counts full updates. The same C divides
both measures, so the bound stays an upper bound; it only loosens, by up to
sqrt(servers), since the sum of one update's shard norms is at most sqrt(S)
times its full norm.

Both distances are taken at the push, not when the server applies it (steps
in between are missed by both alike). The bound holds with steps running
concurrently too: the path read before the pull counts only steps fully
written into w_read, and after the extra pull the worker waits for any step a
server had begun (S.BEGUN) before it reads the path (worker.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..settings import MAX_STALENESS, setting
from .base import Options, Paradigm, Push
from .gates import bounded_gate, own_writes_gate
from .value_staleness import VSGD_RULES, lr_scale, value_staleness

GATES = ("ssp", "asp")
VALUE_MEASURES = ("exact", "bound")


@dataclass(frozen=True)
class VSGDOptions(Options):
    gate: str = setting("ssp", "the gating underneath", choices=GATES)
    staleness: int = setting(3, "gate ssp: the bound s (c_i - c_min <= s)", low=0, high=MAX_STALENESS)
    value_measure: str = setting("bound", "the value staleness measure", choices=VALUE_MEASURES)
    vsgd_rule: str = setting("max", "lr/max(1,v) or lr/(1+lambda*v)", choices=VSGD_RULES)
    vsgd_lambda: float = setting(1.0, "lambda of the linear rule", low=0.0)


class VSGD(Paradigm):
    name = "vsgd"
    Options = VSGDOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        options = self.options
        self.bounded = options.gate == "ssp"
        self.staleness = options.staleness
        self.exact = options.value_measure == "exact"
        self.wants_exact_distance = self.exact
        self.rule = options.vsgd_rule
        self.lam = options.vsgd_lambda

    def gate(self, worker, view):
        return bounded_gate(worker, view, self.staleness) if self.bounded else own_writes_gate(worker, view)

    def push(self, worker, view, *, batch_size, read_updates, read_path_length,
             distance=math.nan):
        base = super().push(worker, view, batch_size=batch_size, read_updates=read_updates,
                            read_path_length=read_path_length, distance=distance)
        c = view.update_norm_ema
        # Each server's path only grows; max() absorbs float rounding of the sum.
        bound = value_staleness(max(0.0, view.path_length - read_path_length), c)
        exact = value_staleness(distance, c) if self.exact else math.nan
        scale = lr_scale(exact if self.exact else bound, self.rule, self.lam)
        return Push(scale=base.scale * scale, lr_scale=scale,
                    info={"value_staleness": exact, "value_staleness_bound": bound})
