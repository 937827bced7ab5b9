"""Real workloads in the simulator: MNIST (mnist5k) with LeNet-5 on 16
workers, MNIST-1D with its CNN, and a user's dataset and model, named
`package.module:function` on the command line (`mpips simulate`, `mpips
compare --simulate`) or given as objects to `mpips.simulate`. The run log
names what was trained, never the configuration's defaults."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpips
from mpips.analysis import summarize
from mpips.cli import main
from mpips.config import ConfigError
from mpips.io.log import RunLog
from mpips.training.models import build_model
from tests.user_module import USER_MODULE

CLUSTERS = "400 training and 100 test samples of shape (6,), 4 classes"


@pytest.fixture
def user_module(tmp_path, monkeypatch, user_package):
    """A package of the user's beside the job: in the current directory, which
    `mpips` puts first on the module search path (and so do the runs
    `mpips compare` starts)."""
    monkeypatch.chdir(tmp_path)
    return user_package("data", USER_MODULE)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIPS_CACHE", str(tmp_path / "cache"))


def initial_params(model: str, shape, seed: int = 0) -> np.ndarray:
    torch.manual_seed(seed)   # as every rank builds it
    return torch.nn.utils.parameters_to_vector(build_model(model, shape, 10).parameters()).detach().numpy()


def test_mnist5k_with_lenet5_on_16_workers(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["simulate", "--dataset", "mnist5k", "--model", "lenet5", "--workers", "16",
                 "--iterations", "5", "--run-dir", str(run)]) == 0
    assert "| lenet5 on mnist5k (61706 parameters) | 1280 samples in all |" in capsys.readouterr().out
    log = RunLog(str(run))
    assert (log.status, log.model, log.dataset, log.layout["workers"]) == ("finished", "lenet5", "mnist5k", 16)
    it = log.iterations_df
    assert sorted(it["worker"].unique()) == list(range(16)) and it["batch"].sum() == 16 * 5 * 16
    assert log.summary()["rejected_pushes"] == 0
    final = log.final_params()
    assert final.shape == (61706,) and not np.allclose(final, initial_params("lenet5", (1, 28, 28)))


def test_mnist1d_with_its_cnn(tmp_path):
    run = tmp_path / "run"
    assert main(["simulate", "--dataset", "mnist1d", "--model", "cnn1d", "--workers", "4", "--epochs", "3",
                 "--run-dir", str(run)]) == 0
    log = RunLog(str(run))
    assert (log.status, log.model, log.dataset, log.layout["parameters"]) == ("finished", "cnn1d", "mnist1d", 5210)
    assert log.iterations_df["batch"].sum() == 3 * 4000   # three passes over the published training set
    losses = log.evaluations_df["loss"].to_numpy()
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.05   # it learns
    assert not np.allclose(log.final_params(), initial_params("cnn1d", (40,)))


def test_a_users_dataset_and_model_by_name(tmp_path, user_module, capsys):
    dataset, model = f"{user_module}:clusters", f"{user_module}:linear"
    assert main(["simulate", "--dataset", dataset, "--model", model, "--workers", "3", "--epochs", "3",
                 "--run-dir", "run"]) == 0
    assert f"| {model} on {dataset}: {CLUSTERS} (" in capsys.readouterr().out
    log = RunLog(str(tmp_path / "run"))
    assert (log.status, log.model, log.dataset) == ("finished", model, f"{dataset}: {CLUSTERS}")
    assert (log.config["dataset"], log.config["model"], log.user_objects) == (dataset, model, {})
    assert log.iterations_df["batch"].sum() == 3 * 400 and log.final_params().shape == (6 * 4 + 4,)
    losses = log.evaluations_df["loss"].to_numpy()
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert summarize.workload(log) == f"{model} on {dataset}"


@pytest.mark.parametrize("dataset, problem", [
    ("{}:missing", "module {} has no function missing"),
    ("no_such_package_xyz.data:clusters", "cannot import no_such_package_xyz.data"),
    ("{}", "allowed: digits, mnist, cifar10, synthetic, mnist1d, mnist5k, or package.module:function"),
])
def test_a_users_dataset_that_cannot_be_used_is_one_line(tmp_path, user_module, capsys, dataset, problem):
    dataset = dataset.format(user_module)
    assert main(["simulate", "--dataset", dataset, "--workers", "3", "--run-dir", "run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mpips: error: invalid dataset='{dataset}': {problem.format(user_module)}")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_compare_simulated_on_a_users_dataset(tmp_path, user_module):
    dataset, model = f"{user_module}:clusters", f"{user_module}:linear"
    assert main(["compare", "--simulate", "--paradigms", "ssp", "--workers", "3", "--epochs", "1",
                 "--dataset", dataset, "--model", model, "--runs", "runs", "--out", "out"]) == 0
    log = RunLog(str(tmp_path / "runs" / "ssp-s0"))
    assert (log.status, log.model, log.dataset) == ("finished", model, f"{dataset}: {CLUSTERS}")
    assert f"| {model} on {dataset} |" in (tmp_path / "out" / "table.md").read_text()


CALLS = []


def counted(out, target):   # the user's loss: counted, then cross-entropy
    CALLS.append(len(target))
    return torch.nn.functional.cross_entropy(out, target)


def tiny(shape, classes):
    return torch.nn.Linear(shape[0], classes)


def test_mpips_simulate_from_python(tmp_path):
    x = np.random.default_rng(1).normal(size=(500, 6)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)
    CALLS.clear()
    log = mpips.simulate(paradigm="ssp", workers=3, epochs=3, run_dir=str(tmp_path / "run"), batch_size=20,
                         model=tiny, loss=counted,
                         dataset=(x[:400], labels[:400], torch.from_numpy(x[400:]), labels[400:]))
    assert isinstance(log, RunLog) and log.status == "finished" and log.simulated
    described = "user: 400 training and 100 test samples of shape (6,), 4 classes"
    assert log.user_objects == {"model": "<tiny>", "dataset": described, "loss": "counted"}
    assert (log.model, log.dataset) == ("<tiny> (Linear)", described)
    assert log.iterations_df["batch"].sum() == 3 * 400
    assert sum(CALLS) >= 3 * 400   # the user's loss computed every gradient (and the evaluations)
    losses = log.evaluations_df["loss"].to_numpy()
    assert losses[-1] < losses[0] - 0.05


def test_mpips_simulate_settings_as_train_takes_them(tmp_path):
    config = mpips.Config(workers=2, epochs=1, run_dir=str(tmp_path / "a"))
    log = mpips.simulate(config, paradigm="bsp")
    assert (log.config["paradigm"], log.config["workers"], log.model, log.dataset) == ("bsp", 2, "mlp", "digits")
    assert log.user_objects == {}
    with pytest.raises(ConfigError, match="simulate needs the number of workers"):
        mpips.simulate(epochs=1, run_dir=str(tmp_path / "b"))
    with pytest.raises(ConfigError, match="a user's dataset is"):
        mpips.simulate(workers=2, run_dir=str(tmp_path / "c"), dataset=np.zeros(3))
