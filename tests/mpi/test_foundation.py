"""The foundation under real MPI: BSP bit for bit, SSP's bound, ASP, accuracy, no hangs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import (
    assert_each_sample_once,
    even_rounds,
    one_round_float_bound,
    replayed_run,
    rounds_of,
    train,
    uneven_sgd_oracle,
)

from mpips.config import load
from tests.thresholds import SETUPS

BSP_FLAGS = ["--paradigm", "bsp", "--batch-size", "16", "--iterations", "20", "--lr", "0.1",
             "--momentum", "0.9", "--seed", "3"]


def bsp_config():
    return load(overrides={"lr": 0.1, "momentum": 0.9, "seed": 3, "workers": 4})


def test_two_bsp_runs_give_the_replayed_parameters_bit_for_bit(tmp_path):
    # 2 servers; the slowdowns make the workers' pushes arrive, and their
    # batches get claimed from the global stream, in different orders in the
    # two runs. Servers sum the slots by where each batch starts in the
    # stream: the runs agree bit for bit, with each other and with the
    # one-process replay of 20 rounds of 4 x 16 samples.
    logs = [train(6, tmp_path / f"run{k}", *BSP_FLAGS, "--servers", "2", "--slowdown", slow).log
            for k, slow in enumerate(["1,1,2,4", "4,2,1,1"])]
    for log in logs:
        assert_each_sample_once(log)
    owners = [log.iterations["worker"][np.argsort(log.iterations["sample"])] for log in logs]
    assert not np.array_equal(*owners), "both runs claimed the same batches for the same workers"
    expected = replayed_run(bsp_config(), even_rounds(bsp_config(), np.full((20, 4), 16)))
    np.testing.assert_array_equal(logs[0].final_params(), logs[1].final_params())
    np.testing.assert_array_equal(logs[0].final_params(), expected)
    # and it really trained
    initial = replayed_run(bsp_config(), [])
    assert np.abs(expected - initial).max() > 0.01


def test_bsp_with_a_per_worker_budget_gives_the_replayed_parameters(tmp_path):
    # each worker reads its own shard: the servers sum the slots in worker order
    log = train(6, tmp_path / "run", *BSP_FLAGS, "--servers", "2", "--slowdown", "1,1,2,4",
                "--budget", "per-worker").log
    config = load(overrides={**bsp_config().to_dict(), "budget": "per-worker"})
    np.testing.assert_array_equal(log.final_params(),
                                  replayed_run(config, even_rounds(config, np.full((20, 4), 16))))


@pytest.mark.parametrize("budget", ["global", "per-worker"])
@pytest.mark.parametrize("batch", [(16, 16, 16, 16), (100, 60, 30, 66)])
def test_a_replayed_round_is_sgd_on_the_concatenated_batch(batch, budget):
    """The replay (what the runtime computes) against docs/paradigms.md's
    definition of a round, exact SGD on all W batches at once (float64):
    within a bound derived from float32 rounding (conftest.one_round_float_bound)."""
    config = load(overrides={**bsp_config().to_dict(), "budget": budget})
    batches = np.array([batch])
    got = replayed_run(config, even_rounds(config, batches))
    exact = uneven_sgd_oracle(config, batches, torch.float64)
    bound = one_round_float_bound(config, batches)
    excess = np.abs(got - exact) - bound
    assert excess.max() <= 0, f"{(excess > 0).sum()} parameters beyond the float bound"
    initial = replayed_run(config, [])
    assert (np.abs(exact - initial) > 10 * bound).mean() > 0.5   # the step dwarfs the bound


@pytest.fixture(scope="module")
def ssp_runs(tmp_path_factory):
    """SSP(s) for s in 0, 1, 3 and ASP, all with slowdowns 1,1,1,4 of a 5 ms device."""
    runs = {}
    # 3 epochs: the claims do not grow with the run (a bound at every gate,
    # waits and iteration counts as ratios, ASP's gap: ~60 clocks, > 3 asked);
    # SSP(3)'s accuracy with this straggler is the simulator's (tests/sim), where
    # it does not depend on how the machine's load interleaves the pushes
    for name, epochs, flags in [("ssp0", 3, ["--paradigm", "ssp", "--staleness", "0"]),
                                ("ssp1", 3, ["--paradigm", "ssp", "--staleness", "1"]),
                                ("ssp3", 3, ["--paradigm", "ssp", "--staleness", "3"]),
                                ("asp", 3, ["--paradigm", "asp"])]:
        # emulated device time: the 4x worker is 4x slower whatever the machine's load
        runs[name] = train(5, tmp_path_factory.mktemp(name), *flags, "--slowdown", "1,1,1,4",
                           "--device-time", "5ms", "--epochs", str(epochs), "--lr", "0.1",
                           "--eval-every", "5").log
    return runs


@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_bound_holds_at_every_gate(ssp_runs, s):
    it = ssp_runs[f"ssp{s}"].iterations
    assert_each_sample_once(ssp_runs[f"ssp{s}"])   # the whole global budget, each sample once
    assert it["clock_gap"].max() <= s, "a gate passed with c_i - c_min > s"
    fast = it[it["worker"] < 3]
    assert fast["wait"].sum() > 0.2 * fast["compute"].sum(), "fast workers never waited for the slow one"


def test_ssp_gate_is_tight_enough_to_use_the_slack(ssp_runs):
    # s=3 lets fast workers run ahead of the slow one: gaps above 1 occur.
    assert ssp_runs["ssp3"].iterations["clock_gap"].max() >= 2


def test_asp_waits_only_for_its_own_pushes_and_sees_staleness(ssp_runs):
    # ASP's gate waits only until the worker's own pushes are applied
    # (read-your-writes), never for the slow worker as SSP(0) does
    it, ssp0 = ssp_runs["asp"].iterations, ssp_runs["ssp0"].iterations
    fast_wait = it[it["worker"] < 3]["wait"].sum() / (it["worker"] < 3).sum()
    ssp0_wait = ssp0[ssp0["worker"] < 3]["wait"].sum() / (ssp0["worker"] < 3).sum()
    assert fast_wait < 0.2 * ssp0_wait, (fast_wait, ssp0_wait)
    assert it[it["worker"] == 3]["staleness"].max() > 0
    assert it["clock_gap"].max() > 3  # no bound: fast workers run far ahead
    # and the global budget: the fast workers did more of it than the slow one
    counts = np.bincount(it["worker"])
    assert counts[:3].min() > 2 * counts[3], counts
    assert_each_sample_once(ssp_runs["asp"])


# BSP's run is exact (tests/thresholds.py: bsp-mpi, its margin over seeds and kernels). ASP's accuracy is not asserted here: its staleness follows
# how the OS interleaves 5 ranks on 2 cores (at lr 0.1 held constant: mean
# staleness 1.0, 0.928-0.983 in 12 runs; with --device-time 20ms, a homogeneous
# cluster, 2.8 and 0.401-0.811 in 3). tests/sim checks ASP's accuracy, exactly.
def test_bsp_reaches_90_percent(tmp_path):
    setup = SETUPS["bsp-mpi"]
    log = train(setup.ranks, tmp_path / "run", *setup.flags).log
    s = log.summary()
    assert s["final_accuracy"] >= setup.threshold
    assert s["max_staleness"] == 0 and s["max_clock_gap"] == 0


def test_eight_ranks_oversubscribed_finish(tmp_path):
    log = train(8, tmp_path / "run", "--paradigm", "ssp", "--servers", "2", "--epochs", "2",
                "--slowdown", "1,1,2,1,1,3", "--budget", "per-worker").log
    s = log.summary()
    assert s["status"] == "finished" and s["workers"] == 6
    assert s["iterations"] == 6 * log.layout["iterations_per_worker"]
    assert s["pushes"] == s["iterations"]


def test_a_nan_gradient_is_rejected_and_the_others_are_applied_bit_for_bit(tmp_path):
    # BSP, so that the run is exact: every round steps, and the parameters are
    # the one-process replay of the pushes not rejected, the NaN never applied.
    # No accuracy threshold: which batch a rejected push had claimed from the
    # global stream changes from run to run, and the final accuracy at lr 0.1
    # with it (0.894 in one run, above 0.90 in others; under SSP 0.886-0.986
    # in 25 runs here). SSP's rejections: tests/sim, where the run is exact.
    log = train(5, tmp_path / "run", "--paradigm", "bsp", "--epochs", "10", "--lr", "0.1", "--momentum", "0.9",
                "--seed", "3", "--nan-at", "2:5,1:40").log
    s = log.summary()
    assert s["status"] == "finished" and s["rejected_pushes"] == 2
    rejected = log.events("rejected_push")
    assert {(e["worker"], e["iteration"]) for e in rejected} == {(2, 5), (1, 40)}
    rounds = rounds_of(log)
    assert sum(len(pushes) for pushes in rounds) == s["pushes"] - 2 and s["updates"] == len(rounds)
    np.testing.assert_array_equal(log.final_params(), replayed_run(bsp_config(), rounds))
