"""Checkpoint files: what a checkpoint holds, on disk, and which one a job resumes from.

One HDF5 file per checkpoint, <run>/checkpoints/ckpt-<step>.h5 (step =
server 0's optimizer steps), written by rank 0 under a temporary name and
renamed when complete (removed if the write fails: a full disk is
mpips.io.log.DiskFull); the newest KEEP are kept. It holds:

- `meta` (JSON): the checkpoint's number and reason, the segment (job) that
  wrote it, the training time, clocks and server steps at the cut, the
  configuration, and the `identity` a resuming job must match (model,
  dataset, parameter count, layout, ...);
- `rank-<r>/state` (JSON) and `rank-<r>/<i>` (arrays): rank r's state, as
  `encode` writes any nest of dicts, lists, scalars, numpy arrays and torch
  tensors (mpips/runtime/recovery/checkpointer.py says what each role puts there);
- attribute `sha256` over all of it, verified on load.

A job whose run directory holds checkpoints of an unfinished run resumes
from the newest (`find_resume`). One that cannot be read, fails its checksum,
is not what mpips writes (its meta or a rank's state of another shape, a
rank's state missing) or was made for another model or layout stops the job
with one line naming the file and the problem (CheckpointError; a corrupt one
is not skipped silently: the message says which older one deleting it would
resume from).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import reprlib
from dataclasses import dataclass

import h5py
import numpy as np
import torch

from .durable import written_whole

KEEP = 2                # newest checkpoints kept
FORMAT = "mpips-checkpoint-1"
_NAME = re.compile(r"^ckpt-(\d+)\.h5$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from. `str()` is one line naming the file."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"checkpoint {path}: {problem}")


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def checkpoint_files(run_dir: str) -> list[str]:
    """The run's checkpoints, oldest (fewest steps) first."""
    folder = checkpoint_dir(run_dir)
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(folder, name)))
    return [path for _, path in sorted(found)]


def identity(config, layout, parameters: int, iterations: int) -> dict:
    """What a checkpoint must share with the job that resumes from it: the
    model and data, the layout, and what the saved state's shape or meaning
    depends on (the data partition follows the seed, a done worker's clock
    the iterations)."""
    return {"model": config.model, "dataset": config.dataset, "parameters": int(parameters),
            "paradigm": config.paradigm, "optimizer": config.optimizer,
            "compressor": config.compressor, "batch_size": config.batch_size, "seed": config.seed,
            "iterations": int(iterations), "servers": layout.servers,
            "group_servers": layout.group_servers, "workers": layout.workers}


# --- states as JSON plus arrays ----------------------------------------------------

def encode(state) -> tuple[str, list[np.ndarray]]:
    """`state` (dicts, lists, numbers, strings, numpy arrays, torch tensors) as
    JSON text plus the arrays it refers to by index."""
    arrays: list[np.ndarray] = []

    def enc(x):
        if isinstance(x, torch.Tensor):
            arrays.append(x.detach().cpu().numpy().copy())
            return {"__tensor__": len(arrays) - 1}
        if isinstance(x, np.ndarray):
            arrays.append(np.array(x))
            return {"__array__": len(arrays) - 1}
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {k: enc(v) for k, v in x.items()}
            # e.g. torch's optimizer state, keyed by int: JSON would make the keys strings
            return {"__items__": [[enc(k), enc(v)] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return [enc(v) for v in x]
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"a checkpoint cannot hold a {type(x).__name__}")

    return json.dumps(enc(state)), arrays


def decode(text: str, arrays: list[np.ndarray]):
    """The inverse of `encode`; ValueError saying what is wrong where `text`
    is not a state it wrote over `arrays` (read_checkpoint names the file)."""
    def array(i):
        if type(i) is not int or not 0 <= i < len(arrays):
            raise ValueError(f"refers to array {i!r} of {len(arrays)}")
        return np.array(arrays[i])

    def dec(x):
        if isinstance(x, dict):
            if len(x) == 1 and "__tensor__" in x:
                return torch.from_numpy(array(x["__tensor__"]))
            if len(x) == 1 and "__array__" in x:
                return array(x["__array__"])
            if len(x) == 1 and "__items__" in x:
                return {dec(k): dec(v) for k, v in x["__items__"]}
            return {k: dec(v) for k, v in x.items()}
        if isinstance(x, list):
            return [dec(v) for v in x]
        return x

    try:
        return dec(json.loads(text))
    except (ValueError, TypeError, RecursionError) as e:   # (not JSON; items not pairs; a dtype torch lacks)
        raise ValueError(f"not a state mpips wrote ({type(e).__name__}: {' '.join(str(e).split())})") from None


# --- files --------------------------------------------------------------------------

def _digest(meta_text: str, ranks: list[tuple[str, list[np.ndarray]]]) -> str:
    h = hashlib.sha256(meta_text.encode())
    for text, arrays in ranks:
        h.update(text.encode())
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _text(ds) -> str:
    return ds[()].tobytes().decode()


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8)


def write_checkpoint(run_dir: str, meta: dict, ranks: list[tuple[str, list[np.ndarray]]]) -> str:
    """One file for the whole cut (`ranks[r]` = rank r's encoded state),
    renamed into place once complete; older ones beyond the newest KEEP go."""
    folder = checkpoint_dir(run_dir)
    name = f"ckpt-{meta['step']:08d}.h5"
    path, tmp = os.path.join(folder, name), os.path.join(folder, f".{name}.tmp")
    meta_text = json.dumps(meta)
    # renamed once whole (a job killed meanwhile leaves the old ones intact);
    # none if it fails (a full disk: DiskFull naming the checkpoint)
    with written_whole(path, tmp) as f:
        f.attrs["format"] = FORMAT
        f.create_dataset("meta", data=_bytes(meta_text))
        for r, (text, arrays) in enumerate(ranks):
            g = f.create_group(f"rank-{r}")
            g.create_dataset("state", data=_bytes(text))
            for i, a in enumerate(arrays):
                g.create_dataset(str(i), data=a)
        f.attrs["sha256"] = _digest(meta_text, ranks)
    for old in checkpoint_files(run_dir)[:-KEEP]:
        os.remove(old)
    return path


def read_checkpoint(path: str) -> tuple[dict, list[tuple[str, list[np.ndarray]]]]:
    """(meta, per-rank encoded states), checksum verified; CheckpointError if not usable."""
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise CheckpointError(path, f"not an mpips checkpoint (format {f.attrs.get('format')!r})")
            meta_text = _text(f["meta"])
            ranks = []
            for r in range(sum(1 for k in f if k.startswith("rank-"))):
                g = f[f"rank-{r}"]
                arrays = [np.asarray(g[str(i)][()]) for i in range(len(g) - 1)]
                ranks.append((_text(g["state"]), arrays))
            stored = str(f.attrs["sha256"])
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - damaged HDF5 makes h5py raise almost anything
        detail = " ".join(str(e).split())
        raise CheckpointError(path, f"cannot be read ({type(e).__name__}: {detail})") from None
    actual = _digest(meta_text, ranks)
    if actual != stored:
        raise CheckpointError(path, f"corrupt: its contents hash to sha256 {actual[:16]}..., "
                                    f"written as {stored[:16]}...")
    # Its checksum passed, yet it may not be what mpips wrote (another program's file,
    # or one edited and its checksum redone): found here, where the file is named, not
    # by a rank as a TypeError or IndexError in `decode` (each rank's, one at a time).
    try:
        meta = json.loads(meta_text)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise CheckpointError(path, "its meta is not a JSON object")
    for r, (text, arrays) in enumerate(ranks):
        try:
            decode(text, arrays)
        except ValueError as e:
            raise CheckpointError(path, f"rank-{r}/state: {e}") from None
    return meta, ranks


def check_compatible(path: str, meta: dict, mine: dict) -> None:
    theirs = meta.get("identity", {})
    diffs = [f"{k} {theirs.get(k)!r} there, {v!r} here" for k, v in mine.items() if theirs.get(k) != v]
    if diffs:
        raise CheckpointError(path, "made for another run: " + "; ".join(diffs)
                              + " (resume with the same settings, or use another --run-dir)")


def run_attrs(run_dir: str) -> dict:
    """run.h5's attributes (mpips/io/log.py), or {} where there is none or it cannot be read."""
    try:
        with h5py.File(os.path.join(run_dir, "run.h5"), "r") as f:
            return dict(f.attrs)
    except Exception:  # noqa: BLE001 - a damaged HDF5 file raises many kinds
        return {}


@dataclass
class Resume:
    """The checkpoint a job continues from (read by rank 0)."""

    path: str
    meta: dict
    ranks: list          # rank r's encoded state at index r
    segment: int         # of the job that resumes


# What a resuming job reads of the meta (the Checkpointer, the segment event), and
# what each must be: a file without one ended in a KeyError or TypeError.
_META: dict[str, tuple[type | tuple[type, ...], str]] = {"number": (int, "an integer"), "segment": (int, "an integer"), "step": (int, "an integer"),
         "time": ((int, float), "a number"), "identity": (dict, "a JSON object"),
         "clocks": (list, "a list of integers"), "server_steps": (list, "a list of integers")}


def _check_meta(path: str, meta: dict) -> None:
    for key, (kind, what) in _META.items():
        value = meta.get(key)
        if (not isinstance(value, kind) or isinstance(value, bool)
                or (isinstance(value, list) and not all(type(v) is int for v in value))):
            raise CheckpointError(path, f"its meta has {key}={reprlib.repr(value)}, not {what}")


def find_resume(run_dir: str, mine: dict, ranks: int | None = None) -> Resume | None:
    """The newest checkpoint of an unfinished run in `run_dir`, verified and
    checked against this job's identity and its number of `ranks` (None: not
    checked); None to start afresh (no checkpoint, or the run finished: as
    without checkpoints, running again starts over)."""
    files = checkpoint_files(run_dir)
    attrs = run_attrs(run_dir)
    if not files or attrs.get("status") == "finished":
        return None
    path = files[-1]
    try:
        meta, states = read_checkpoint(path)
        _check_meta(path, meta)
    except CheckpointError as e:
        hint = (f"delete it to resume from {os.path.basename(files[-2])}" if len(files) > 1
                else "delete it to start afresh")
        raise CheckpointError(path, f"{e.problem}; {hint}") from None
    check_compatible(path, meta, mine)
    if ranks is not None and len(states) != ranks:
        # (a state per rank is scattered: another count failed in mpi4py's scatter)
        raise CheckpointError(path, f"holds the states of {len(states)} ranks, this job has {ranks} "
                                    f"(resume with the same settings and ranks, or use another --run-dir)")
    segment = max(int(attrs.get("segments", 1)), meta["segment"] + 1)
    return Resume(path, meta, states, segment)


def clear_checkpoints(run_dir: str) -> None:
    """A fresh start: an earlier run's checkpoints here must never be resumed."""
    folder = checkpoint_dir(run_dir)
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if _NAME.match(name) or name.endswith(".h5.tmp"):
            os.remove(os.path.join(folder, name))
