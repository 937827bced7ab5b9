"""The run log: HDF5 files written per rank, and the one reader of them.

Layout of a run directory (the schema is documented in docs/log-schema.md):

    run.h5          configuration, layout, versions, links to the rank files,
                    and (at the end) the final parameters and the run's status
    rank-<r>.h5     one per writing rank: tables `iterations` (workers),
                    `applies` and `evaluations` (servers), `events` (all),
                    `exchanges` (GSSP group servers), `pushes` (servers
                    under an async rule)

Writers append rows to resizable datasets and flush every few seconds in
SWMR mode, so a job killed at any moment leaves files that open, holding the
rows up to the last flush. Readers open a file still open for writing with
swmr=True for the same reason (`_open_rank_file`).

Damage. HDF5 checksums a file's metadata (libver "latest") but not the rows
of a table: bytes altered inside them were read as garbage (a worker 7 of 3,
a staleness of 1e17) and ended plot in an IndexError or a MemoryError. Every
table's chunks, and run.h5's final parameters, carry a Fletcher-32 checksum;
the reader leaves out a block that fails its own and says so (`_read_table`).

A full disk. A write that finds it full raises DiskFull, one line naming
the file, and leaves every file as it was before: run.h5 (and a checkpoint)
is built in memory and written under a temporary name renamed over it
(`written_whole`), and a rank log writes a flush only where the disk holds
it (`RankLog._room`). HDF5 (2.0) that ran out of space itself wrote a
table's new length and not its rows (read back as zeros), left run.h5 that
no tool could open, and crashed the process when it closed the file.
"""
from __future__ import annotations

import errno
import glob
import io
import json
import os
import platform
import re
import time
from contextlib import contextmanager
from typing import Any

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
# per table: its columns, and those of integers (RankLog.row checks a row against them)


def columns(dtype: np.dtype) -> tuple[str, ...]:
    """A table's column names (a structured dtype's; numpy types them optional)."""
    return dtype.names or ()


_COLUMNS = {name: (set(columns(dt)), [k for k in columns(dt) if dt[k].kind in "iu"]) for name, dt in TABLES.items()}


class LogRowError(ValueError):
    """A row that does not fit its table's columns."""


def time_to_target(times, accuracies, target: float, evaluations: int = 1) -> float | None:
    """The time of the first evaluation at which the mean accuracy of it and
    the `evaluations` - 1 before it reached `target` (None if never).

    Why a mean: an asynchronous run's accuracy swings by 5-15 points between
    evaluations, so the first single evaluation at the target moves by whole
    evaluation intervals on the chance of a point; a prediction of it (mpips
    plan) can be right about the run and still wrong about that chance."""
    accuracies = np.asarray(accuracies, dtype=float)
    if evaluations < 1 or len(accuracies) < evaluations:
        return None
    means = np.convolve(accuracies, np.ones(evaluations) / evaluations, mode="valid")
    hit = np.flatnonzero(means >= target)
    return float(np.asarray(times)[hit[0] + evaluations - 1]) if hit.size else None


def rank_file(run_dir: str, rank: int, segment: int = 0) -> str:
    """A rank's log file; a job resumed from a checkpoint (segment k > 0)
    writes new files, so no segment's rows are overwritten."""
    return os.path.join(run_dir, f"rank-{rank}.h5" if segment == 0 else f"rank-{rank}.s{segment}.h5")


class DiskFull(OSError):
    """A write that found no space left on its disk (or its quota spent).
    `str()` is one line naming the file."""

    def __init__(self, path: str, detail: str = os.strerror(errno.ENOSPC)):
        self.path = path
        super().__init__(f"disk full writing {path}: {detail}")


_FULL = (errno.ENOSPC, errno.EDQUOT)


def _full(e: BaseException) -> int:
    """The errno of a full disk behind `e`, or 0: an OSError's own, or the one
    HDF5 puts in its message (h5py raises a RuntimeError for a failed flush)."""
    if isinstance(e, OSError) and e.errno in _FULL:
        return e.errno
    found = re.search(r"errno = (\d+)", str(e))
    return int(found.group(1)) if found and int(found.group(1)) in _FULL else 0


@contextmanager
def writing(path: str):
    """Writes to `path` inside: one that finds the disk full is DiskFull, one
    line naming the file (h5py's message is HDF5's internals, over lines)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        code = _full(e)
        if not code:
            raise
        raise DiskFull(path, os.strerror(code)) from None


@contextmanager
def written_whole(path: str, tmp: str, *, changing: bool = False):
    """An HDF5 file (h5py.File) to fill in, built in memory (`changing`: from
    `path` as it is, if it is there), then written to `tmp`, synced and
    renamed over `path`: atomic, so a reader, or a job killed meanwhile,
    finds the file before or after; a write that fails removes `tmp` (a
    partial file, and the space a full disk needs back). HDF5 never writes
    to the disk itself (see above)."""
    image = io.BytesIO()
    if changing and os.path.exists(path):
        with open(path, "rb") as fh:
            image.write(fh.read())
    with h5py.File(image, "a", libver="latest") as f:   # (latest: its metadata checksummed)
        yield f
    try:
        with writing(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(image.getbuffer())
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


CHUNK = 256        # rows per chunk of a table
ROOM = 64 * 1024   # bytes a rank log's flush leaves free besides its rows, for HDF5's own blocks


class RankLog:
    """One rank's log file; rows are buffered and appended on `flush`.
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
            self._file = h5py.File(path, "w", libver="latest")
            self._file.attrs["rank"] = rank
            self._file.attrs["segment"] = segment
            self._file.attrs["run_id"] = run_id   # the reader takes only files of its run (mpips/io/rundir.py)
            self._sets = {name: self._file.create_dataset(name, shape=(0,), maxshape=(None,),
                                                          dtype=dt, chunks=(CHUNK,), fletcher32=True)
                          for name, dt in TABLES.items()}
            self._file.swmr_mode = True
        self._rows: dict[str, list] = {name: [] for name in TABLES}
        self._last_flush = time.monotonic()

    def row(self, table: str, **values) -> None:
        """One row of `table` by column name; LogRowError for a column
        unknown or missing, or a float for an integer column (numpy would
        truncate it without a word)."""
        names, integers = _COLUMNS[table]
        if values.keys() != names:
            raise LogRowError(f"a row of {table}: unknown column(s) {sorted(values.keys() - names)}, "
                              f"missing {sorted(names - values.keys())}")
        for name in integers:
            if isinstance(values[name], (float, np.floating)):
                raise LogRowError(f"a row of {table}: {name}={values[name]!r}, a float for an integer column")
        self._rows[table].append(tuple(values[k] for k in columns(TABLES[table])))
        if time.monotonic() - self._last_flush > self.flush_seconds:
            self.flush()

    def event(self, now: float, kind: str, **data: Any) -> None:
        self.row("events", time=now, rank=self.rank, kind=kind, data=json.dumps(data, default=_json_default))

    def flush(self) -> None:
        """Append the rows; DiskFull if the disk cannot take them, and from
        then on at every flush: the file keeps the rows of the flushes before."""
        if self._failed:
            raise self._failed
        try:
            with writing(self.path):
                self._room()
                for name, rows in self._rows.items():
                    if rows:
                        ds = self._sets[name]
                        n = ds.shape[0]
                        ds.resize((n + len(rows),))
                        ds[n:] = np.array(rows, dtype=TABLES[name])
                        rows.clear()
                self._file.flush()
        except DiskFull as e:
            self._failed = e
            raise
        self._last_flush = time.monotonic()

    def _room(self) -> None:
        """DiskFull, before anything is written, where the disk may not hold
        this flush (rows, a chunk per table, HDF5's blocks) and those of the
        other writers at once: HDF5 that runs out of space leaves rows of
        zeros behind, and a process that cannot close its file."""
        rows = sum((len(r) + CHUNK) * TABLES[name].itemsize for name, r in self._rows.items() if r)
        rows += sum(len(kind) + len(data) for _, _, kind, data in self._rows["events"])
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


def _without_lost_work(parts: dict[str, list[tuple[int, np.ndarray]]]
                       ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Each table's rows from every segment of the run, less the rows a later
    segment redid, and how many those were. Segment k resumed from a
    checkpoint (its `segment` event holds the checkpoint's clocks, steps and
    time), so an earlier segment's rows past that cut are work lost when the
    job stopped."""
    cuts = []
    for _, events in parts["events"]:
        for kind, data in zip(events["kind"], events["data"]):
            if (kind.decode() if isinstance(kind, bytes) else kind) == "segment":
                cut = json.loads(data.decode() if isinstance(data, bytes) else data)
                if cut["segment"] > 0:
                    cuts.append(cut)
    tables, redone = {}, {}
    for name, segments in parts.items():
        kept = []
        for segment, rows in segments:
            keep = np.ones(len(rows), dtype=bool)
            for cut in cuts:
                if cut["segment"] > segment:
                    keep &= _before_cut(name, rows, cut)
            kept.append(rows[keep])
        tables[name] = np.concatenate(kept) if kept else np.zeros(0, TABLES[name])
        redone[name] = sum(len(rows) for _, rows in segments) - len(tables[name])
    return tables, redone


def _before_cut(table: str, rows: np.ndarray, cut: dict) -> np.ndarray:
    if table == "iterations":
        return rows["iteration"] < np.asarray(cut["clocks"])[rows["worker"]]
    if table in ("applies", "pushes"):
        return rows["step"] <= np.asarray(cut["server_steps"])[rows["server"]]
    if table == "evaluations":
        return rows["steps"] <= cut["step"]
    return rows["time"] <= cut["time"]


class LogError(OSError):
    """A run log that cannot be read at all (run.h5 damaged). `str()` is one line naming the file."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _damage(path: str) -> str:
    """Why an HDF5 file cannot be whole ('' if nothing is seen), checked
    before HDF5 opens it: a SWMR reader retries a read past the end of a
    truncated file for minutes. Superblock versions 2 and 3 (libver
    "latest", as RankLog writes) hold the end-of-file address at byte 28;
    a writer's flush puts the file's size there, so a shorter file lost
    its end (a killed writer leaves it at least that long)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(36)
    if len(head) < 36 or head[:8] != _HDF5_SIGNATURE:
        return f"not an HDF5 file ({size} bytes)"
    if head[8] in (2, 3) and head[9] == 8:
        end = int.from_bytes(head[28:36], "little")
        if size < end:
            return f"truncated ({size} of {end} bytes)"
    return ""


def _is_table(node, dtype: np.dtype) -> bool:
    """Whether an HDF5 node is a table of `dtype` (its columns and their types;
    strings as HDF5 stores them)."""
    if not isinstance(node, h5py.Dataset) or node.ndim != 1 or node.dtype.names != dtype.names:
        return False
    return all(dtype[k].kind == "O" or node.dtype[k] == dtype[k] for k in columns(dtype))


def _read_table(node, name: str, dtype: np.dtype) -> tuple[np.ndarray, int] | None:
    """A table's rows as `dtype` (those of an older mpips with the columns
    added since as 0) and how many were left out as damaged (`_intact_rows`);
    None if the node is not such a table."""
    if _is_table(node, dtype):
        return _intact_rows(node, name)
    older = np.dtype([(k, dtype[k]) for k in columns(dtype) if k not in ADDED.get(name, ())])
    if older == dtype or not _is_table(node, older):
        return None
    old, lost = _intact_rows(node, name)
    rows = np.zeros(old.shape, dtype)
    for k in columns(older):
        rows[k] = old[k]
    return rows, lost


def _intact_rows(node, name: str) -> tuple[np.ndarray, int]:
    """The rows of a table that read whole, and how many did not: a block
    (chunk) that fails its checksum is left out, the others kept. An event
    whose strings are not JSON is left out too: they live in a heap HDF5
    does not checksum."""
    try:
        rows, lost = node[...], 0
    except Exception:  # noqa: BLE001 - a damaged block raises OSError, its index other kinds
        step = node.chunks[0] if node.chunks else max(len(node), 1)
        blocks, lost = [np.empty(0, node.dtype)], 0
        for lo in range(0, len(node), step):
            try:
                blocks.append(node[lo:lo + step])
            except Exception:  # noqa: BLE001
                lost += min(step, len(node) - lo)
        rows = np.concatenate(blocks)
    if name == "events" and len(rows):
        whole = np.array([_is_event(kind, data) for _, _, kind, data in rows], dtype=bool)
        rows, lost = rows[whole], lost + int((~whole).sum())
    return rows, lost


def _is_event(kind, data) -> bool:
    try:
        text = data.decode() if isinstance(data, bytes) else data
        (kind.decode() if isinstance(kind, bytes) else kind).encode()
        return isinstance(json.loads(text), dict)
    except (UnicodeError, ValueError, TypeError):
        return False


def _open_rank_file(path: str) -> h5py.File:
    """A rank file for reading. A file still open for writing (a running job's,
    or a killed writer's) is read as SWMR, which sees its rows up to the last
    flush; any other without SWMR: a SWMR reader retries a metadata read that
    fails its checksum for many minutes (bytes altered inside a finished file
    hung every analysis tool), a plain reader fails it at once."""
    try:
        return h5py.File(path, "r")
    except OSError as e:
        if "already open for write" not in str(e):
            raise
    return h5py.File(path, "r", swmr=True)


def _final_params(f: h5py.File) -> tuple[np.ndarray | None, bool]:
    """run.h5's final parameters (None if it has none), and whether they
    were left out as damaged (a block failing its checksum)."""
    if "final_params" not in f:
        return None, False
    try:
        return f["final_params"][...], False
    except OSError:
        return None, True


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


class RunLog:
    """Read a run directory. Everything that reads logs goes through this.

    A damaged rank file (missing, truncated, unreadable) does not stop the
    reading of the others: `files` and `problems` say what is missing, and
    `completeness()` whether the run is whole. A damaged run.h5 is a LogError.
    """

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        # what a comparison called the run's setup (`mpips compare`'s entry, e.g.
        # localsgd:local_mode=async); None: the tables and figures name it by its paradigm
        self.label: str | None = None
        path = os.path.join(run_dir, "run.h5")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no run log here (is {run_dir} a run directory?)")
        try:
            with h5py.File(path, "r") as f:
                self.config = json.loads(f.attrs["config"])
                self.layout = json.loads(f.attrs["layout"])
                self.versions = json.loads(f.attrs["versions"])
                self.status = str(f.attrs.get("status", "incomplete"))
                self.status_reason = str(f.attrs.get("status_reason", ""))
                self.wall_seconds = float(f.attrs["wall_seconds"]) if "wall_seconds" in f.attrs else None
                self._final, lost = _final_params(f)
                self.segments = int(f.attrs.get("segments", 1))
                self.run_id = str(f.attrs["run_id"]) if "run_id" in f.attrs else ""   # "": older than ids
                # mpips.train's own model, dataset, loss, in words ({}: the configuration's)
                self.user_objects = json.loads(f.attrs.get("user_objects", "{}"))
                # what it trained, by name: a user's objects as they are, not the
                # configuration's defaults (older logs: the configuration's, or user_objects)
                named = {**{k: self.config.get(k) for k in ("model", "dataset")}, **self.user_objects}
                self.model = self.layout.get("model", named["model"])
                self.dataset = self.layout.get("dataset", named["dataset"])
                self.simulated = self.layout.get("transport") == "simulated"
                # the rank files its jobs wrote (older logs: whatever is here)
                expected = [k + ".h5" for k in f["ranks"]] if "ranks" in f else []
        except Exception as e:  # noqa: BLE001 - damaged HDF5 or JSON raises many kinds
            raise LogError(path, f"not a readable run log ({_one_line(e)})") from None
        names = set(expected) | {os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "rank-*.h5"))}
        self.files: dict[str, dict] = {}   # per rank file: present, problem, rows per table
        parts: dict[str, list[tuple[int, np.ndarray]]] = {name: [] for name in TABLES}
        for name in sorted(names):
            self.files[name] = self._read_rank_file(os.path.join(run_dir, name), parts)
        # another run's rank file that run.h5 does not name is only left out; one it names is a problem
        self.problems = [f"{name} {info['problem']}" for name, info in self.files.items()
                         if info["problem"] and (name in expected or not info.get("foreign"))]
        if lost:
            self.problems.insert(0, "run.h5 damaged: its final parameters left out")
        # rows per table left out: work lost since a checkpoint, redone after it
        self._tables, self.redone = _without_lost_work(parts)

    def _read_rank_file(self, path: str, parts: dict[str, list[tuple[int, np.ndarray]]]) -> dict:
        info = {"present": os.path.exists(path), "problem": "", "rows": {}}
        if not info["present"]:
            info["problem"] = "missing"
            return info
        try:
            info["problem"] = _damage(path)
            if info["problem"]:
                return info
            tables = {}
            with _open_rank_file(path) as f:
                segment = int(f.attrs.get("segment", 0))
                theirs = str(f.attrs.get("run_id", ""))
                if self.run_id and theirs != self.run_id:
                    info["problem"] = f"not of this run (run id {theirs or 'none'}, this run's {self.run_id}): left out"
                    info["foreign"] = True
                    return info
                lost = {}
                for name, dtype in TABLES.items():
                    if name in f:
                        read = _read_table(f[name], name, dtype)
                        if read is None:
                            info["problem"] = f"unreadable (its table {name} is not one of mpips')"
                            return info
                        tables[name], lost[name] = read
        except Exception as e:  # noqa: BLE001 - damaged HDF5 raises many kinds
            info["problem"] = f"unreadable ({_one_line(e)})"
            return info
        if any(lost.values()):   # the rest of the file is kept
            info["problem"] = "damaged: rows left out (" + ", ".join(
                f"{name} {n}" for name, n in lost.items() if n) + ")"
        info["rows"] = {name: len(rows) for name, rows in tables.items()}
        if segment < self.segments:   # else left by an earlier job here that started afresh
            for name, rows in tables.items():
                parts[name].append((segment, rows))
        return info

    def completeness(self) -> dict[str, Any]:
        """Whether the run is whole: finished, every rank file present and
        readable, every worker's iterations logged (as many as the layout
        promises); if not, `reason` says what is missing, in one line."""
        reasons = [] if self.status == "finished" else [
            f"status {self.status}" + (f" ({self.status_reason})" if self.status_reason else "")]
        reasons += self.problems
        it = self.iterations
        total = int(self.layout.get("total_samples") or 0)
        promised, rows, samples = None, {}, None
        if total:
            # a global budget (mpips/runtime/roles/budget.py): the workers' iterations vary,
            # their samples add up to the budget (unless a time limit cut it)
            samples = int(it["batch"].sum())
            if samples < total and not self.config.get("time_limit"):
                reasons.append(f"samples logged {samples} of {total}")
        elif self.layout.get("iterations_per_worker") is not None:
            promised = int(self.layout["iterations_per_worker"])
            rows = {w: int((it["worker"] == w).sum()) for w in range(int(self.layout["workers"]))}
            short = [f"{w} ({n} of {promised})" for w, n in rows.items() if n < promised]
            if short:
                reasons.append("iterations logged of workers " + ", ".join(short))
        return {"complete": not reasons, "reason": "; ".join(reasons), "files": self.files,
                "iterations_promised": promised, "iterations_logged": rows,
                "samples_promised": total or None, "samples_logged": samples}

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.run_dir))

    @property
    def paradigm(self) -> str:
        return self.config["paradigm"]

    @property
    def iterations(self) -> np.ndarray:
        return self._tables["iterations"]

    @property
    def applies(self) -> np.ndarray:
        return self._tables["applies"]

    @property
    def exchanges(self) -> np.ndarray:
        return self._tables["exchanges"]

    @property
    def pushes(self) -> np.ndarray:
        return self._tables["pushes"]

    @property
    def evaluations(self) -> np.ndarray:
        e = self._tables["evaluations"]
        return e[np.argsort(e["time"], kind="stable")]

    def events(self, kind: str | None = None) -> list[dict]:
        """Events as dicts (time, rank, kind, and the event's own fields), in time order."""
        out = []
        for t, rank, k, data in self._tables["events"]:
            k = k.decode() if isinstance(k, bytes) else k
            if kind is None or k == kind:
                d = json.loads(data.decode() if isinstance(data, bytes) else data)
                out.append({"time": float(t), "rank": int(rank), "kind": k, **d})
        return sorted(out, key=lambda e: e["time"])

    def final_params(self) -> np.ndarray | None:
        return self._final

    # pandas ------------------------------------------------------------------
    # The same tables as pandas DataFrames, one row per logged row, columns as
    # in docs/log-schema.md (pandas is imported on first use: ranks that only
    # write logs never pay for it). The numpy accessors above stay the API
    # the runtime, the tests and the simulator use.
    def frame(self, table: str):
        """One table as a DataFrame: iterations, applies, evaluations (in time
        order), exchanges, pushes, or events (time, rank, kind, then the union of the
        events' own fields; NaN where an event has none)."""
        import pandas as pd

        if table == "events":
            events = self.events()
            return pd.DataFrame(events, columns=None if events else ["time", "rank", "kind"])
        if table not in TABLES:
            raise KeyError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        rows = self.evaluations if table == "evaluations" else self._tables[table]
        return pd.DataFrame({name: rows[name] for name in columns(rows.dtype)})

    def frames(self) -> dict:
        """Every table as a DataFrame, by name."""
        return {name: self.frame(name) for name in TABLES}

    @property
    def iterations_df(self):
        return self.frame("iterations")

    @property
    def applies_df(self):
        return self.frame("applies")

    @property
    def evaluations_df(self):
        return self.frame("evaluations")

    @property
    def events_df(self):
        return self.frame("events")

    @property
    def exchanges_df(self):
        return self.frame("exchanges")

    @property
    def pushes_df(self):
        return self.frame("pushes")

    def summary(self) -> dict[str, Any]:
        """The run in one flat dict (what `python -m mpips info --json` prints)."""
        it, ev, ap = self.iterations, self.evaluations, self.applies
        wall = self.wall_seconds
        if wall is None:
            ends = [it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]] if len(it) else []
            wall = float(max([e.max() for e in ends] + list(ev["time"][-1:]) + [0.0]))
        server0 = ap[ap["server"] == 0]
        steps = int(server0["step"].max()) if len(server0) else 0
        pushes = int(server0["total_pushes"].max()) if len(server0) else 0
        busy = {}
        for w in np.unique(it["worker"]):
            rows = it[it["worker"] == w]
            span = float((rows["start"] + rows["wait"] + rows["pull"] + rows["compute"]
                          + rows["push"]).max() - rows["start"].min())
            busy[int(w)] = float(rows["wait"].sum()) / span if span > 0 else 0.0
        samples = int(it["batch"][it["rejected"] == 0].sum()) if len(it) else 0
        whole = self.completeness()
        return {
            "run": self.name,
            "paradigm": self.paradigm,
            "model": self.model,
            "dataset": self.dataset,
            "clock": "virtual (simulated)" if self.simulated else "wall",
            "status": self.status,
            "complete": whole["complete"],
            "reason": whole["reason"],
            "servers": self.layout["servers"],
            "workers": self.layout["workers"],
            "epochs": self.config["epochs"],
            "final_accuracy": float(ev["accuracy"][-1]) if len(ev) else None,
            "best_accuracy": float(ev["accuracy"].max()) if len(ev) else None,
            "final_loss": float(ev["loss"][-1]) if len(ev) else None,
            "updates": steps,
            "pushes": pushes,
            "iterations": int(len(it)),
            "samples": samples,
            "wall_seconds": wall,
            "updates_per_second": steps / wall if wall else 0.0,
            "samples_per_second": samples / wall if wall else 0.0,
            "mean_wait_fraction": float(np.mean(list(busy.values()))) if busy else 0.0,
            "mean_staleness": float(it["staleness"].mean()) if len(it) else 0.0,
            "max_staleness": int(it["staleness"].max()) if len(it) else 0,
            "max_clock_gap": int(it["clock_gap"].max()) if len(it) else 0,
            "rejected_pushes": int(it["rejected"].sum()) if len(it) else 0,
            "bytes_sent": int(it["bytes_sent"].sum()) if len(it) else 0,
            "device_time_overruns": int(it["overrun"].sum()) if len(it) else 0,
            # BSP with backup workers: pushes too late for their round, never applied
            "dropped_pushes": sum(e["server"] == 0 for e in self.events("dropped_push")),   # every server logs each
            # an async rule (async_rule): its mean factor and tau over the pushes it treated (None: none)
            "mean_async_factor": float(pu["factor"].mean()) if len(pu := self.pushes) else None,
            "mean_tau": float(pu["tau"].mean()) if len(pu) else None,
            # Local SGD: local steps per push (None: no local steps)
            "local_steps_per_push": (float(np.mean([e["local_steps"] for e in local]))
                                     if (local := self.events("local_push")) else None),
        }

    def time_to_accuracy(self, target: float, evaluations: int = 1) -> float | None:
        """Seconds until the mean accuracy of `evaluations` consecutive
        evaluations first reached `target`, at the last of them (None if never;
        1: the first evaluation that reached it). See time_to_target."""
        ev = self.evaluations
        return time_to_target(ev["time"], ev["accuracy"], target, evaluations)

    def epochs_to_accuracy(self, target: float) -> float | None:
        """Epochs of samples pushed until an evaluation first reached `target`
        (None if never): the statistical side of time to accuracy, which a
        loaded machine's timing noise does not touch."""
        ev = self.evaluations
        return time_to_target(ev["epoch"], ev["accuracy"], target)
