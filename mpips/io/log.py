"""The run log: HDF5 files written per rank, and the one reader of them.

Its parts, one concept each: schema.py (the tables, their columns, where a
rank's file is), durable.py (writes that leave a file whole or as it was:
DiskFull), writer.py (a rank's rows, run.h5), reader.py (`RunLog`, damage
tolerated), metrics.py (a run's summary, time to a target). The names here
are theirs, for everything that reads or writes a log by `mpips.io.log`.
"""
from __future__ import annotations

from .durable import DiskFull, writing, written_whole
from .metrics import time_to_target
from .reader import LogError, RunLog
from .schema import ADDED, APPLY, EVALUATION, EVENT, EXCHANGE, ITERATION, TABLES, LogRowError, columns, rank_file
from .writer import CHUNK, RankLog, set_status, set_user_objects, write_run_end, write_run_header

__all__ = ["ADDED", "APPLY", "CHUNK", "EVALUATION", "EVENT", "EXCHANGE", "ITERATION", "TABLES", "DiskFull",
           "LogError", "LogRowError", "RankLog", "RunLog", "columns", "rank_file", "set_status",
           "set_user_objects", "time_to_target", "write_run_end", "write_run_header", "writing",
           "written_whole"]
