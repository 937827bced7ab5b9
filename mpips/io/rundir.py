"""A run directory belongs to one run; `RunDir` is that directory, opened
once by the job (MPI or simulated), from its lock to its status.

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

import numpy as np

from ..validate import ConfigError
from .checkpoint import Resume, checkpoint_dir, clear_checkpoints, find_resume, run_attrs, write_checkpoint
from .log import rank_file, set_status, set_user_objects, write_run_end, write_run_header
from .outdir import folder_problem

LOCK = ".lock"


def new_run_id() -> str:
    return uuid.uuid4().hex


class RunDirLock:
    """Held by the job writing the run directory (rank 0), for its whole life;
    and by `mpips compare` on its --runs (`option`: the setting that names
    the directory, in the message)."""

    def __init__(self, run_dir: str, option: str = "run_dir"):
        path = os.path.join(run_dir, LOCK)
        self._fh = open(path, "a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another job"
            self._fh.close()
            raise ConfigError(option, run_dir, f"in use by {holder}; wait for it to end or choose "
                                               f"another --{option.replace('_', '-')}") from None
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


def in_use(run_dir: str) -> str:
    """Who holds the run directory's lock ('' when no one does), without taking it."""
    if not os.path.exists(os.path.join(run_dir, LOCK)):
        return ""
    try:
        RunDirLock(run_dir).release()
    except ConfigError as e:
        return e.allowed.partition(";")[0].removeprefix("in use by ")
    except OSError:
        return ""
    return ""


def other_settings(run_dir: str, config: dict) -> list[str]:
    """The settings in which the run in `run_dir` differs from `config`
    (those that do not change a run left out), as 'name: theirs, not ours';
    ['...'] for a run.h5 that cannot be read."""
    theirs = run_settings(run_dir)
    if theirs is None:
        return ["its run.h5 cannot be read"]
    ours = _settings(config) or {}
    from ..config import SHARED  # (here: the configuration imports the paradigms, which import io)

    def differs(k: str) -> bool:
        if k == "run_dir":   # where a run is kept does not change it: runs copied elsewhere are reused there
            return False
        if k not in theirs and k in SHARED and ours.get(k) == json.loads(json.dumps(SHARED[k].default)):
            return False     # a setting newer than the run, at its default: what runs did before it existed
        return theirs.get(k) != ours.get(k)
    return [f"{k} {theirs.get(k)!r}, not {ours.get(k)!r}" for k in sorted(set(theirs) | set(ours)) if differs(k)]


def run_settings(run_dir: str) -> dict | None:
    """The settings of the run in `run_dir` as its run.h5 keeps them (None:
    none there, or unreadable), without those that do not change a run."""
    return _settings(run_attrs(run_dir).get("config"))


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


class RunDir:
    """One run's directory as the job sees it, opened once (`open`, rank 0:
    made, checked and locked; the other ranks of an MPI job hold it
    unlocked, writing only their rank files): a fresh start claims it or a
    checkpoint of this run resumes in it (`resume_or_claim`, `claim`); the
    run's files go through it (run.h5's header, end, status and user
    objects; the rank files; the checkpoints); `close` releases the lock.
    A context manager; after `close` a change to its files is an error."""

    def __init__(self, path: str, lock: RunDirLock | None = None):
        self.path = path
        self._lock = lock
        self._closed = False

    @classmethod
    def open(cls, path: str) -> "RunDir":
        """The directory made (if need be), writable and locked for this job (ConfigError if not)."""
        return cls(path, own_run_dir(path))

    def resume_or_claim(self, config, ident: dict, ranks: int) -> Resume | None:
        """The checkpoint to resume from, if the directory holds one of this run
        (never with --overwrite); else the directory is claimed for a fresh start."""
        found = None if config.overwrite else find_resume(self.path, ident, ranks)
        if found is None:
            self.claim(config)
        return found

    def claim(self, config) -> None:
        """A fresh start of `config`'s run here (see `claim`)."""
        claim(self._open(), config.to_dict(), overwrite=config.overwrite)

    def attrs(self) -> dict:
        """run.h5's attributes ({} where there is none)."""
        return run_attrs(self.path)

    def rank_file(self, rank: int, segment: int = 0) -> str:
        return rank_file(self._open(), rank, segment)

    def write_header(self, **header) -> None:
        write_run_header(self._open(), **header)

    def write_end(self, *, wall_seconds: float, final_params: np.ndarray | None,
                  status: str | None = "finished") -> None:
        write_run_end(self._open(), wall_seconds=wall_seconds, final_params=final_params, status=status)

    def set_status(self, status: str, reason: str = "") -> None:
        set_status(self._open(), status, reason)

    def set_user_objects(self, objects: dict[str, str]) -> None:
        set_user_objects(self._open(), objects)

    def write_checkpoint(self, meta: dict, ranks: list) -> str:
        return write_checkpoint(self._open(), meta, ranks)

    def clear_checkpoints(self) -> None:
        clear_checkpoints(self._open())

    def _open(self) -> str:
        if self._closed:
            raise RuntimeError(f"run directory {self.path} used after close()")
        return self.path

    def close(self) -> None:
        self._closed = True
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __str__(self) -> str:
        return self.path

