"""What a paradigm sees: a read-only snapshot of the shared state (`ClusterView`),
and the global slots of the control table that paradigms read and set."""
from __future__ import annotations

import numpy as np

# Sync-Switch modes, kept in the control window's MODE slot.
MODE_BSP = 0
MODE_ASP = 1

# Offsets of the global control slots `server_control` may set (the
# runtime's state.G names the same slots; paradigms import nothing of it).
SLOT_MODE = 0
SLOT_MODE_CLOCK = 1
SLOT_EXTRA0 = 2     # paradigm-specific
SLOT_EXTRA1 = 3
EXTRAS = 6         # the values a worker publishes with every tick (Paradigm.extras)
# In a group's control table (a paradigm with a second level of servers,
# `Paradigm.group_servers`): the group's speed rank, which its group server writes.
SLOT_GROUP_SPEED_RANK = SLOT_EXTRA0



class ClusterView:
    """A snapshot of the shared state, as every paradigm sees it.

    Times are seconds since the run's common start. Arrays are indexed by
    worker (0..W-1) and must not be modified. The running job's views are
    `state.TableView`s, which compute each field from the control table
    on first use (a gate poll reads two or three of them).
    """

    def __init__(self, *, now: float,
                 clocks: np.ndarray,          # (W,) int: pushes completed by each worker
                 applied: np.ndarray,         # (W,) int: each worker's pushes applied by every server
                 push_times: np.ndarray,      # (W, 2) float: latest, previous push time (nan = none yet)
                 iter_times: np.ndarray,      # (W,) float: last iteration's busy time (nan = none yet)
                 done: np.ndarray,            # (W,) bool: worker pushed its last iteration
                 updates: int,                # pushes applied by the servers (min over servers)
                 mode: int = MODE_BSP,        # MODE_BSP or MODE_ASP (Sync-Switch)
                 mode_clock: int = 0,         # clock at which `mode` takes effect (-1: being decided)
                 path_length: float = 0.0,    # sum of norms of applied updates (VSGD bound)
                 update_norm_ema: float = 0.0,   # EMA of one full update's norm (servers' root-sum-square)
                 extras: np.ndarray | None = None,   # (W, EXTRAS) float: what each worker's extras() published
                 slots: tuple[float, float] = (0.0, 0.0),   # the global slots SLOT_EXTRA0, SLOT_EXTRA1
                 steps: int = 0,              # optimizer steps taken by the servers (min over servers)
                 server_steps: np.ndarray | None = None,     # (S,) int: each server's steps
                 server_applied: np.ndarray | None = None,   # (S, W) int: each server's applied counts
                 server: int = 0):            # the server reading it (a server's hooks; 0 on a worker)
        self.now = now
        self.server = server
        self.clocks, self.applied, self.done = clocks, applied, done
        self.push_times, self.iter_times = push_times, iter_times
        self.updates, self.mode, self.mode_clock = updates, mode, mode_clock
        self.path_length, self.update_norm_ema = path_length, update_norm_ema
        self.extras = np.zeros((len(clocks), EXTRAS)) if extras is None else extras
        self.slots = slots
        self.steps = steps
        # not given (a view made by hand): one server, whose steps and applied counts these are
        self.server_steps = np.array([steps]) if server_steps is None else server_steps
        self.server_applied = applied[None, :] if server_applied is None else server_applied

    @property
    def num_workers(self) -> int:
        return len(self.clocks)

    def clock(self, worker: int) -> int:
        """One worker's clock (what a polled gate reads first)."""
        return int(self.clocks[worker])

    def applied_to(self, worker: int) -> int:
        """One worker's pushes applied by every server (read-your-writes)."""
        return int(self.applied[worker])

    def progress(self) -> tuple[list, list, list]:
        """(clocks, applied, done) as Python lists, the form a polled gate
        reads fastest (numbers may be floats holding integers; not to be
        modified, like the arrays)."""
        return self.clocks.tolist(), self.applied.tolist(), self.done.tolist()

    def c_min(self, of: np.ndarray | None = None) -> int:
        """Minimum clock over workers still running (done workers never block)."""
        c = self.clocks if of is None else of
        active = c[~self.done]
        return int(active.min()) if active.size else int(c.max())
