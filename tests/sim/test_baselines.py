"""The modern baselines in `mpips simulate`: BSP with backup workers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mpips.cli import main
from mpips.config import Config
from mpips.training.data import GlobalStream, load_dataset
from mpips.training.models import build_model
from tests.mpi.conftest import replayed_run, uneven_sgd_oracle
from tests.sim.test_simulator import push_ends, simulate, tables


def applied_rounds(log) -> tuple[list, set]:
    """(rounds, dropped): each server step's pushes as replayed_run takes
    them, a push in the first step that ends after it landed; and the
    (worker, clock) of every dropped push, from the servers' events."""
    dropped = {(e["worker"], e["clock"] - 1) for e in log.events("dropped_push") if e["server"] == 0}
    it = log.iterations
    steps = np.sort(log.applies["time"][log.applies["server"] == 0])
    rounds = [[] for _ in steps]
    for r, end in zip(it, push_ends(it)):
        if (int(r["worker"]), int(r["clock"])) not in dropped:
            rounds[int(np.searchsorted(steps, end))].append(
                (int(r["worker"]), int(r["sample"]), int(r["batch"]), float(r["scale"])))
    return rounds, dropped


def test_backup_without_backups_is_bsp_bit_for_bit(tmp_path):
    flags = ("--workers", "4", "--slowdown", "1,1,2,4", "--epochs", "1")
    bsp = simulate(tmp_path / "bsp", "--paradigm", "bsp", *flags)
    backup = simulate(tmp_path / "backup", "--paradigm", "backup", "--backup-workers", "0", *flags)
    assert np.array_equal(backup.final_params(), bsp.final_params())
    assert tables(backup) == tables(bsp)
    assert not backup.events("dropped_push")


@pytest.mark.parametrize("servers", ["1", "2"])
def test_backup_drops_late_pushes_and_applies_the_next_ones(tmp_path, servers):
    """Two workers at half speed, one backup (the default): each round is
    applied with the first of the two slow pushes, the other is dropped,
    its worker pulls the new parameters and its next push may make the next
    round. With one server or two (which must apply the same pushes in each
    round: server 0 decides), the run is the replay of the applied rounds bit for bit, so no
    dropped push was ever applied; each round has at most W - b pushes;
    the last round, when the budget runs out, ends the run (no deadlock)."""
    log = simulate(tmp_path / "run", "--paradigm", "backup", "--workers", "4", "--slowdown", "1,1,2,2",
                   "--epochs", "1", "--servers", servers)
    rounds, dropped = applied_rounds(log)
    assert dropped and all(0 < len(r) <= 3 for r in rounds)
    assert np.array_equal(log.final_params(), replayed_run(Config(**log.config), rounds))
    applied = {(w, c) for w, c in ((int(r["worker"]), int(r["clock"])) for r in log.iterations)} - dropped
    for worker in (2, 3):
        drops = sorted(c for w, c in dropped if w == worker)
        assert drops and any((worker, c + 1) in applied for c in drops), worker
    every = log.events("dropped_push")
    events = [e for e in every if e["server"] == 0]
    for server in range(int(servers)):   # every server drops the same pushes
        assert {(e["worker"], e["clock"]) for e in every if e["server"] == server} == {
            (e["worker"], e["clock"]) for e in events}
    assert all(e["round"] < e["step"] and "read-your-writes" in e["note"] for e in events)
    assert {e["worker"] for e in events} == {2, 3}
    for worker in (2, 3):   # counted per worker
        counts = [e["dropped"] for e in events if e["worker"] == worker]
        assert counts == list(range(1, len(counts) + 1))


@pytest.mark.parametrize("flags,field", [
    (("--backup-workers", "4"), "backup_workers"),
    (("--backup-workers=-1",), "backup_workers"),
    (("--grace-window=-1",), "grace_window"),
    (("--paradigm", "localsgd", "--dylu"), "dylu"),
    (("--paradigm", "localsgd", "--delayed-nesterov", "4"), "delayed_nesterov"),
    (("--paradigm", "localsgd", "--budget", "per-worker"), "budget"),
    (("--paradigm", "localsgd", "--local-steps", "0"), "local_steps"),
    (("--paradigm", "localsgd", "--outer-momentum", "1"), "outer_momentum"),
    (("--paradigm", "localsgd", "--local-mode", "sometimes"), "local_mode"),
    (("--paradigm", "localsgd", "--lr-schedule", "cosine"), "lr_schedule"),
])
def test_baseline_settings_are_one_line_errors(tmp_path, capsys, flags, field):
    assert main(["simulate", "--run-dir", str(tmp_path / "run"), "--paradigm", "backup", "--workers", "4",
                 *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mpips: error: invalid {field}="), err


# -- Local SGD and DiLoCo ------------------------------------------------------------------

def test_localsgd_of_one_sgd_step_averaged_is_bsp(tmp_path):
    """Synchronous, H = 1, inner SGD without momentum, outer SGD lr 1: each
    round is BSP's mean gradient step (up to float: the workers' steps are
    averaged as parameters)."""
    flags = ("--workers", "4", "--slowdown", "1,1,2,4", "--epochs", "1", "--momentum", "0")
    bsp = simulate(tmp_path / "bsp", "--paradigm", "bsp", *flags)
    local = simulate(tmp_path / "local", "--paradigm", "localsgd", "--local-steps", "1", "--outer-lr", "1",
                     "--outer-momentum", "0", *flags)
    assert len(local.applies) == len(bsp.applies)
    assert np.abs(local.final_params() - bsp.final_params()).max() < 1e-6


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_localsgd_of_one_worker_is_sequential_sgd(tmp_path, mode):
    """One worker, H = 8 local steps of SGD with momentum 0.9, outer lr 1 and
    no outer momentum: torch's SGD on the same batches, the momentum kept
    across pushes."""
    log = simulate(tmp_path / "run", "--paradigm", "localsgd", "--local-mode", mode, "--workers", "1",
                   "--iterations", "4", "--outer-lr", "1", "--outer-momentum", "0", "--lr", "0.1", "--seed", "3")
    config = Config(**log.config)
    steps = [e["local_steps"] for e in log.events("local_push")]
    assert steps == [8] * 4
    expected = uneven_sgd_oracle(config, np.full((32, 1), config.batch_size))
    assert np.abs(log.final_params() - expected).max() < 1e-6


def test_localsgd_of_one_worker_with_adamw_is_sequential_adamw(tmp_path):
    """As above with the inner AdamW (weight decay 0.01): torch's AdamW on
    the same batches, its moments kept across pushes."""
    log = simulate(tmp_path / "run", "--paradigm", "localsgd", "--workers", "1", "--iterations", "4",
                   "--optimizer", "adam", "--lr", "0.01", "--weight-decay", "0.01", "--outer-lr", "1",
                   "--outer-momentum", "0", "--seed", "3")
    config = Config(**log.config)
    data = load_dataset(config)
    torch.manual_seed(config.seed)
    model = build_model(config.model, data.input_shape, data.num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    stream = GlobalStream(data.x_train, data.y_train, config.seed)
    for k in range(32):
        x, y = stream.batch(k * config.batch_size, config.batch_size)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    expected = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
    assert np.abs(log.final_params() - expected).max() < 1e-6


def test_dylu_workers_push_at_one_pace(tmp_path):
    """Asynchronous DyLU on workers of speeds 1, 1, 1/2, 1/4: local steps
    H x v_i / max v (8, 8, 4, 2), so every worker pushes about as often."""
    log = simulate(tmp_path / "run", "--paradigm", "localsgd", "--local-mode", "async", "--dylu",
                   "--workers", "4", "--slowdown", "1,1,2,4", "--epochs", "3")
    pushes = log.events("local_push")
    rate, steps = [], []
    for w in range(4):
        mine = [e for e in pushes if e["worker"] == w][1:]   # after the first: speeds measured
        steps.append(np.median([e["local_steps"] for e in mine]))
        rate.append((len(mine) - 1) / (mine[-1]["time"] - mine[0]["time"]))
    assert steps == [8, 8, 4, 2]
    assert max(rate) / min(rate) < 1.2, rate


@pytest.mark.parametrize("servers", ["1", "2"])
def test_a_grace_window_takes_the_round_s_later_pushes_as_their_mean(tmp_path, servers):
    """Two workers at half speed, one backup, a grace window longer than the
    two slow pushes are apart: every round waits for the second of them, so
    nothing is dropped and each step is the mean of all four pushes, BSP's
    (to float: the pushes are g_i / 3, their sum scaled 3/4). Whole rounds
    only (--iterations): a last round of 3 would be their mean here, and
    BSP's sum / 4."""
    flags = ("--workers", "4", "--slowdown", "1,1,2,2", "--iterations", "20", "--servers", servers)
    bsp = simulate(tmp_path / "bsp", "--paradigm", "bsp", *flags)
    grace = simulate(tmp_path / "grace", "--paradigm", "backup", "--grace-window", "0.01", *flags)
    assert not grace.events("dropped_push")
    assert np.array_equal(grace.applies["pushes"], bsp.applies["pushes"])
    assert np.abs(grace.final_params() - bsp.final_params()).max() < 1e-6
