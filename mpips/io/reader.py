"""Reading a run directory: `RunLog`, the one reader that everything which
reads logs goes through, and its tolerance of damage.

A file still open for writing (a running job's, or a killed writer's) is
read with swmr=True, which sees its rows up to the last flush
(`_open_rank_file`). A table's chunk that fails its Fletcher-32 checksum is
left out and said so (`_read_table`); a rank file missing, truncated or
unreadable does not stop the reading of the others; a damaged run.h5 is a
LogError, one line.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any

import h5py
import numpy as np

from . import metrics
from .schema import ADDED, TABLES, columns


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

    @property
    def placement(self) -> list[dict] | None:
        """Each rank's host and role (rank, host, role, index), in rank order,
        of the run's latest segment; None where unknown (a simulated run, an
        older log)."""
        return self.layout.get("placement")

    def by_node(self) -> dict[str, list[dict]]:
        """The placement grouped by host, hosts in the order of their first
        rank ({} where unknown)."""
        nodes: dict[str, list[dict]] = {}
        for rank in self.placement or ():
            nodes.setdefault(rank["host"], []).append(rank)
        return nodes

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
        return metrics.summary(self)

    def time_to_accuracy(self, target: float, evaluations: int = 1) -> float | None:
        """Seconds until the mean accuracy of `evaluations` consecutive
        evaluations first reached `target`, at the last of them (None if never;
        1: the first evaluation that reached it). See metrics.time_to_target."""
        ev = self.evaluations
        return metrics.time_to_target(ev["time"], ev["accuracy"], target, evaluations)

    def epochs_to_accuracy(self, target: float) -> float | None:
        """Epochs of samples pushed until an evaluation first reached `target`
        (None if never): the statistical side of time to accuracy, which a
        loaded machine's timing noise does not touch."""
        ev = self.evaluations
        return metrics.time_to_target(ev["epoch"], ev["accuracy"], target)
