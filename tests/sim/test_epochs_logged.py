"""The epoch an evaluation logs is the data trained: never more than the
samples claimed from the global budget. A Local SGD push counts as H batches
in the servers' push count, and a worker's last push (or one under DyLU) has
fewer: `--workers 3 --epochs 2 --paradigm localsgd --local-steps 100` logged
epoch 3.34 after its one round of 2,876 samples (2 epochs); an asynchronous
DyLU run of 6 epochs reached 9.35, and summarize's epochs to a target read it."""
from __future__ import annotations

import numpy as np
import pytest

import mpips


@pytest.mark.parametrize("settings, epochs", [
    ({"local_steps": 100}, 2),
    ({"local_mode": "async", "dylu": True}, 3),
])
def test_local_sgd_logs_the_epochs_of_its_samples(tmp_path, settings, epochs):
    log = mpips.simulate(paradigm="localsgd", workers=3, epochs=epochs, eval_every=0.5, evaluator=True,
                         run_dir=str(tmp_path / "run"), **settings)
    ev = log.evaluations
    assert log.summary()["samples"] == log.layout["total_samples"] == epochs * 1438   # digits' training set
    assert ev["epoch"][-1] == pytest.approx(epochs)
    assert np.all(np.diff(ev["epoch"]) >= 0)
