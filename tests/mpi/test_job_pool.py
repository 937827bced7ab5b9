"""The job pool the other job tests run in (tests/job_pool.py): a job that
aborts ends the pool and comes back as a failure with its output, never as a
hang; a pool that ended is cleaned up, and the next job gets a new one."""
from __future__ import annotations

import os

from conftest import POOL, kill_job, train


def test_an_aborting_job_ends_the_pool_and_the_next_job_gets_a_new_one(tmp_path):
    code, out = POOL.run(3, ["train", "--run-dir", str(tmp_path / "aborted"), "--iterations", "5",
                             "--fail-at", "1:2", "--stall-timeout", "60"], timeout=120)
    assert code != 0
    assert "injected failure (fail_at) at worker 1 iteration 2" in out and "aborting the job" in out, out
    assert "the job pool ended" in out, out
    assert POOL.proc is None and not os.path.exists(POOL.folder)
    assert train(3, tmp_path / "next", "--iterations", "5").log.summary()["status"] == "finished"


def test_a_pool_that_ended_between_two_jobs_is_replaced(tmp_path):
    train(3, tmp_path / "first", "--iterations", "5")
    ended = POOL.folder
    kill_job(POOL.proc)   # its ranks lost while no job ran
    assert train(3, tmp_path / "next", "--iterations", "5").log.summary()["status"] == "finished"
    assert POOL.folder != ended and not os.path.exists(ended)
