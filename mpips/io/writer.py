"""Writing the run log: a rank's rows (`RankLog`), and run.h5 (its header,
its end, its status).

A rank's rows go into a preallocated buffer per table (a structured array,
filled row by row where the column names of a call were checked once) and
reach the file a block at a time: when a buffer fills (CHUNK rows, one
HDF5 chunk) and at every `flush`, at least every `flush_seconds`. Files are
in SWMR mode, so a job killed at any moment leaves files that open, holding
the rows up to the last flush (the reader: reader.py).

Damage. HDF5 checksums a file's metadata (libver "latest") but not the rows
of a table: bytes altered inside them were read as garbage (a worker 7 of 3,
a staleness of 1e17) and ended plot in an IndexError or a MemoryError. Every
table's chunks, and run.h5's final parameters, carry a Fletcher-32 checksum
(the reader leaves out a block that fails its own). A full disk: durable.py.
"""
from __future__ import annotations

import glob
import json
import os
import platform
import time
from typing import Any

import h5py
import numpy as np

from .durable import DiskFull, writing, written_whole
from .schema import TABLES, LogRowError, columns, rank_file

CHUNK = 256        # rows per chunk of a table, and per block written
FIRST_ROWS = 16    # a table's buffer at first (doubled up to CHUNK: a simulation holds a thousand rank logs)
ROOM = 64 * 1024   # bytes a rank log's flush leaves free besides its rows, for HDF5's own blocks


class _Buffer:
    """One table's rows not yet written: `rows[:n]`. `order` is the column
    order of the calls checked so far (a call site passes its keywords in
    one order: checked once, then every row of it is written in place
    through `ordered`, a view of `rows` with its fields in that order)."""

    __slots__ = ("table", "dtype", "rows", "n", "order", "ordered", "integers")

    def __init__(self, table: str, dtype: np.dtype):
        self.table, self.dtype = table, dtype
        self.rows = np.zeros(FIRST_ROWS, dtype)
        self.n = 0
        self.order: tuple[str, ...] = ()
        self.ordered = self.rows
        self.integers: tuple[int, ...] = ()   # positions in `order` of the integer columns

    def check(self, order: tuple[str, ...]) -> None:
        """Take `order` as the calls' column order; LogRowError for a column unknown or missing."""
        names = set(columns(self.dtype))
        if set(order) != names or len(order) != len(names):
            raise LogRowError(f"a row of {self.table}: unknown column(s) {sorted(set(order) - names)}, "
                              f"missing {sorted(names - set(order))}")
        self.order = order
        self.integers = tuple(k for k, name in enumerate(order) if self.dtype[name].kind in "iu")
        self._view()

    def _view(self) -> None:
        fields: dict = dict(self.dtype.fields or {})
        self.ordered = self.rows.view(np.dtype({
            "names": list(self.order), "formats": [fields[k][0] for k in self.order],
            "offsets": [fields[k][1] for k in self.order], "itemsize": self.dtype.itemsize}))

    def grow(self) -> None:
        rows = np.zeros(2 * len(self.rows), self.dtype)
        rows[:self.n] = self.rows[:self.n]
        self.rows = rows
        if self.order:
            self._view()


class RankLog:
    """One rank's log file; rows are buffered and written a block at a time.
    `writers`: the ranks that may flush to the same disk at once (a job's
    flush together), each leaving room for theirs (`_room`)."""

    def __init__(self, path: str, rank: int, *, flush_seconds: float = 2.0, segment: int = 0,
                 writers: int = 1, run_id: str = ""):
        self.path = path
        self.rank = rank
        self.flush_seconds = flush_seconds
        self.writers = writers
        self._failed: DiskFull | None = None
        with writing(path):
            self._file: h5py.File | None = h5py.File(path, "w", libver="latest")
            self._file.attrs["rank"] = rank
            self._file.attrs["segment"] = segment
            self._file.attrs["run_id"] = run_id   # the reader takes only files of its run (mpips/io/rundir.py)
            self._sets = {name: self._file.create_dataset(name, shape=(0,), maxshape=(None,),
                                                          dtype=dt, chunks=(CHUNK,), fletcher32=True)
                          for name, dt in TABLES.items()}
            self._file.swmr_mode = True
        self._buffers = {name: _Buffer(name, dt) for name, dt in TABLES.items()}
        self._next_flush = time.monotonic() + flush_seconds

    def row(self, table: str, **values) -> None:
        """One row of `table` by column name; LogRowError for a column
        unknown or missing, or a float for an integer column (numpy would
        truncate it without a word)."""
        buffer = self._buffers[table]
        order = tuple(values)
        if order != buffer.order:
            buffer.check(order)
        row = tuple(values.values())
        for k in buffer.integers:
            if isinstance(row[k], (float, np.floating)):
                raise LogRowError(f"a row of {table}: {order[k]}={row[k]!r}, a float for an integer column")
        if buffer.n == len(buffer.rows):
            if buffer.n < CHUNK:
                buffer.grow()
            else:
                self._write({table: buffer})
        buffer.ordered[buffer.n] = row
        buffer.n += 1
        if time.monotonic() > self._next_flush:
            self.flush()

    def flush_if_due(self) -> None:
        """Flush if `flush_seconds` passed since the last flush and rows wait
        (a rank that waits long keeps what it logged before on disk)."""
        if time.monotonic() > self._next_flush and any(b.n for b in self._buffers.values()):
            self.flush()

    def event(self, now: float, kind: str, **data: Any) -> None:
        self.row("events", time=now, rank=self.rank, kind=kind, data=json.dumps(data, default=_json_default))

    def flush(self) -> None:
        """Write the rows and flush the file; DiskFull if the disk cannot
        take them, and from then on at every flush: the file keeps the rows
        of the flushes before."""
        self._write(self._buffers, flush=True)
        self._next_flush = time.monotonic() + self.flush_seconds

    def _write(self, buffers: dict[str, _Buffer], *, flush: bool = False) -> None:
        if self._failed:
            raise self._failed
        try:
            with writing(self.path):
                self._room(buffers)
                for name, buffer in buffers.items():
                    if buffer.n:
                        ds = self._sets[name]
                        n = ds.shape[0]
                        ds.resize((n + buffer.n,))
                        ds[n:] = buffer.rows[:buffer.n]
                        buffer.n = 0
                if flush and self._file is not None:
                    self._file.flush()
        except DiskFull as e:
            self._failed = e
            raise

    def _room(self, buffers: dict[str, _Buffer]) -> None:
        """DiskFull, before anything is written, where the disk may not hold
        these rows (a chunk per table, HDF5's blocks) and those of the
        other writers at once: HDF5 that runs out of space leaves rows of
        zeros behind, and a process that cannot close its file."""
        rows = sum((b.n + CHUNK) * b.dtype.itemsize for b in buffers.values() if b.n)
        events = buffers.get("events")
        if events is not None and events.n:
            rows += sum(len(kind) + len(data) for kind, data in zip(events.rows["kind"][:events.n],
                                                                   events.rows["data"][:events.n]))
        need = ROOM + self.writers * rows
        disk = os.statvfs(self.path)
        if disk.f_bavail * disk.f_frsize < need:
            raise DiskFull(self.path, f"{disk.f_bavail * disk.f_frsize // 1024} KiB free, "
                                      f"a flush of the logs needs {-(-need // 1024)} KiB")

    def close(self) -> None:
        """Flush and close. A file a flush failed to write stays open: HDF5
        crashed the process closing a file it had run out of space in."""
        if self._file and not self._failed:
            self.flush()
            self._file.close()
            self._file = None


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _changing_run(run_dir: str, *, new: bool = False):
    """run.h5 to change (`new`: to write afresh), written whole or not at all
    (`written_whole`): a change in place that ran out of space left HDF5's
    metadata half written, and no tool could open run.h5 again. The copy is
    named by host and process: rank 0 changes run.h5, the evaluating rank at
    the end, a rank that found the disk full."""
    tmp = os.path.join(run_dir, f".run.h5.{platform.node()}.{os.getpid()}.tmp")
    return written_whole(os.path.join(run_dir, "run.h5"), tmp, changing=not new)


def write_run_header(run_dir: str, *, config: dict, layout: dict, versions: dict,
                     ranks: list[int], segment: int = 0, run_id: str = "") -> None:
    """run.h5 at the start: what was run, on what, and where the rank logs are.
    A job resumed from a checkpoint (segment k > 0) adds to it: the settings
    of the latest segment, `segments` = k + 1, links to its rank files."""
    for stale in glob.glob(os.path.join(run_dir, ".run.h5.*.tmp")):
        os.remove(stale)   # a copy left by a job killed while it changed run.h5
    with _changing_run(run_dir, new=segment == 0) as f:
        f.attrs["config"] = json.dumps(config)
        f.attrs["layout"] = json.dumps(layout)
        f.attrs["versions"] = json.dumps(versions)
        f.attrs["segments"] = segment + 1
        f.attrs["run_id"] = run_id
        if segment == 0:
            f.attrs["started"] = time.time()
        else:
            for name in ("status", "status_reason"):   # running again
                if name in f.attrs:
                    del f.attrs[name]
        for r in ranks:
            name = os.path.basename(rank_file(run_dir, r, segment))
            link = f"ranks/{name[:-3]}"
            if link in f:
                del f[link]
            f[link] = h5py.ExternalLink(name, "/")


def write_run_end(run_dir: str, *, wall_seconds: float, final_params: np.ndarray | None,
                  status: str | None = "finished") -> None:
    """The end of a run: its time, final parameters and status (None: left
    to be set last, once every rank's log is closed: `set_status`)."""
    with _changing_run(run_dir) as f:
        if status:
            f.attrs["status"] = status
        f.attrs["wall_seconds"] = wall_seconds
        if final_params is not None:
            if "final_params" in f:
                del f["final_params"]
            f.create_dataset("final_params", data=final_params, fletcher32=True)


def set_status(run_dir: str, status: str, reason: str = "") -> None:
    """Change the run's status after its end (e.g. `failed`: it did not train)."""
    with _changing_run(run_dir) as f:
        f.attrs["status"] = status
        f.attrs["status_reason"] = reason


def set_user_objects(run_dir: str, objects: dict[str, str]) -> None:
    """What a run used instead of the configuration's model, dataset or loss
    (mpips.train's objects), in words: the configuration's `model` and
    `dataset` then do not describe the run."""
    with h5py.File(os.path.join(run_dir, "run.h5"), "a") as f:
        f.attrs["user_objects"] = json.dumps(objects)
