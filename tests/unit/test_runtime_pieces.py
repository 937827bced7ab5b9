"""Waiting, heterogeneity and the log writer/reader, without MPI."""
import json
import os

import h5py
import numpy as np
import pytest
import torch

from mpips.config import Config, ConfigError
from mpips.heterogeneity import parse_stragglers
from mpips.io.log import RankLog, RunLog, time_to_target, write_run_end, write_run_header
from mpips.runtime.transport.wait import (
    MAX_SLEEP,
    MIN_SLEEP,
    StallError,
    next_sleep,
    precise_sleeps,
    wait_until,
)
from mpips.training.emulation import Slowdown


def log_row(log, table: str, *values) -> None:
    """A row given in its table's column order (RankLog.row takes names)."""
    from mpips.io.log import TABLES
    log.row(table, **dict(zip(TABLES[table].names, values)))


def test_wait_returns_when_ready():
    calls = iter([False, False, True])
    waited = wait_until(lambda: next(calls), what="x", describe=lambda: "-", warn=10, timeout=10)
    assert waited > 0


def test_wait_times_out_naming_what_it_waited_for(capsys):
    with pytest.raises(StallError, match="waiting for worker 3 = rank 4"):
        wait_until(lambda: False, what="gate", describe=lambda: "worker 3 = rank 4 (clock 7)",
                   warn=0.05, timeout=0.2)
    assert "waiting" in capsys.readouterr().err


def test_wait_polls_with_backoff_not_spinning():
    n = [0]

    def ready():
        n[0] += 1
        return False

    with pytest.raises(StallError):
        wait_until(ready, what="x", describe=lambda: "-", warn=1, timeout=0.3)
    assert n[0] < 3000  # a spin would poll millions of times in 0.3 s


def test_a_poll_that_finds_nothing_changed_skips_its_check_but_for_a_heartbeat(monkeypatch):
    import mpips.runtime.transport.wait as wait

    checks, polls = [0], [0]

    def changed():
        polls[0] += 1
        return polls[0] == 40   # a write, seen at the 40th poll

    def ready():
        checks[0] += 1
        return polls[0] >= 40

    monkeypatch.setattr(wait, "HEARTBEAT", 60.0)
    wait_until(ready, what="x", describe=lambda: "-", warn=10, timeout=10, changed=changed,
               due=lambda: -1.0)   # overdue from the start: polled every few microseconds
    assert polls[0] == 40 and checks[0] == 2   # the first check, and the one after the write
    # nothing written, ever: checked again once a heartbeat passed
    monkeypatch.setattr(wait, "HEARTBEAT", 0.02)
    checks[0] = polls[0] = 0
    waited = wait_until(lambda: ready() or checks[0] == 2, what="x", describe=lambda: "-", warn=10,
                        timeout=10, changed=lambda: False, due=lambda: -1.0)
    assert checks[0] == 2 and waited >= 0.02


@pytest.mark.skipif(not os.path.exists("/proc/self/timerslack_ns"), reason="Linux only")
def test_precise_sleeps_sets_a_1us_timer_slack():
    with open("/proc/self/timerslack_ns") as f:
        before = f.read().strip()
    try:
        precise_sleeps()
        with open("/proc/self/timerslack_ns") as f:
            assert f.read().strip() == "1000"   # Linux's default is 50000
    finally:
        with open("/proc/self/timerslack_ns", "w") as f:
            f.write(before)


def test_sleeps_are_a_fraction_of_the_wait_or_last_until_what_is_due():
    assert next_sleep(0.0) == MIN_SLEEP
    assert next_sleep(400e-6) == pytest.approx(100e-6)        # a quarter of the time waited
    assert next_sleep(5.0) == MAX_SLEEP                        # never more than a millisecond
    # a server that knows when its workers' next pushes are due sleeps until the soonest
    assert next_sleep(0.0, np.array([300e-6, 700e-6])) == pytest.approx(300e-6)
    assert next_sleep(0.0, np.array([0.2])) == MAX_SLEEP
    # once one is overdue it backs off from when it was due: soon after it lands
    assert next_sleep(0.5, np.array([-200e-6, 700e-6])) == pytest.approx(20e-6)
    # one long overdue (a worker blocked at its gate) does not hide one due soon
    assert next_sleep(0.5, np.array([-1.0, 50e-6])) == pytest.approx(50e-6)
    assert next_sleep(0.5, np.array([])) == MAX_SLEEP          # nothing known: as without
    assert next_sleep(0.01, 300e-6) == pytest.approx(300e-6)   # one thing awaited, as a float:
    assert next_sleep(0.01, -200e-6) == pytest.approx(20e-6)   # until it is due, then finely,
    assert next_sleep(400e-6, 300e-6) == pytest.approx(100e-6)  # never later than without


def test_slowdown_persistent_and_transient():
    cfg = Config(slowdown="1,2,1", straggler="2:5:3:4")
    assert Slowdown(cfg, 1, 3).factor(0) == 2
    s = Slowdown(cfg, 2, 3)
    assert [s.factor(i) for i in (4, 5, 7, 8)] == [1, 4, 4, 1]


def test_random_stragglers_repeat_from_the_seed():
    cfg = Config(random_stragglers="0.05:10:3", seed=7)

    def drawn(cfg):
        # drawn as iterations are asked for: a global budget's count is not known ahead
        s = Slowdown(cfg, 1, 4)
        factors = [s.factor(i) for i in range(500)]
        return s.straggles, factors

    a, factors = drawn(cfg)
    assert a and a == drawn(cfg)[0]
    assert a != drawn(Config(random_stragglers="0.05:10:3", seed=8))[0]
    # every drawn straggle slows exactly the iterations it covers
    assert factors == [3.0 if any(s.covers(i) for s in a) else 1.0 for i in range(500)]


@pytest.mark.parametrize("text", ["3:1:1", "9:0:1:2", "x:1:1:1", "1:0:0:2"])
def test_bad_stragglers(text):
    with pytest.raises(ConfigError, match="straggler"):
        parse_stragglers(text, 4)


def test_slowdown_needs_one_factor_per_worker():
    with pytest.raises(ConfigError, match="one factor per worker"):
        Slowdown(Config(slowdown="1,2"), 0, 3)


def test_log_roundtrip(tmp_path):
    run = str(tmp_path)
    write_run_header(run, config=Config(paradigm="asp").to_dict(),
                     layout={"servers": 1, "group_servers": 0, "workers": 1}, versions={}, ranks=[0, 1])
    server, worker = RankLog(os.path.join(run, "rank-0.h5"), 0), RankLog(os.path.join(run, "rank-1.h5"), 1)
    for i in range(3):
        log_row(worker, "iterations", 0, i, i, 0, 0.1 * i, 0.0, 0.01, 0.02, 0.0, 0.01, 16, 1.0, 1.0, i, np.nan,
                   np.nan, 100, 100, 1.5, 0, 16 * i, 0, 0.0, 0.0)
        log_row(server, "applies", 0, 0.1 * i + 0.05, 0.0, 0.001, 1, i + 1, i + 1, 0.5, 0.1, 0.9)
    log_row(server, "evaluations", 0.3, 3.0, 3, 3, 0.5, 0.75)
    worker.event(0.2, "rejected_push", worker=0, iteration=9, reason="nan")
    for log in (server, worker):
        log.close()
    write_run_end(run, wall_seconds=0.4, final_params=np.ones(5, np.float32))
    r = RunLog(run)
    s = r.summary()
    assert s["paradigm"] == "asp" and s["status"] == "finished"
    assert s["updates"] == 3 and s["iterations"] == 3 and s["max_staleness"] == 2
    assert s["final_accuracy"] == pytest.approx(0.75)
    assert r.events("rejected_push")[0]["iteration"] == 9
    assert r.final_params().tolist() == [1.0] * 5
    assert r.time_to_accuracy(0.7) == pytest.approx(0.3) and r.time_to_accuracy(0.8) is None
    assert r.epochs_to_accuracy(0.7) == pytest.approx(3.0) and r.epochs_to_accuracy(0.8) is None
    json.dumps(s)


def test_the_time_to_the_target_is_when_a_mean_of_evaluations_first_reached_it():
    times = [1, 2, 3, 4, 5, 6]
    swinging = [0.80, 0.91, 0.79, 0.88, 0.92, 0.95]   # touches 0.9 at 2 s, holds it from 5 s
    assert time_to_target(times, swinging, 0.9) == 2
    # means of 2: .855 .85 .835 .90 (4-5 s) -> 5 s; of 3: .833 .86 .863 .917 -> 6 s
    assert time_to_target(times, swinging, 0.9, 2) == 5 and time_to_target(times, swinging, 0.9, 3) == 6
    assert time_to_target(times, swinging, 0.96, 1) is None
    assert time_to_target(times[:2], swinging[:2], 0.5, 3) is None   # fewer evaluations than the mean's
    assert time_to_target([], [], 0.5) is None


def test_not_a_run_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run log"):
        RunLog(str(tmp_path))


def test_lr_schedules_follow_the_run_budget():
    from mpips.training.optim import server_rule

    shard = np.zeros(3, np.float32)
    cosine = server_rule(Config(lr=0.2, lr_schedule="cosine", epochs=10), shard, total_epochs=4).schedule
    assert cosine(0) == pytest.approx(0.2)
    assert cosine(2) == pytest.approx(0.1)
    assert cosine(4) == pytest.approx(0.0, abs=1e-12)
    step = server_rule(Config(lr=0.2, lr_schedule="step", lr_step_every=2, lr_gamma=0.5), shard).schedule
    assert [step(e) for e in (0, 1.9, 2, 4.5)] == pytest.approx([0.2, 0.2, 0.1, 0.05])


def test_the_second_levels_rule_adds_a_pushed_delta_whole():
    """Sum: w -= g whatever the configuration (no momentum, decay or schedule)."""
    from mpips.training.optim import Sum

    shard = np.ones(4, np.float32)
    rule = Sum(shard)
    assert rule.schedule(100.0) == 1.0 and rule.base_momentum == 0.0
    rule.step(np.full(4, -0.5, np.float32), rule.schedule(0))
    np.testing.assert_array_equal(shard, 1.5)


def test_server_sgd_step_moves_the_shard_in_place():
    from mpips.training.optim import server_rule

    shard = np.ones(4, np.float32)
    opt = server_rule(Config(lr=0.5, momentum=0.0), shard)
    norm = opt.step(np.full(4, 2.0, np.float32), lr=0.5)
    np.testing.assert_allclose(shard, 0.0)
    assert norm == pytest.approx(2.0)


@pytest.mark.parametrize("momentum, nesterov, decay", [(0.0, False, 0.0), (0.9, False, 0.0),
                                                       (0.9, True, 5e-4), (0.5, False, 1e-3)])
def test_server_sgd_is_torch_sgd_bit_for_bit(momentum, nesterov, decay):
    """The written-out SGD against torch.optim.SGD over steps with changing
    learning rates, and through a checkpoint of its state halfway."""
    from mpips.io.checkpoint import decode, encode
    from mpips.training.optim import server_rule

    rng = np.random.default_rng(0)
    start = rng.normal(size=1000).astype(np.float32)
    cfg = Config(lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=decay)
    shard = start.copy()
    ours = server_rule(cfg, shard)
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    theirs = torch.optim.SGD([param], lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=decay)
    for k in range(6):
        grad = rng.normal(size=1000).astype(np.float32)
        lr = 0.1 / (k + 1)
        before = shard.copy()
        norm = ours.step(grad, lr)
        theirs.param_groups[0]["lr"] = lr
        param.grad = torch.from_numpy(grad.copy())
        theirs.step()
        np.testing.assert_array_equal(shard, param.detach().numpy())
        assert norm == pytest.approx(float(np.linalg.norm(before - shard)), rel=1e-4)
        if k == 2:   # a resumed server goes on exactly
            saved = decode(*encode(ours.state()))
            ours = server_rule(cfg, shard)
            ours.load_state(saved)


def test_a_log_from_before_the_copy_columns_reads_them_as_zero(tmp_path):
    """Rank files written before `h2d`/`d2h` existed stay readable (as 0);
    a table missing other columns is still not mpips'."""
    from mpips.io.log import ITERATION

    test_log_roundtrip(tmp_path)
    path = os.path.join(str(tmp_path), "rank-1.h5")
    older = np.dtype([(k, ITERATION[k]) for k in ITERATION.names if k not in ("h2d", "d2h")])
    with h5py.File(path, "r+") as f:
        rows = f["iterations"][...]
        del f["iterations"]
        f.create_dataset("iterations", data=np.array([tuple(r[k] for k in older.names) for r in rows], older),
                         maxshape=(None,))
    r = RunLog(str(tmp_path))
    assert r.completeness()["complete"] and len(r.iterations) == 3
    assert (r.iterations["h2d"] == 0).all() and r.iterations["staleness"].tolist() == [0, 1, 2]
    with h5py.File(path, "r+") as f:
        del f["iterations"]
        f.create_dataset("iterations", data=np.zeros(3, [(k, older[k]) for k in older.names[:-1]]))
    assert "is not one of mpips'" in RunLog(str(tmp_path)).files["rank-1.h5"]["problem"]


def test_ranks_sharing_a_node_take_its_gpus_in_turn():
    """Servers (False) take none; workers and the evaluator (True) one each
    while there are enough, then round-robin."""
    from mpips.training.flatmodel import gpu_index

    node = [False, True, True, True, True, True]            # server, 4 workers, evaluator
    assert [gpu_index(node, r, 8) for r in range(1, 6)] == [0, 1, 2, 3, 4]
    assert [gpu_index(node, r, 2) for r in range(1, 6)] == [0, 1, 0, 1, 0]
    assert [gpu_index(node, r, 1) for r in range(1, 6)] == [0] * 5


def test_a_log_row_is_checked_against_its_tables_columns(tmp_path):
    """By name, every column once; a float never truncated into an integer column."""
    from mpips.io.log import LogRowError

    log = RankLog(os.path.join(str(tmp_path), "rank-0.h5"), 0)
    good = dict(time=0.3, epoch=3.0, steps=3, pushes=3, loss=0.5, accuracy=0.75)
    log.row("evaluations", **good)
    with pytest.raises(LogRowError, match=r"unknown column\(s\) \['acc'\], missing \['accuracy'\]"):
        log.row("evaluations", **{**{k: v for k, v in good.items() if k != "accuracy"}, "acc": 0.75})
    with pytest.raises(LogRowError, match=r"missing \['loss'\]"):
        log.row("evaluations", **{k: v for k, v in good.items() if k != "loss"})
    with pytest.raises(LogRowError, match=r"steps=3.5, a float for an integer column"):
        log.row("evaluations", **{**good, "steps": 3.5})
    with pytest.raises(LogRowError, match="pushes"):
        log.row("evaluations", **{**good, "pushes": np.float32(3)})
    log.close()


def test_log_rows_in_any_keyword_order_fill_blocks_and_read_back(tmp_path):
    """Rows go into a buffer that grows to a block (CHUNK rows) and is then
    written; a call site's keyword order is checked once and kept."""
    from mpips.io.writer import CHUNK, FIRST_ROWS

    run = str(tmp_path)
    write_run_header(run, config=Config().to_dict(), layout={"servers": 1, "workers": 1}, versions={}, ranks=[0])
    log = RankLog(os.path.join(run, "rank-0.h5"), 0, flush_seconds=3600)
    n = 2 * CHUNK + FIRST_ROWS + 3
    for i in range(n):
        row = dict(time=0.1 * i, epoch=float(i), steps=i, pushes=2 * i, loss=0.5, accuracy=i / n)
        log.row("evaluations", **(row if i % 3 else dict(reversed(row.items()))))   # two orders, in turn
    assert log._sets["evaluations"].shape[0] == 2 * CHUNK   # two whole blocks written, the rest buffered
    log.close()
    ev = RunLog(run).evaluations
    assert ev["steps"].tolist() == list(range(n)) and ev["pushes"].tolist() == [2 * i for i in range(n)]
    assert ev["time"] == pytest.approx([0.1 * i for i in range(n)])


def test_a_view_field_declares_the_cells_it_reads():
    """The simulator wakes a waiting gate only when a cell its view's fields
    read changes (TableView.cells): a field without its cells is refused
    where it is written, and a declared one's cells are woken on."""
    from mpips.runtime.state import PER_WORKER, S, TableLayout, TableView, field

    with pytest.raises(TypeError):
        class Undeclared(TableView):
            @field
            def busiest(self):
                return 0

    with pytest.raises(TypeError):
        class Unsaid(TableView):
            @field()
            def busiest(self):
                return 0

    class Declared(TableView):
        @field(cells=lambda table: [table.server_offset(s, S.STEPS) for s in range(table.servers)])
        def steps(self):
            return 0

        @field(cells=PER_WORKER)
        def mine(self):
            return 0

    table = TableLayout(workers=2, servers=2)
    view = Declared(table, np.zeros(table.size), 0.0)
    untouched = view.cells([1])
    _ = view.steps, view.mine   # reading them declares their cells
    assert view.cells([1]) == untouched + [table.server_offset(0, S.STEPS), table.server_offset(1, S.STEPS)]


def test_the_progress_interval_is_seconds_or_off(monkeypatch):
    """MPIPS_PROGRESS_INTERVAL (transport.mpi.ProgressThread): seconds, 0 for
    no thread; anything else a one-line error naming it."""
    from mpips.runtime.transport.mpi import PROGRESS_INTERVAL, progress_interval

    monkeypatch.delenv("MPIPS_PROGRESS_INTERVAL", raising=False)
    assert progress_interval() == PROGRESS_INTERVAL
    for text, value in (("0", 0.0), ("5e-4", 5e-4)):
        monkeypatch.setenv("MPIPS_PROGRESS_INTERVAL", text)
        assert progress_interval() == value
    for bad in ("fast", "-1", "2", "nan"):
        monkeypatch.setenv("MPIPS_PROGRESS_INTERVAL", bad)
        with pytest.raises(ConfigError, match="MPIPS_PROGRESS_INTERVAL"):
            progress_interval()


def test_a_simulated_stores_pending_pushes_come_back_from_a_copy():
    """The simulator's store keeps the ParameterStore protocol whole: a
    server's slots and heads as a checkpoint would copy and restore them."""
    from mpips.runtime.layout import Layout
    from mpips.runtime.state import Head, heads_of
    from mpips.runtime.transport.local import LocalTransport, Network
    from mpips.runtime.transport.protocols import LevelSpec

    transport = LocalTransport(Layout(1, 0, 2), Network(0.0, 1e9, 0.0, 0))
    handles = transport.level([LevelSpec(members=(0, 1, 2), servers=(0,), table_rows=2, slot_rows=(0, 1))],
                              n=4, sparse=False)
    server, client = handles[0].store, handles[2].store

    def push():
        client.push(np.arange(4, dtype=np.float32), row=1, number=1, key=7)

    transport.run({2: push}, 0.0)
    kept = server.pending()
    assert kept["slots"][1].tolist() == [0, 1, 2, 3] and heads_of(kept["heads"]) == [Head(0, 0), Head(1, 7)]
    # (an older checkpoint's heads: a number and a key only)
    server.restore_pending({"slots": np.zeros((2, 4), np.float32), "heads": np.zeros((2, 2), np.int64)})
    assert not server.pending()["slots"].any()
    server.restore_pending(kept)
    assert heads_of(server.pending()["heads"]) == [Head(0, 0), Head(1, 7)]


def test_a_checkpoints_table_of_the_older_row_is_restored_aligned():
    """Checkpoints keep the whole control table; one saved while a worker row
    held 4 extras (14 cells) is written back with the newer extras as zeros,
    every other cell where it was: written as it is, the rows after the
    first would land shifted (clocks in push-time cells)."""
    from mpips.runtime.state import G, S, TableLayout, W

    table = TableLayout(workers=3, servers=2)
    old_row = len(W) - 2
    g, rows, servers = 8, np.arange(3 * old_row).reshape(3, old_row) + 100.0, np.arange(2 * (len(S) + 3)) + 900.0
    old = np.concatenate([np.arange(g, dtype=float), rows.ravel(), servers])
    new = table.checkpointed(old)
    assert len(new) == table.size and new[G.CLAIMED] == G.CLAIMED
    for w in range(3):
        row = new[table.worker_offset(w):table.worker_offset(w) + len(W)]
        assert row[:W.EXTRA4].tolist() == rows[w, :W.EXTRA4].tolist()
        assert row[W.EXTRA4] == row[W.EXTRA5] == 0 and row[W.HALTED] == rows[w, -1]
    assert new[table.server_offset(0):].tolist() == servers.tolist()
    assert np.array_equal(table.checkpointed(new), new)   # this layout: as it is
    with pytest.raises(ValueError, match="fits no layout"):
        table.checkpointed(old[:-1])
