"""The analysis scripts' pure parts: mean over seeds, rendering, and which
paradigm panels a log can fill (logs written with the real writer, no MPI)."""
from __future__ import annotations

import math
import os

import pytest

from analysis import plot, summarize
from mpips.config import Config
from mpips.io.log import RankLog, RunLog, rank_file, write_run_end, write_run_header


def log_row(log, table: str, *values) -> None:
    """A row given in its table's column order (RankLog.row takes names)."""
    from mpips.io.log import TABLES
    log.row(table, **dict(zip(TABLES[table].names, values)))


def row(paradigm, seed, time_to_target, acc, hetero="homogeneous"):
    values = {k: 1.0 for k in summarize.NUMERIC}
    values.update(time_to_target=time_to_target, final_accuracy=acc,
                  epochs_to_target=None if time_to_target is None else 2.0 * time_to_target)
    return {"run": f"{paradigm}-{seed}", "paradigm": paradigm, "layout": "1+0+4",
            "heterogeneity": hetero, "seed": seed, "status": "finished", **values}


def test_mean_rows_average_per_paradigm_and_cluster():
    table = [row("ssp", 0, 2.0, 0.90), row("ssp", 1, None, 0.80), row("ssp", 2, 4.0, 0.94),
             row("bsp", 0, 3.0, 0.95), row("ssp", 0, 1.0, 0.97, hetero="slowdown 1,4")]
    means = {(r["paradigm"], r["heterogeneity"]): r for r in summarize.mean_rows(table)}
    ssp = means["ssp", "homogeneous"]
    assert ssp["runs"] == 3 and ssp["reached"] == "2/3"
    assert ssp["time_to_target"] == pytest.approx(3.0)          # over the runs that reached it
    assert ssp["epochs_to_target"] == pytest.approx(6.0)
    assert ssp["final_accuracy"] == pytest.approx((0.90 + 0.80 + 0.94) / 3)
    assert means["bsp", "homogeneous"]["runs"] == 1
    assert means["ssp", "slowdown 1,4"]["time_to_target"] == 1.0


def test_renderings_show_every_row_and_mark_missing_values():
    table = [row("ssp", 0, None, 0.5), row("bsp", 0, 2.5, 0.9)]
    md = summarize.render_markdown(table, 0.9).splitlines()
    assert len(md) == 4 and "time to 90% (s)" in md[0]
    assert "| ssp-0 | ssp | 1+0+4 | homogeneous | - | - | 50.0% |" in md[2]
    assert "| 2.50 | 5.00 | 90.0% |" in md[3]
    text = summarize.render_text(table, 0.9, width=None).splitlines()   # (every column: wider than a terminal)
    assert len(text) == 4 and len({len(line) for line in text}) == 1   # aligned


def test_a_table_that_cannot_fit_narrows_no_column_below_its_own_width():
    """A long entry's run name (never narrowed) made the table too wide even
    with every text column at its narrowest; the narrowing then went on into
    the columns narrower than MIN_CELL (S+G+W) down to widths of 0 and below,
    where wrapping a cell never ended (make compare hung, 8 GB)."""
    long = "localsgd:local_mode=async:dylu=true:delayed_nesterov=8:outer_momentum=0.9"
    table = [row(long, 0, 2.0, 0.9), {**row("bsp", 0, 3.0, 0.95, hetero="slow 2"), "layout": "1+2+4"}]
    lines = summarize.render_text(table, 0.9, width=100).splitlines()
    assert lines[1].split()[:4] == ["run", "paradigm", "S+G+W", "heterogeneity"]
    assert any(line.startswith(f"{long}-0  localsgd:loc  1+0+4  homogeneous") for line in lines), lines


def test_heterogeneity_and_layout_labels():
    assert summarize.heterogeneity(Config().to_dict()) == "homogeneous"
    cfg = Config(slowdown="1,2", straggler="0:3:4:2").to_dict()
    assert summarize.heterogeneity(cfg) == "slowdown 1,2; straggler 0:3:4:2"
    assert summarize.layout_label({"servers": 1, "group_servers": 2, "workers": 4}) == "1+2+4"


def write_log(run_dir, *, varying: bool, placement: list[dict] | None = None) -> RunLog:
    """A two-worker run written through RankLog; with `varying`, it holds what
    adaptive paradigms log: r*, mode switches, batch sizes, lr scales;
    `placement`: its ranks' hosts and roles (runtime.layout.Layout.placement)."""
    os.makedirs(run_dir)
    write_run_header(str(run_dir), config=Config(paradigm="dssp").to_dict(),
                     layout={"servers": 1, "group_servers": 0, "workers": 2, "parameters": 10,
                             **({"placement": placement} if placement else {})},
                     versions={}, ranks=[0, 1])
    log = RankLog(rank_file(str(run_dir), 0), 0)
    for k in range(20):
        t = 0.1 * k
        log_row(log, "applies", 0, t, 0.0, 0.001, 1, k + 1, k + 1, 1.0, 0.1, 0.9 if not varying or k > 5 else 0.225)
        log_row(log, "evaluations", t, k / 10, k + 1, k + 1, 2.0 / (k + 1), k / 20)
        for w in range(2):
            batch = 16 + (w * k if varying else 0)
            log_row(log, "iterations", w, k, k, 0, t, 0.01, 0.001, 0.05, 0.0, 0.001, batch, 0.5,
                    1 / (1 + k % 3) if varying else 1.0, k % 3, k % 3 if varying else math.nan,
                    math.nan, 40, 40, 1.0, 0, -1, 0, 0.0, 0.0)
        if varying:
            log.event(t, "dssp_controller", r_star=k % 4, gap=3)
            log.event(t, "group_exchange", group=k % 2)
    # what the runtime logs in any run: no reason for a dynamics figure
    log.event(0.0, "segment", segment=0)
    log.event(0.0, "straggler", worker=1, iteration=2, iterations=3, factor=4.0)
    log.event(1.0, "checkpoint", number=1)
    if varying:
        log.event(0.5, "mode_switch", mode=1, reason="f reached")
        log.event(0.0, "group_assignment", groups=[[0], [1]])
    log.close()
    write_run_end(str(run_dir), wall_seconds=2.0, final_params=None)
    return RunLog(str(run_dir))


def test_dynamics_panels_only_for_what_the_log_holds(tmp_path):
    full = write_log(tmp_path / "full", varying=True)
    titles = [t for t, _ in plot.dynamics_panels(full)]
    for expected in ("DSSP controller", "synchronization mode", "server optimizer", "batch size",
                     "learning-rate scale", "value staleness", "other events"):
        assert any(expected in t for t in titles), (expected, titles)
    path = plot.dynamics_figure(full, str(tmp_path / "full.png"))
    assert path and os.path.getsize(path) > 10_000
    plain = write_log(tmp_path / "plain", varying=False)
    assert plot.dynamics_panels(plain) == []
    assert plot.dynamics_figure(plain, str(tmp_path / "plain.png")) is None
    assert not os.path.exists(tmp_path / "plain.png")
