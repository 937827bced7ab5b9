"""analysis/summarize.py and analysis/plot.py on the logs of real MPI runs.

Every value the table shows is recomputed here from the raw log tables, by a
different route than the one `RunLog.summary()` takes, and the figures are
read back as images.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest
from conftest import train

from analysis import plot, summarize
from mpips.io.log import RunLog
from tests.thresholds import SETUPS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# both 2-epoch runs pass it (and fail the table's check if they do not): tests/thresholds.py
TARGET = SETUPS["analysis-ssp"].threshold


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two 1+4-rank runs: SSP(3) on a heterogeneous cluster, BSP on a homogeneous one."""
    base = tmp_path_factory.mktemp("analysis")
    for name in ("ssp", "bsp"):
        setup = SETUPS[f"analysis-{name}"]
        train(setup.ranks, base / name, *setup.flags, "--seed", "1")
    return base


def script(name: str, *args) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, os.path.join(ROOT, "analysis", name), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def first_at(ev: np.ndarray, target: float):
    """(time, epoch) of the first evaluation at or above target."""
    for t, epoch, acc in sorted(zip(ev["time"], ev["epoch"], ev["accuracy"])):
        if acc >= target:
            return float(t), float(epoch)
    return None


def test_table_values_come_from_the_logs(runs):
    table = {r["run"]: r for r in summarize.rows(summarize.find_runs([str(runs)]), TARGET)}
    assert sorted(table) == ["bsp", "ssp"]
    for name, row in table.items():
        log = RunLog(str(runs / name))
        it, ev = log.iterations, log.evaluations
        server0 = log.applies[log.applies["server"] == 0]
        # one update per apply of server 0, each numbered in turn
        assert row["updates"] == len(server0) == server0["step"][-1]
        hit = first_at(ev, TARGET)
        assert hit is not None, f"{name} never reached {TARGET}: {ev['accuracy']}"
        assert row["time_to_target"] == pytest.approx(hit[0])
        assert row["epochs_to_target"] == pytest.approx(hit[1])
        assert 0 < row["epochs_to_target"] <= 2 + 1e-6
        assert row["final_accuracy"] == pytest.approx(float(ev["accuracy"][np.argmax(ev["time"])]))
        assert row["best_accuracy"] == pytest.approx(float(ev["accuracy"].max()))
        assert row["bytes_sent"] == len(it) * 4 * log.layout["parameters"]   # dense float32 pushes
        assert row["mean_staleness"] == pytest.approx(float(np.mean(it["staleness"])))
        assert row["max_staleness"] == int(np.max(it["staleness"]))
        assert row["updates_per_second"] == pytest.approx(row["updates"] / log.wall_seconds)
        assert row["samples_per_second"] == pytest.approx(it["batch"].sum() / log.wall_seconds)
        ends = it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]
        shares = []
        for w in range(4):
            mine = it["worker"] == w
            shares.append(it["wait"][mine].sum() / (ends[mine].max() - it["start"][mine].min()))
        assert row["mean_wait_fraction"] == pytest.approx(np.mean(shares))
        assert row["layout"] == "1+0+4"
    # BSP: one update per round, every worker reads the latest parameters
    per_worker = RunLog(str(runs / "bsp")).layout["iterations_per_worker"]
    assert table["bsp"]["updates"] == per_worker
    assert table["bsp"]["max_staleness"] == 0
    # SSP applies every push: more updates than rounds, and stale pushes on a slow cluster
    assert table["ssp"]["updates"] > per_worker
    assert table["ssp"]["max_staleness"] > 0
    assert table["ssp"]["heterogeneity"] == "slowdown 1,1,2,4"
    assert table["bsp"]["heterogeneity"] == "homogeneous"
    # an accuracy never reached has no time
    assert all(r["time_to_target"] is None and r["epochs_to_target"] is None
               for r in summarize.rows([str(runs / "bsp")], 1.01))


def test_summarize_cli_writes_csv_and_markdown(runs, tmp_path):
    p = script("summarize.py", runs / "ssp", runs / "bsp", "--target", TARGET,
               "--csv", tmp_path / "t.csv", "--markdown", tmp_path / "t.md")
    expected = {r["run"]: r for r in summarize.rows([str(runs / "ssp"), str(runs / "bsp")], TARGET)}
    with open(tmp_path / "t.csv") as fh:
        got = list(csv.DictReader(fh))
    assert [r["run"] for r in got] == ["ssp", "bsp"]
    for r in got:
        assert int(r["updates"]) == expected[r["run"]]["updates"]
        assert float(r["time_to_target"]) == pytest.approx(expected[r["run"]]["time_to_target"])
        assert int(r["bytes_sent"]) == expected[r["run"]]["bytes_sent"]
    md = (tmp_path / "t.md").read_text().splitlines()
    assert md[0].startswith("| run | paradigm | S+G+W |") and "time to 50%" in md[0]
    assert len(md) == 4 and md[2].startswith("| ssp | ssp | 1+0+4 | 1 node | mlp on digits | slowdown 1,1,2,4 |")
    assert f"| {expected['bsp']['updates']} |" in md[3]
    assert "ssp" in p.stdout and "bsp" in p.stdout


def test_figures_are_written_and_readable(runs, tmp_path):
    p = script("plot.py", runs, "-o", tmp_path)
    written = sorted(os.path.basename(f) for f in p.stdout.split())
    # ssp and bsp decide nothing over time beyond what every run logs: no dynamics figure
    assert written == ["accuracy.png", "staleness.png", "time_to_target.png", "timeline-bsp.png",
                       "timeline-ssp.png"]
    clusters = 2   # heterogeneous and homogeneous: one column each
    # the accuracy figure grows by a legend row per run of a column (one run each here)
    expected = {"accuracy.png": (7.5 + 0.12, 6.5 * clusters), "staleness.png": (2.8, 3.6 * 2),
                "time_to_target.png": (1.2 + 0.5 * 2, 8 * clusters),
                # two panels of 0.65 in a worker row, 4 workers
                "timeline-ssp.png": (2.6 + 2 * 0.65 * 4, 13), "timeline-bsp.png": (2.6 + 2 * 0.65 * 4, 13)}
    for name, (h, w) in expected.items():
        path = tmp_path / name
        assert path.stat().st_size > 15_000, f"{name} is nearly empty"
        image = matplotlib.image.imread(path)
        assert image.shape[:2] == (round(h * plot.DPI), round(w * plot.DPI))
        assert image[..., :3].std() > 0.05, f"{name} is one flat colour"


def test_timeline_default_window_lies_inside_the_run(runs):
    log = RunLog(str(runs / "ssp"))
    lo, hi = plot.default_window(log)
    it = log.iterations
    assert 0 <= lo < hi <= (it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]).max() + 1e-9
