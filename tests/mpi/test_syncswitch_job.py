"""Sync-Switch under MPI: an offline run (BSP -> ASP at f of the budget), an
online run with a transient straggler (ASP and back to BSP, two servers), and
the search for f, each checked from its run log."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import MPI_ENV, assert_each_sample_once, train
from mpips.io.log import RunLog

F = 0.1
MOMENTUM = 0.9
# Momentum comes back to 0.9 over 400 pushes (about half the ASP phase): with
# 40, ASP at full momentum on 3 ranks over 2 cores (the server, starved, sums
# 20-30 stale pushes into a step) ended between 0.52 and 0.95 in 11 runs;
# with 400, between 0.925 and 0.972 in 5.
RAMP = 400


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("syncswitch") / "offline"
    # 2 workers, a moderate lr and few evaluations: on an oversubscribed machine a
    # starved server (or one evaluating) sums many stale ASP pushes into one step,
    # and with lr 0.05 about one run in four ended below 90%; 14 epochs leave a margin
    # (10 ended at 89.1% once in a clean-clone run)
    return train(3, run_dir, "--paradigm", "syncswitch", "--switch-at", str(F), "--epochs", "14",
                 "--lr", "0.03", "--lr-schedule", "cosine", "--eval-every", "2",
                 "--momentum", str(MOMENTUM), "--momentum-ramp", str(RAMP), "--seed", "0").log


@pytest.fixture(scope="module")
def online(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("syncswitch") / "online"
    # The online policy at its defaults (slow = 1.5x the median for 3 rounds)
    # against a 4x straggler of 30 iterations, on an emulated 20 ms device:
    # without device time, 2 cores' contention made workers 2.5x slower now
    # and then and fired the detector before the straggler began, and the
    # test had been loosened to a 10x straggler and a factor of 3. The exact
    # policy (when it switches, greedy against conservative) is checked in
    # the simulator (tests/sim); here, that switching both ways on the real
    # transport loses, doubles and deadlocks nothing.
    return train(6, run_dir, "--paradigm", "syncswitch", "--servers", "2", "--online-policy", "greedy",
                 "--device-time", "20ms", "--switch-at", "0.5", "--straggler", "3:20:30:4",
                 "--iterations", "400", "--eval-every", "5", "--seed", "0").log


def phases(log: RunLog) -> list[tuple[int, int, str]]:
    """(first clock, end clock, mode) of every phase, from the switch events."""
    iterations = int(log.iterations["iteration"].max()) + 1
    switches = log.events("switch")
    starts = [0] + [e["clock"] for e in switches]
    ends = starts[1:] + [iterations]
    return list(zip(starts, ends, ["bsp"] + [e["to"] for e in switches]))


def check_pushes_across_switches(log: RunLog) -> None:
    """Every server applied, at every boundary K, exactly the W x K pushes made
    before it, BSP phases as whole rounds only, and in all every push made."""
    workers = log.layout["workers"]
    it = log.iterations
    made = int((it["rejected"] == 0).sum())
    assert_each_sample_once(log)   # the global budget: workers push as often as their speed allows
    for server in np.unique(log.applies["server"]):
        rows = log.applies[log.applies["server"] == server]
        totals = set(rows["total_pushes"].tolist())
        assert int(rows["total_pushes"].max()) == made
        for start, end, mode in phases(log):
            assert int(((it["clock"] < start) & (it["rejected"] == 0)).sum()) == workers * start
            assert start == 0 or workers * start in totals, f"server {server}: no boundary at {start}"
            if mode == "bsp":
                inside = rows[(rows["total_pushes"] > workers * start) & (rows["total_pushes"] <= workers * end)]
                assert (inside["pushes"] == workers).all(), f"server {server}: partial round in BSP {start}..{end}"


# 1 -------------------------------------------------------------------------------
def test_switch_at_f_of_the_sample_budget(offline):
    (switch,) = offline.events("switch")
    workers, batch = offline.layout["workers"], offline.config["batch_size"]
    iterations = offline.layout["iterations_per_worker"]
    budget = workers * iterations * batch
    assert switch["to"] == "asp" and switch["budget"] == budget
    assert switch["clock"] == math.ceil(F * iterations)
    assert switch["samples"] == switch["clock"] * workers * batch
    assert abs(switch["samples"] - F * budget) <= workers * batch          # within one round
    assert switch["time"] > 0 and "budget" in switch["reason"]
    # and the run behaves as the phases say: lock-step rounds before, pushes
    # applied as they arrive after
    it = offline.iterations
    assert it[it["clock"] < switch["clock"]]["clock_gap"].max() <= 0
    rows = offline.applies
    asp = rows[rows["total_pushes"] - rows["pushes"] >= workers * switch["clock"]]
    assert (asp["pushes"] != workers).any()


# 2 -------------------------------------------------------------------------------
def test_pushes_applied_equal_pushes_made_bsp_to_asp(offline):
    check_pushes_across_switches(offline)


def test_pushes_applied_equal_pushes_made_both_ways(online):
    assert {"asp", "bsp"} <= {e["to"] for e in online.events("switch")}
    check_pushes_across_switches(online)


# 3 -------------------------------------------------------------------------------
def test_transient_straggler_switches_to_asp_and_back(online):
    switches = online.events("switch")
    for e in switches:
        assert {"time", "clock", "reason", "to", "samples", "bsp_samples"} <= set(e)
    # the straggle (worker 3's iterations 20-29) is seen once it lasted the rounds
    # asked for; a greedy policy may also react to a shorter slowdown of a busy
    # core, and that is fine as long as the phases alternate
    to_asp = [e for e in switches if e["to"] == "asp" and "straggler worker 3" in e["reason"]
              and 20 + online.config["straggler_rounds"] <= e["clock"] <= 50]
    assert to_asp, [(e["clock"], e["reason"]) for e in switches]
    first = to_asp[0]
    back = [e for e in switches if e["to"] == "bsp" and e["time"] > first["time"]]
    assert back and "cleared" in back[0]["reason"] and back[0]["clock"] > first["clock"]
    assert [e["to"] for e in switches] == ["asp", "bsp"] * (len(switches) // 2) + ["asp"] * (len(switches) % 2)
    assert online.status == "finished"          # no deadlock: every worker and server ended
    # the BSP phases total no more than f of the budget (+ the round a switch may wait for)
    bsp_rounds = sum(end - start for start, end, mode in phases(online) if mode == "bsp")
    assert bsp_rounds <= math.ceil(0.5 * online.layout["iterations_per_worker"]) + 2


# 4 -------------------------------------------------------------------------------
def test_lr_and_momentum_follow_the_policy(offline):
    (switch,) = offline.events("switch")
    workers = offline.layout["workers"]
    boundary = workers * switch["clock"]
    rows = offline.applies[offline.applies["server"] == 0]
    before = rows["total_pushes"] - rows["pushes"]
    bsp, asp = rows[before < boundary], rows[before >= boundary]
    assert np.allclose(bsp["momentum"], MOMENTUM)
    assert asp["momentum"][0] == pytest.approx(MOMENTUM / workers, rel=1e-6)
    # ramped to ASP's asynchrony-compensated momentum 1 - W (1 - m) (async_momentum)
    target = 1 - workers * (1 - MOMENTUM)
    expected = MOMENTUM / workers + (target - MOMENTUM / workers) * np.minimum(1, (before[before >= boundary] - boundary) / RAMP)
    assert np.allclose(asp["momentum"], expected, rtol=1e-5)
    assert asp["momentum"][-1] == pytest.approx(target, rel=1e-6)
    assert switch["momentum"] == pytest.approx(MOMENTUM / workers)
    # lr: the schedule's eta in BSP; in ASP the same long-run step eta / (1 - m)
    # at the ramp's momentum (ASP's eta / W per push is the push scale)
    epochs, ipe = offline.config["epochs"], offline.layout["iterations_per_epoch"]
    epoch = before / (workers * ipe)
    cosine = offline.config["lr"] * 0.5 * (1 + np.cos(np.pi * np.minimum(epoch / epochs, 1)))
    assert np.allclose(bsp["lr"], cosine[before < boundary], rtol=1e-4, atol=1e-7)
    assert np.allclose(asp["lr"] / (1 - asp["momentum"]), cosine[before >= boundary] / (1 - MOMENTUM),
                       rtol=1e-4, atol=1e-6)
    assert np.allclose(offline.iterations["scale"], 1 / workers)


# 6 -------------------------------------------------------------------------------
def test_reaches_90_percent_on_digits(offline):
    assert offline.summary()["final_accuracy"] >= 0.90


# 5 -------------------------------------------------------------------------------
def test_search_for_f(tmp_path):
    out = tmp_path / "search"
    cmd = [sys.executable, "-m", "mpips", "syncswitch-search", "-n", "3", "--out", str(out),
           "--steps", "1", "--timeout", "240", "--", "--epochs", "1", "--stall-timeout", "60"]
    p = subprocess.run(cmd, env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace", timeout=900)
    assert p.returncode == 0, p.stdout[-3000:]
    record = json.loads((out / "search.json").read_text())
    reference, probes = record["reference"], record["probes"]
    assert [q["f"] for q in probes][:1] == [0.0] and 1 <= len(probes) <= 2
    floor = reference["final_accuracy"] - 0.005
    for q in [reference, *probes]:       # what it logged is what those runs' logs say
        assert q["final_accuracy"] == pytest.approx(RunLog(q["run_dir"]).summary()["final_accuracy"])
    for q in probes:
        assert q["within"] == (q["final_accuracy"] >= floor)
    # bisection over [0, 1] with one step: 0 if within, else 0.5 if within, else 1 (BSP)
    expected = 0.0 if probes[0]["within"] else (0.5 if probes[1]["within"] else 1.0)
    assert record["chosen"] == expected and 0.0 <= record["chosen"] <= 1.0
    assert f"chosen f = {expected:.4f}" in p.stdout
