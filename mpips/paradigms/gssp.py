"""GSSP, grouping SSP with GDTopK (IEEE TCC 2022): the decisions.

Workers of similar speed form groups, each with a group server (mpips/runtime/job/levels.py
sets up the two levels of servers). A worker sees only its own group's
control table, in which the workers of other groups read as done with clock 0
(the rule by which finished workers never block), so the plain SSP gate with
the group bound `group_staleness` is exactly "SSP inside the group", and
nothing gates one group on another. Pushes keep the default 1/W scale: every
push of every group reaches the global parameters once, as under ASP.

GDTopK's upload ratio: a group's speed rank (0 = fastest), measured by its
group server and published in the group table's slot `SLOT_GROUP_SPEED_RANK`, and
the epoch pick (c, rho) from the schedule of docs/paradigms.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import MAX_STALENESS, setting
from .base import Paradigm
from .compress import DEFAULT_SCHEDULE, ratio_schedule
from .gates import Gate, bounded_gate
from .grouping import GroupOptions
from .view import SLOT_EXTRA0, SLOT_GROUP_SPEED_RANK, ClusterView


@dataclass(frozen=True)
class GSSPOptions(GroupOptions):
    group_staleness: int = setting(3, "the SSP bound inside a group", low=0, high=MAX_STALENESS)


class GSSP(Paradigm):
    name = "gssp"
    Options = GSSPOptions

    @classmethod
    def group_servers(cls, config) -> int:
        return config.options.groups

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.staleness = self.options.group_staleness
        self.groups = self.options.groups
        self.schedule = DEFAULT_SCHEDULE

    def gate(self, worker: int, view: ClusterView) -> Gate:
        return bounded_gate(worker, view, self.staleness)

    def upload_ratio(self, epoch: int, speed_rank: int) -> tuple[float, float]:
        """GDTopK's (c, rho) for a group of this speed rank in this epoch (1-based)."""
        return ratio_schedule(epoch, speed_rank, self.groups, self.schedule)

    def compression(self, worker, view, *, epoch):
        if self.config.compressor != "gdtopk":
            return None
        return self.upload_ratio(epoch, int(view.slots[SLOT_GROUP_SPEED_RANK - SLOT_EXTRA0]))
