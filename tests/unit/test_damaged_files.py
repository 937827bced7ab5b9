"""Fault injection without MPI: damaged checkpoints and run logs, bad settings.

The MPI half of the matrix (kill, stop and continue, a signal during
start-up, bad input through a whole job) is in tests/mpi/test_fault_injection.py.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from mpips.io.checkpoint import CheckpointError, encode, read_checkpoint, write_checkpoint


def _checkpoint(run_dir) -> str:
    """A checkpoint shaped like a real one (meta; per rank a JSON state and
    its arrays), with many small arrays: most of the file is HDF5 metadata,
    where damage makes h5py raise more than OSError. Byte-identical every
    time (the fuzz below is seeded against these bytes)."""
    rng = np.random.default_rng(0)
    ranks = [encode({"arrays": [rng.normal(size=int(rng.integers(1, 40))).astype(np.float32)
                                for _ in range(12)], "rank": r}) for r in range(5)]
    return write_checkpoint(str(run_dir), {"number": 1, "step": 7, "segment": 0}, ranks)


def _same(a, b) -> bool:
    meta_a, ranks_a = a
    meta_b, ranks_b = b
    if meta_a != meta_b or len(ranks_a) != len(ranks_b):
        return False
    for (ta, xa), (tb, xb) in zip(ranks_a, ranks_b):
        if ta != tb or len(xa) != len(xb):
            return False
        if not all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                   for x, y in zip(xa, xb)):
            return False
    return True


CORRUPTIONS = 50
SEED = 18   # with this seed, 2 of the 50 bit flips made h5py raise TypeError/RuntimeError on 2026-11 main


def _read_damaged(path: str, damaged: bytes, original, where: str) -> str:
    """'error', 'intact', or what escaped."""
    with open(path, "wb") as fh:
        fh.write(damaged)
    try:
        got = read_checkpoint(path)
    except CheckpointError as e:
        assert "\n" not in str(e) and path in str(e), str(e)
        return "error"
    except Exception as e:  # noqa: BLE001 - what the test looks for
        return f"{where}: {type(e).__name__}: {e}"
    return "intact" if _same(got, original) else f"{where}: read back different data"


def test_corrupt_checkpoints_are_one_line_errors_or_intact(tmp_path):
    """Seeded single-bit flips anywhere in a checkpoint: every read is a
    one-line CheckpointError or the original data, never another exception."""
    path = _checkpoint(tmp_path)
    original = read_checkpoint(path)
    raw = open(path, "rb").read()
    rng = np.random.default_rng(SEED)
    outcomes = []
    for case in range(CORRUPTIONS):
        at, bit = int(rng.integers(0, len(raw))), int(rng.integers(0, 8))
        damaged = bytearray(raw)
        damaged[at] ^= 1 << bit
        outcomes.append(_read_damaged(str(tmp_path / "bad.h5"), bytes(damaged), original,
                                      f"case {case} (bit {bit} of byte {at})"))
    escapes = [o for o in outcomes if o not in ("error", "intact")]
    assert not escapes, "\n".join(escapes)
    assert outcomes.count("error") >= 10   # the damage was real


def test_truncated_checkpoints_are_one_line_errors(tmp_path):
    path = _checkpoint(tmp_path)
    original = read_checkpoint(path)
    raw = open(path, "rb").read()
    for at in np.linspace(0, len(raw) - 1, 10).astype(int):
        assert _read_damaged(str(tmp_path / "bad.h5"), raw[:at], original, f"cut at {at}") == "error"


def _run_h5(run_dir, **attrs):
    from mpips.io.log import write_run_header

    os.makedirs(run_dir, exist_ok=True)
    write_run_header(str(run_dir), config={"paradigm": "ssp", "epochs": 1.0}, versions={},
                     layout={"servers": 1, "group_servers": 0, "workers": 1, "iterations_per_worker": 3},
                     ranks=[0, 1])
    import h5py

    with h5py.File(os.path.join(run_dir, "run.h5"), "a") as f:
        for k, v in attrs.items():
            f.attrs[k] = v


@pytest.mark.parametrize("damage", ["config not JSON", "run.h5 truncated", "run.h5 not HDF5"])
def test_info_on_a_damaged_run_h5_is_one_line(tmp_path, capsys, damage):
    from mpips import cli
    from mpips.io.log import LogError, RunLog

    run = tmp_path / "run"
    _run_h5(run, **({"config": "{not json"} if damage == "config not JSON" else {}))
    path = run / "run.h5"
    if damage == "run.h5 truncated":
        os.truncate(path, 300)
    elif damage == "run.h5 not HDF5":
        path.write_bytes(b"hello")
    with pytest.raises(LogError) as e:
        RunLog(str(run))
    assert "run.h5" in str(e.value) and "\n" not in str(e.value)
    assert cli.main(["info", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("mpips: error:") and "run.h5" in err


def test_a_run_without_its_rank_files_is_not_complete(tmp_path):
    """run.h5 links the rank files the job wrote: one missing is named, and
    the run is not complete even if run.h5 says finished."""
    from mpips.io.log import RankLog, RunLog, rank_file

    run = tmp_path / "run"
    _run_h5(run, status="finished")
    log = RankLog(rank_file(str(run), 0), 0)
    log.close()
    whole = RunLog(str(run)).completeness()
    assert not whole["complete"]
    assert whole["reason"] == "rank-1.h5 missing; iterations logged of workers 0 (0 of 3)"
    assert whole["files"]["rank-0.h5"]["problem"] == "" and not whole["files"]["rank-1.h5"]["present"]
