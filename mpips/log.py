"""The run log: HDF5 files written per rank, and the one reader of them.

Layout of a run directory (the schema is documented in docs/log-schema.md):

    run.h5          configuration, layout, versions, links to the rank files,
                    and (at the end) the final parameters and the run's status
    rank-<r>.h5     one per writing rank: tables `iterations` (workers),
                    `applies` and `evaluations` (servers), `events` (all),
                    `exchanges` (GSSP group servers)

Writers append rows to resizable datasets and flush every few seconds in
SWMR mode, so a job killed at any moment leaves files that open, holding the
rows up to the last flush. Readers open with swmr=True for the same reason.
"""
from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

import h5py
import numpy as np

ITERATION = np.dtype([
    ("worker", "i4"), ("iteration", "i8"), ("clock", "i8"), ("clock_gap", "i8"),
    ("start", "f8"), ("wait", "f8"), ("pull", "f8"), ("compute", "f8"), ("slowdown", "f8"),
    ("push", "f8"), ("batch", "i4"), ("scale", "f4"), ("lr_scale", "f4"),
    ("staleness", "i8"), ("value_staleness", "f4"), ("value_staleness_bound", "f4"),
    ("bytes_sent", "i8"), ("bytes_dense", "i8"), ("loss", "f4"), ("rejected", "i1"),
    ("sample", "i8"), ("overrun", "i1"),
])
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
TABLES = {"iterations": ITERATION, "applies": APPLY, "evaluations": EVALUATION, "events": EVENT,
          "exchanges": EXCHANGE}


def rank_file(run_dir: str, rank: int, segment: int = 0) -> str:
    """A rank's log file; a job resumed from a checkpoint (segment k > 0)
    writes new files, so no segment's rows are overwritten."""
    return os.path.join(run_dir, f"rank-{rank}.h5" if segment == 0 else f"rank-{rank}.s{segment}.h5")


class RankLog:
    """One rank's log file; rows are buffered and appended on `flush`."""

    def __init__(self, path: str, rank: int, *, flush_seconds: float = 2.0, segment: int = 0):
        self.rank = rank
        self.flush_seconds = flush_seconds
        self._file = h5py.File(path, "w", libver="latest")
        self._file.attrs["rank"] = rank
        self._file.attrs["segment"] = segment
        self._sets = {name: self._file.create_dataset(name, shape=(0,), maxshape=(None,),
                                                      dtype=dt, chunks=(256,))
                      for name, dt in TABLES.items()}
        self._rows: dict[str, list] = {name: [] for name in TABLES}
        self._file.swmr_mode = True
        self._last_flush = time.monotonic()

    def row(self, table: str, *values) -> None:
        self._rows[table].append(values)
        if time.monotonic() - self._last_flush > self.flush_seconds:
            self.flush()

    def event(self, now: float, kind: str, **data: Any) -> None:
        self.row("events", now, self.rank, kind, json.dumps(data, default=_json_default))

    def flush(self) -> None:
        for name, rows in self._rows.items():
            if rows:
                ds = self._sets[name]
                n = ds.shape[0]
                ds.resize((n + len(rows),))
                ds[n:] = np.array(rows, dtype=TABLES[name])
                rows.clear()
        self._file.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._file:
            self.flush()
            self._file.close()
            self._file = None


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_run_header(run_dir: str, *, config: dict, layout: dict, versions: dict,
                     ranks: list[int], segment: int = 0) -> None:
    """run.h5 at the start: what was run, on what, and where the rank logs are.
    A job resumed from a checkpoint (segment k > 0) adds to it: the settings
    of the latest segment, `segments` = k + 1, links to its rank files."""
    with h5py.File(os.path.join(run_dir, "run.h5"), "w" if segment == 0 else "a") as f:
        f.attrs["config"] = json.dumps(config)
        f.attrs["layout"] = json.dumps(layout)
        f.attrs["versions"] = json.dumps(versions)
        f.attrs["segments"] = segment + 1
        if segment == 0:
            f.attrs["started"] = time.time()
        elif "status" in f.attrs:
            del f.attrs["status"]   # running again
        for r in ranks:
            name = os.path.basename(rank_file(run_dir, r, segment))
            link = f"ranks/{name[:-3]}"
            if link in f:
                del f[link]
            f[link] = h5py.ExternalLink(name, "/")


def write_run_end(run_dir: str, *, wall_seconds: float, final_params: np.ndarray | None,
                  status: str = "finished") -> None:
    with h5py.File(os.path.join(run_dir, "run.h5"), "a") as f:
        f.attrs["status"] = status
        f.attrs["wall_seconds"] = wall_seconds
        if final_params is not None:
            if "final_params" in f:
                del f["final_params"]
            f.create_dataset("final_params", data=final_params)


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
    if table == "applies":
        return rows["step"] <= np.asarray(cut["server_steps"])[rows["server"]]
    if table == "evaluations":
        return rows["steps"] <= cut["step"]
    return rows["time"] <= cut["time"]


class RunLog:
    """Read a run directory. Everything that reads logs goes through this."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        path = os.path.join(run_dir, "run.h5")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no run log here (is {run_dir} a run directory?)")
        with h5py.File(path, "r") as f:
            self.config = json.loads(f.attrs["config"])
            self.layout = json.loads(f.attrs["layout"])
            self.versions = json.loads(f.attrs["versions"])
            self.status = str(f.attrs.get("status", "incomplete"))
            self.wall_seconds = float(f.attrs["wall_seconds"]) if "wall_seconds" in f.attrs else None
            self._final = f["final_params"][...] if "final_params" in f else None
            self.segments = int(f.attrs.get("segments", 1))
        parts = {name: [] for name in TABLES}
        for p in sorted(glob.glob(os.path.join(run_dir, "rank-*.h5"))):
            with h5py.File(p, "r", swmr=True) as f:
                segment = int(f.attrs.get("segment", 0))
                if segment >= self.segments:
                    continue  # left by an earlier job here that started afresh
                for name in TABLES:
                    if name in f:
                        parts[name].append((segment, f[name][...]))
        # rows per table left out: work lost since a checkpoint, redone after it
        self._tables, self.redone = _without_lost_work(parts)

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
        return {
            "run": self.name,
            "paradigm": self.paradigm,
            "status": self.status,
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
        }

    def time_to_accuracy(self, target: float) -> float | None:
        """Seconds until an evaluation first reached `target` (None if never)."""
        ev = self.evaluations
        hit = np.flatnonzero(ev["accuracy"] >= target)
        return float(ev["time"][hit[0]]) if hit.size else None

    def epochs_to_accuracy(self, target: float) -> float | None:
        """Epochs of samples pushed until an evaluation first reached `target`
        (None if never): the statistical side of time to accuracy, which a
        loaded machine's timing noise does not touch."""
        ev = self.evaluations
        hit = np.flatnonzero(ev["accuracy"] >= target)
        return float(ev["epoch"][hit[0]]) if hit.size else None
