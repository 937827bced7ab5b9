"""The run log's schema: the tables of a rank file, their columns and types,
and where a rank's file is (docs/log-schema.md documents every column).

    run.h5          configuration, layout, versions, links to the rank files,
                    and (at the end) the final parameters and the run's status
    rank-<r>.h5     one per writing rank: tables `iterations` (workers),
                    `applies` and `evaluations` (servers), `events` (all),
                    `exchanges` (GSSP group servers), `pushes` (servers
                    under an async rule)
"""
from __future__ import annotations

import os

import h5py
import numpy as np

ITERATION = np.dtype([
    ("worker", "i4"), ("iteration", "i8"), ("clock", "i8"), ("clock_gap", "i8"),
    ("start", "f8"), ("wait", "f8"), ("pull", "f8"), ("compute", "f8"), ("slowdown", "f8"),
    ("push", "f8"), ("batch", "i4"), ("scale", "f4"), ("lr_scale", "f4"),
    ("staleness", "i8"), ("value_staleness", "f4"), ("value_staleness_bound", "f4"),
    ("bytes_sent", "i8"), ("bytes_dense", "i8"), ("loss", "f4"), ("rejected", "i1"),
    ("sample", "i8"), ("overrun", "i1"), ("h2d", "f8"), ("d2h", "f8"),
])
# Columns added since a table was first written: a log that predates them reads them as 0.
ADDED = {"iterations": ("h2d", "d2h")}
APPLY = np.dtype([
    ("server", "i4"), ("time", "f8"), ("wait", "f8"), ("apply", "f8"), ("pushes", "i4"),
    ("total_pushes", "i8"), ("step", "i8"), ("update_norm", "f4"), ("lr", "f4"), ("momentum", "f4"),
])
EVALUATION = np.dtype([
    ("time", "f8"), ("epoch", "f8"), ("steps", "i8"), ("pushes", "i8"),
    ("loss", "f4"), ("accuracy", "f4"),
])
EVENT = np.dtype([("time", "f8"), ("rank", "i4"), ("kind", h5py.string_dtype()),
                  ("data", h5py.string_dtype())])
# GSSP: one row per exchange of a group server with the global servers.
EXCHANGE = np.dtype([
    ("group", "i4"), ("time", "f8"), ("exchange", "i8"), ("pushes", "i4"), ("forwarded", "i8"),
    ("duration", "f8"), ("synced", "i1"), ("flushed", "i1"), ("speed_rank", "i4"), ("ratio", "f4"),
    ("bytes_sent", "i8"), ("bytes_dense", "i8"),
])
# Pushes applied alone under an async rule (`async_rule`): one row per push and server.
PUSH = np.dtype([
    ("server", "i4"), ("step", "i8"), ("worker", "i4"), ("clock", "i8"), ("tau", "i8"), ("factor", "f4"),
    ("gradient", "f4"), ("compensation", "f4"),
])
TABLES = {"iterations": ITERATION, "applies": APPLY, "evaluations": EVALUATION, "events": EVENT,
          "exchanges": EXCHANGE, "pushes": PUSH}


def columns(dtype: np.dtype) -> tuple[str, ...]:
    """A table's column names (a structured dtype's; numpy types them optional)."""
    return dtype.names or ()


class LogRowError(ValueError):
    """A row that does not fit its table's columns."""


def rank_file(run_dir: str, rank: int, segment: int = 0) -> str:
    """A rank's log file; a job resumed from a checkpoint (segment k > 0)
    writes new files, so no segment's rows are overwritten."""
    return os.path.join(run_dir, f"rank-{rank}.h5" if segment == 0 else f"rank-{rank}.s{segment}.h5")
