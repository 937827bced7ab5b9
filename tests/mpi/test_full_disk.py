"""A full disk, for real: the run directory on a small tmpfs that the test
mounts (as root, as CI runs; skipped only where mounting is not permitted).
Wherever the disk fills (a rank's log, run.h5, a checkpoint), the job ends
within seconds with one line naming the file, leaves no partial file
(`*.tmp`), and what was written before stays readable: run.h5 by every tool
(its status `failed`, with the line as reason, where it can still be
written), the rank logs up to their last flush (no rows of zeros), the
checkpoints before (a job started again resumes from the newest).

Before: a checkpoint that ran out of space left its partial `.tmp` and a
warning, and the job went on until a log flush failed; a log flush that ran
out printed a traceback (two chained: the flush, then closing the log) on
each rank that met it; run.h5 changed in place (its final parameters) was
left unreadable by every tool, and said `finished` before the ranks' logs
were closed.

Sizes, measured (3 ranks, digits): mlp's rank logs of 50 epochs are about
870 KiB (rank 0 170, each worker 350, whatever the machine's speed), its
run.h5 80 KiB with the final parameters; resnet's checkpoint is 1.25 MiB,
its logs a few KiB a checkpoint (every 0.3 s). A job takes 4 to 11 s here.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import train

from mpips.io.checkpoint import checkpoint_files, find_resume, read_checkpoint
from mpips.io.log import DiskFull, RankLog, RunLog, rank_file, set_status, write_run_end, write_run_header


def log_row(log, table: str, *values) -> None:
    """A row given in its table's column order (RankLog.row takes names)."""
    from mpips.io.log import TABLES
    log.row(table, **dict(zip(TABLES[table].names, values)))


RANKS = 3   # a server (evaluating inline) and two workers
# flushes of 0.2 s, each asking little room: the disk fills with many before
LOGGING = ("--paradigm", "bsp", "--model", "mlp", "--epochs", "50", "--log-flush-seconds", "0.2")
# long enough for several checkpoints on any machine: the disk takes one
CHECKPOINTING = ("--paradigm", "bsp", "--model", "resnet", "--epochs", "10", "--checkpoint-every", "0.3")


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(KiB): a folder on a tmpfs of that size, unmounted after the test."""
    mounted = []

    def mount(kib: int):
        folder = tmp_path / f"disk-{len(mounted)}"
        folder.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(folder)],
                           capture_output=True, text=True)
        if p.returncode and re.search(r"permi|not allowed", p.stderr, re.I):
            pytest.skip(f"mounting a tmpfs is not permitted here: {p.stderr.strip()}")
        assert p.returncode == 0, p.stderr
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def _partial_files(folder) -> list[str]:
    return [os.path.join(d, name) for d, _, names in os.walk(folder) for name in names if name.endswith(".tmp")]


def _ends_in_one_line(job, run_dir: str, seconds: float) -> str:
    """The job failed within a bounded time with one line naming a file of
    the run, no traceback; returns the file."""
    assert seconds < 90, f"took {seconds:.0f} s"
    assert job.returncode == 1, job.output[-3000:]
    assert "Traceback" not in job.output, job.output[-3000:]
    errors = [line for line in job.output.splitlines() if line.startswith("mpips: error:")]
    assert len(errors) == 1, job.output[-3000:]
    found = re.fullmatch(rf"mpips: error: disk full writing ({re.escape(run_dir)}/\S+): .+", errors[0])
    assert found, errors[0]
    return found.group(1)


def _readable(run_dir: str) -> RunLog:
    """`mpips info` reads it (exit 0, or 1 with one line), as RunLog does;
    the run is not complete and says why."""
    p = subprocess.run([sys.executable, "-m", "mpips", "info", run_dir], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.splitlines()) <= 1 and "status " in p.stdout, p.stderr
    log = RunLog(run_dir)
    whole = log.completeness()
    assert not whole["complete"] and whole["reason"]
    assert not (log.iterations["batch"] == 0).any(), "rows of zeros: a flush written in part"
    return log


def test_a_disk_that_fills_with_the_logs_ends_the_job_in_one_line(small_disk):
    # less than the rank logs alone (how many rows a flush holds, and so how
    # much room it asks, depends on the machine's speed; their total does not)
    run_dir = str(small_disk(800) / "run")
    start = time.monotonic()
    job = train(RANKS, run_dir, *LOGGING, check=False, timeout=120)
    path = _ends_in_one_line(job, run_dir, time.monotonic() - start)
    assert re.fullmatch(r"rank-\d\.h5", os.path.basename(path)), path
    assert not _partial_files(run_dir)
    log = _readable(run_dir)
    assert len(log.iterations) > 0   # the rows of the flushes before
    assert log.status in ("failed", "incomplete")   # failed: run.h5 could still take its status
    if log.status == "failed":
        assert log.status_reason.startswith(f"disk full writing {path}")


def test_a_disk_that_fills_at_a_checkpoint_keeps_the_ones_before(small_disk):
    # room for the logs, run.h5 and one checkpoint, and not for a second (measured above)
    run_dir = str(small_disk(2000) / "run")
    start = time.monotonic()
    job = train(RANKS, run_dir, *CHECKPOINTING, check=False, timeout=120)
    path = _ends_in_one_line(job, run_dir, time.monotonic() - start)
    assert "mpips: checkpoint 1 (periodic)" in job.output, job.output[-3000:]
    assert re.fullmatch(rf"{re.escape(run_dir)}/checkpoints/ckpt-\d+\.h5", path), path
    assert not _partial_files(run_dir) and not os.path.exists(path)
    kept = checkpoint_files(run_dir)
    assert kept, "the checkpoint before is gone"
    meta, _ = read_checkpoint(kept[-1])   # whole: its checksum verified
    log = _readable(run_dir)
    assert log.status == "failed" and log.status_reason.startswith(f"disk full writing {path}")
    # started again (with space), the job goes on from the newest
    assert find_resume(run_dir, meta["identity"]).path == kept[-1]


def test_run_h5_is_written_whole_or_not_at_all(small_disk):
    """The cause of an unreadable run.h5: HDF5 changed it in place and ran
    out of space half-way. Its final parameters (256 KiB) do not fit on the
    disk: the change fails, run.h5 stays as it was, and a small one fits."""
    run = str(small_disk(128) / "run")
    os.makedirs(run)
    write_run_header(run, config={"paradigm": "bsp", "epochs": 1}, layout={"servers": 1, "workers": 1},
                     versions={}, ranks=[0])
    RankLog(rank_file(run, 0), 0).close()
    with pytest.raises(DiskFull) as e:
        write_run_end(run, wall_seconds=1.0, final_params=np.ones(64 * 1024, np.float32), status=None)
    assert str(e.value) == f"disk full writing {run}/run.h5: No space left on device"
    assert not _partial_files(run)
    log = RunLog(run)
    assert log.status == "incomplete" and log.final_params() is None
    set_status(run, "failed", str(e.value))
    assert RunLog(run).status_reason == str(e.value)


def test_a_log_flush_that_does_not_fit_writes_nothing(small_disk):
    """HDF5 that ran out of space in a flush wrote the tables' new lengths and
    not their rows (read back as zeros), and crashed the process closing the
    file: a flush the disk cannot hold is refused before it writes."""
    run = str(small_disk(512) / "run")
    os.makedirs(run)
    log = RankLog(rank_file(run, 1), 1)
    flushed = 0
    with pytest.raises(DiskFull, match=rf"^disk full writing {re.escape(run)}/rank-1\.h5: \d+ KiB free"):
        for _ in range(1000):
            for i in range(300):
                log_row(log, "iterations", 0, flushed + i, 0, 0, 0.0, 0, 0, 0, 0, 0, 16, 1, 1, 0,
                        np.nan, np.nan, 0, 0, 0.5, 0, -1, 0, 0.0, 0.0)
            log.flush()
            flushed += 300
    with pytest.raises(DiskFull):
        log.flush()   # and every flush after
    log.close()       # leaves the file as it is
    # read by another process, as a reader of a job's logs does
    code = (f"import h5py; f = h5py.File({rank_file(run, 1)!r}, 'r', swmr=True); "
            f"it = f['iterations'][...]; print(len(it), int((it['batch'] == 16).sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == [str(flushed), str(flushed)], out.stderr
