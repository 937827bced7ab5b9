"""Real workloads under MPI, small: MNIST-1D with its CNN on 1 server + 4
workers, and a user's dataset and model named `package.module:function`
(as the simulator's tests/sim/test_workloads.py, the same set-up)."""
from __future__ import annotations

import os

import numpy as np
from conftest import mpiexec, train

from mpips.io.log import RunLog
from tests.user_module import USER_MODULE


def test_mnist1d_with_its_cnn_trains_on_4_workers(tmp_path):
    log = train(5, tmp_path / "run", "--dataset", "mnist1d", "--model", "cnn1d", "--epochs", "2",
                "--paradigm", "bsp").log
    s = log.summary()
    assert s["complete"] and s["workers"] == 4 and log.model == "cnn1d" and log.dataset == "mnist1d", s
    loss = log.evaluations["loss"]
    assert len(loss) >= 2 and loss[-1] < loss[0] and np.isfinite(log.final_params()).all()


def test_a_users_dataset_and_model_by_name(tmp_path):
    (tmp_path / "userdata").mkdir()
    (tmp_path / "userdata" / "__init__.py").write_text("")
    (tmp_path / "userdata" / "mine.py").write_text(USER_MODULE)
    run = tmp_path / "run"
    p = mpiexec(3, ["-m", "mpips", "train", "--dataset", "userdata.mine:clusters", "--model",
                    "userdata.mine:linear", "--epochs", "3", "--run-dir", str(run)],
                env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert p.returncode == 0, p.stdout
    log = RunLog(str(run))
    assert log.completeness()["complete"]
    assert log.dataset.startswith("userdata.mine:clusters") and log.model.startswith("userdata.mine:linear")
    loss = log.evaluations["loss"]
    assert loss[-1] < loss[0], loss
