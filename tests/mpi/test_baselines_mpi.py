"""The modern baselines under real MPI: Local SGD's BSP oracle, backup workers."""
from __future__ import annotations

import numpy as np

from conftest import even_rounds, replayed_run, train
from mpips.config import load

FLAGS = ["--batch-size", "16", "--iterations", "10", "--lr", "0.1", "--seed", "3"]


def bsp_config(momentum: float):
    return load(overrides={"lr": 0.1, "momentum": momentum, "seed": 3, "workers": 4})


def test_localsgd_of_one_sgd_step_averaged_is_bsp(tmp_path):
    log = train(5, tmp_path / "run", "--paradigm", "localsgd", "--local-steps", "1", "--momentum", "0",
                "--outer-lr", "1", "--outer-momentum", "0", "--slowdown", "1,1,2,4", *FLAGS).log
    config = bsp_config(0.0)
    expected = replayed_run(config, even_rounds(config, np.full((10, 4), 16)))
    assert np.abs(log.final_params() - expected).max() < 1e-6


def test_backup_workers_drop_a_straggler_and_without_them_are_bsp(tmp_path):
    """Two servers: b = 0 is the BSP replay bit for bit; with b = 1 the 4x
    slower worker's pushes are dropped, and both servers apply rounds of the
    same pushes (server 0 decides)."""
    none = train(6, tmp_path / "b0", "--paradigm", "backup", "--backup-workers", "0", "--momentum", "0.9",
                 "--servers", "2", "--slowdown", "1,1,2,4", *FLAGS).log
    config = bsp_config(0.9)
    np.testing.assert_array_equal(none.final_params(),
                                  replayed_run(config, even_rounds(config, np.full((10, 4), 16))))
    one = train(6, tmp_path / "b1", "--paradigm", "backup", "--servers", "2", "--slowdown", "1,1,1,4",
                "--device-time", "20ms", *FLAGS).log
    assert one.status == "finished" and 3 in {e["worker"] for e in one.events("dropped_push")}
    applies = one.applies
    pushes = [np.sort(applies[applies["server"] == s], order="step")["pushes"] for s in (0, 1)]
    assert np.array_equal(*pushes) and (pushes[0] <= 3).all()
