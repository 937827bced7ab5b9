"""A run directory belongs to one run.

- The running job holds a lock on `<run>/.lock` (flock, taken by rank 0 and
  released when it ends, however it ends); a second job on the directory
  stops at set-up with one line naming the holder. Two jobs started 2 s
  apart on one `--run-dir` used to both exit 0, one's log replacing the
  other's.
- A fresh start into a directory that holds another run is refused unless
  `--overwrite`: the old run's files are then removed first, so none of
  them is read as part of the new run (an earlier job's rank-3.h5 and
  rank-4.h5 were counted into a run of fewer ranks: 4,296 samples of a 2,876
  budget, "complete"). A job that resumes from a checkpoint, or starts
  again the same run that ended without one (a requeued job killed early),
  goes on as before.
- Every run has an id, in run.h5 and in each rank file it writes (with the
  segment); the reader takes only rank files of the run's id.
"""
from __future__ import annotations

import fcntl
import glob
import json
import os
import platform
import shutil
import time
import uuid

from ..validate import ConfigError
from .checkpoint import checkpoint_dir, find_resume, run_attrs
from .outdir import folder_problem

LOCK = ".lock"


def new_run_id() -> str:
    return uuid.uuid4().hex


class RunDirLock:
    """Held by the job writing the run directory (rank 0), for its whole life."""

    def __init__(self, run_dir: str):
        path = os.path.join(run_dir, LOCK)
        self._fh = open(path, "a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another job"
            self._fh.close()
            raise ConfigError("run_dir", run_dir, f"in use by {holder}; wait for it to end or choose "
                                                  f"another --run-dir") from None
        job = os.environ.get("SLURM_JOB_ID")
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"the job started {time.strftime('%Y-%m-%d %H:%M:%S')} on {platform.node()} "
                       f"(pid {os.getpid()}{', Slurm job ' + job if job else ''})\n")
        self._fh.flush()

    def release(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


def run_files(run_dir: str) -> list[str]:
    """What a run leaves in its directory: run.h5, rank files, checkpoints."""
    found = glob.glob(os.path.join(run_dir, "rank-*.h5")) + glob.glob(os.path.join(run_dir, "run.h5"))
    return found + ([checkpoint_dir(run_dir)] if os.path.isdir(checkpoint_dir(run_dir)) else [])


def claim(run_dir: str, config: dict, *, overwrite: bool) -> None:
    """Before a fresh start (not a resume): a directory holding another run is
    refused unless `overwrite`; the files of whatever run was there are removed."""
    files = run_files(run_dir)
    if not files:
        return
    # None: no run.h5 at all; {}: one that cannot be read (still another run's)
    attrs = run_attrs(run_dir) if os.path.exists(os.path.join(run_dir, "run.h5")) else None
    same = bool(attrs) and attrs is not None and "status" not in attrs and _settings(attrs.get("config")) == _settings(config)
    if not (overwrite or same):
        if attrs is None:
            what = f"{len(files)} files of a run ({os.path.basename(sorted(files)[0])}, ...)"
        elif not attrs:
            what = "a run whose run.h5 cannot be read"
        else:
            cfg = _settings(attrs.get("config")) or {}
            what = (f"a {cfg.get('paradigm', '?')} run, {attrs.get('status', 'unfinished')}, started "
                    f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(float(attrs.get('started', 0))))}")
        raise ConfigError("run_dir", run_dir, f"holds {what}; --overwrite replaces it, or choose another --run-dir")
    for path in files:
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _settings(config) -> dict | None:
    """A configuration as run.h5 stores it, without what does not change the run."""
    if config is None:
        return None
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    config = json.loads(json.dumps(config))
    for volatile in ("overwrite", "stall_warn", "stall_timeout", "log_flush_seconds"):
        config.pop(volatile, None)
    return config


def default_run_dir(config) -> str:
    return os.path.join("runs", time.strftime("%Y%m%d-%H%M%S") + f"-{config.paradigm}")


def own_run_dir(run_dir: str) -> RunDirLock:
    """The run directory exists, takes files (an existing one may not: /proc)
    and is this job's alone (RunDirLock)."""
    why = folder_problem(run_dir)
    if why:
        raise ConfigError("run_dir", run_dir, f"cannot write there ({why})")
    try:
        return RunDirLock(run_dir)
    except OSError as e:
        raise ConfigError("run_dir", run_dir, f"cannot write there ({e.strerror})") from None


def resume_or_claim(run_dir: str, config, ident: dict, ranks: int):
    """The checkpoint to resume from, if the directory holds one of this run
    (never with --overwrite); else the directory is claimed for a fresh start."""
    found = None if config.overwrite else find_resume(run_dir, ident, ranks)
    if found is None:
        claim(run_dir, config.to_dict(), overwrite=config.overwrite)
    return found
