"""The job pool the other job tests run in (tests/job_pool.py): a job that
aborts ends the pool and comes back as a failure with its output, never as a
hang, and the next job gets a new pool."""
from __future__ import annotations

from conftest import POOL, train


def test_an_aborting_job_ends_the_pool_and_the_next_job_gets_a_new_one(tmp_path):
    code, out = POOL.run(3, ["train", "--run-dir", str(tmp_path / "aborted"), "--iterations", "5",
                             "--fail-at", "1:2", "--stall-timeout", "60"], timeout=120)
    assert code != 0
    assert "injected failure (fail_at) at worker 1 iteration 2" in out and "aborting the job" in out, out
    assert "the job pool ended" in out, out
    assert POOL.proc is None
    assert train(3, tmp_path / "next", "--iterations", "5").log.summary()["status"] == "finished"
