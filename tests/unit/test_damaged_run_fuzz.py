"""A seeded fuzz over damaged run directories: every file of a finished run
(run.h5 and each rank file) gets bytes altered, is cut short, or has a table
swapped for one of another shape; `mpips info`, `summarize` and `plot` must
each end within seconds with their output or one line (a warning or an
error), never a hang or a traceback.

HDF5 retries a metadata read that fails its checksum for minutes when the
file is opened for SWMR reading, which readers do for files still being
written (mpips/io/log.py, `_open_rank_file`); a finished file is read
without it."""
from __future__ import annotations

import contextlib
import io
import shutil
import time

import h5py
import numpy as np
import pytest

from mpips.analysis import plot, summarize
from mpips.cli import main

CASES = 200
SEED = 35
# CPU seconds each tool may spend on a damaged run: this process's own time, so
# another process's load does not count (a tool blocked without computing is
# the suite's timeout's to end)
LIMIT = 10.0


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A small finished simulated run: 1 server, 2 workers, the evaluator (4 rank files)."""
    run = tmp_path_factory.mktemp("fuzz") / "run"
    assert main(["simulate", "--run-dir", str(run), "--workers", "2", "--evaluator", "--epochs", "1",
                 "--eval-every", "0.5"]) == 0
    return run


def damage(run, rng) -> str:
    """Damage one file of `run`, chosen by `rng`; returns what was done."""
    files = sorted(p for p in run.iterdir() if p.suffix == ".h5")
    path = files[rng.integers(len(files))]
    data = bytearray(path.read_bytes())
    kind = rng.choice(["bytes", "bytes", "bytes", "truncate", "swap"])
    if kind == "bytes":    # a few dozen bytes altered somewhere inside
        n = int(rng.integers(1, 64))
        at = int(rng.integers(0, len(data) - n))
        data[at:at + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(data))
        return f"{path.name}: {n} bytes at {at}"
    if kind == "truncate":
        keep = int(rng.integers(0, len(data)))
        path.write_bytes(bytes(data[:keep]))
        return f"{path.name}: cut to {keep} of {len(data)} bytes"
    with h5py.File(path, "a") as f:   # a table replaced by one of another shape or type
        names = [k for k in f if isinstance(f[k], h5py.Dataset)]
        if not names:
            return f"{path.name}: nothing to swap"
        name = names[rng.integers(len(names))]
        del f[name]
        shape = tuple(int(s) for s in rng.integers(0, 5, size=int(rng.integers(0, 3))))
        f.create_dataset(name, data=rng.normal(size=shape).astype(rng.choice(["f4", "i8", "f8"])))
    return f"{path.name}: {name} replaced by an array of shape {shape}"


def calls(run, out):
    yield "info", lambda: main(["info", str(run)])
    yield "summarize", lambda: summarize.main([str(run), "--csv", str(out / "t.csv")])
    yield "plot", lambda: plot.main([str(run), "-o", str(out / "figures")])


def test_damaged_runs_end_in_seconds_with_one_line_never_a_traceback(finished, tmp_path):
    rng = np.random.default_rng(SEED)
    slow, escaped = [], []
    for case in range(CASES):
        run = tmp_path / f"case{case}"
        shutil.copytree(finished, run)
        what = damage(run, rng)
        # plot is the slowest reader: it draws a quarter of the cases
        for tool, call in calls(run, tmp_path / f"out{case}"):
            if tool == "plot" and case % 4:
                continue
            err = io.StringIO()
            start = time.process_time()
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                    code = call()
            except BaseException as e:  # noqa: BLE001 - what escapes is the finding
                escaped.append(f"case {case} ({what}): {tool}: {type(e).__name__}: {e}")
                continue
            seconds = time.process_time() - start
            if seconds > LIMIT:
                slow.append(f"case {case} ({what}): {tool} took {seconds:.1f} CPU s")
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            if code not in (0, 1, 2) or any("Traceback" in line for line in lines) or len(lines) > 3:
                escaped.append(f"case {case} ({what}): {tool} exited {code}: {lines[:4]}")
        shutil.rmtree(run)
    assert not escaped and not slow, "\n".join(escaped + slow)


def test_bytes_altered_among_a_tables_rows_are_left_out_and_named(finished, tmp_path, capsys):
    """A table's rows have no checksum of HDF5's own (its metadata has): bytes
    altered among them were read as garbage (a worker 7 of 3, a staleness of
    1e17) and ended plot in an IndexError or a MemoryError. Their block is
    left out and named by every reader; the rest of the run is kept."""
    from mpips.io.log import RunLog

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    path = run / "rank-1.h5"   # worker 0
    with h5py.File(path, "r") as f:
        block, rows = f["iterations"].id.get_chunk_info(0), len(f["iterations"])
    data = bytearray(path.read_bytes())
    data[block.byte_offset + 100:block.byte_offset + 108] = bytes(range(0x51, 0x59))   # in its first row
    path.write_bytes(bytes(data))
    log = RunLog(str(run))
    assert log.problems == [f"rank-1.h5 damaged: rows left out (iterations {min(rows, 256)})"]
    assert not log.completeness()["complete"] and set(log.iterations["worker"]) == {1}
    assert main(["info", str(run)]) == 1
    assert plot.main([str(run), "-o", str(tmp_path / "figures")]) == 0
    assert summarize.main([str(run)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all("rank-1.h5 damaged: rows left out" in line for line in err), err
