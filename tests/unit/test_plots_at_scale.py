"""Figures and tables of many workers and of comparisons, on tiny simulated
runs (`mpips simulate`, 2 epochs): they say virtual time, tell runs of
different settings apart and never pool them, name exactly the settings that
differ, and stay readable at 64 workers (a bounded timeline, a table no wider
than a terminal)."""
from __future__ import annotations

import matplotlib.image
import matplotlib.pyplot as plt
import pytest
from test_analysis_tables import write_log

from mpips.analysis import plot, summarize
from mpips.cli import main
from mpips.config import Config
from mpips.io.log import RunLog

SMALL = ["--workers", "4", "--slowdown", "1,1,1,2", "--epochs", "2", "--eval-every", "0.5"]


def simulate(run_dir, *flags: str) -> RunLog:
    assert main(["simulate", "--run-dir", str(run_dir), *flags]) == 0
    return RunLog(str(run_dir))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """SSP with staleness 2 and 6, seeds 0 and 1 each, and a 64-worker run."""
    base = tmp_path_factory.mktemp("runs")
    compared = [simulate(base / f"ssp-s{s}-{seed}", *SMALL, "--staleness", str(s), "--seed", str(seed))
                for s in (2, 6) for seed in (0, 1)]
    wide = simulate(base / "w64", "--workers", "64", "--slowdown", "1x48,2x12,4x4", "--epochs", "2")
    return compared, wide


@pytest.fixture
def figures(monkeypatch):
    """Every figure drawn, as [(file name, [its axes' x label, title, y tick
    labels and legend entries])], read from matplotlib's objects."""
    drawn = []

    def save(fig, path):
        fig.canvas.draw()   # (tick labels are set on drawing)
        drawn.append((path.rsplit("/", 1)[-1], [
            {"x": ax.get_xlabel(), "title": ax.get_title(), "y": [t.get_text() for t in ax.get_yticklabels()],
             "legend": [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []}
            for ax in fig.axes]))
        fig.savefig(path, dpi=plot.DPI)
        plt.close(fig)
        return path
    monkeypatch.setattr(plot, "_save", save)
    return drawn


def test_simulated_runs_figures_say_virtual_time(runs, figures, tmp_path):
    compared, wide = runs
    plot.plot_runs([log.run_dir for log in [*compared, wide]], str(tmp_path), target=0.3)
    assert {name for name, _ in figures} >= {"accuracy.png", "time_to_target.png", "timeline-w64.png"}
    for name, axes in figures:
        for ax in axes:
            assert "wall" not in ax["x"] + ax["title"], (name, ax)
            if "time" in ax["x"] + ax["title"]:
                assert "virtual" in ax["x"] + ax["title"], (name, ax)
    times = [ax["x"] for _, axes in figures for ax in axes if "time" in ax["x"]]
    assert "virtual time (s)" in times and "virtual time to 30% test accuracy (s)" in times
    # MPI runs are timed by the wall clock; a mix says which is which
    mpi = write_log(tmp_path / "mpi", varying=False)
    assert plot.time_label([mpi]) == "wall-clock time (s)"
    assert plot.time_label([mpi, wide]) == "time (s; virtual for simulated runs)"


def test_summarize_says_virtual_time_and_shows_a_clock_for_a_mix(runs, tmp_path):
    compared, _ = runs
    mpi = write_log(tmp_path / "mpi", varying=False)
    simulated = summarize.render_text(summarize.table([compared[0].run_dir], 0.3), 0.3, width=None).splitlines()
    assert "virtual time to 30% (s)" in simulated[0] and "virtual time (s)" in simulated[0]
    assert "clock" not in simulated[0] and "wall" not in simulated[0]
    mixed = summarize.table([compared[0].run_dir, mpi.run_dir], 0.3)
    assert list(mixed["clock"]) == ["virtual", "wall"]
    head = summarize.render_markdown(mixed, 0.3).splitlines()[0]
    assert "| clock |" in head and "| time to 30% (s) |" in head and "| time (s) |" in head


def test_settings_labels_name_exactly_the_differing_settings():
    a = Config(paradigm="ssp", staleness=3, seed=0, run_dir="runs/a").to_dict()
    b = Config(paradigm="ssp", staleness=6, lr=0.1, nesterov=True, seed=1, run_dir="runs/b").to_dict()
    keys = summarize.differing_settings([a, b], skip=summarize.NOT_SETTINGS)
    assert keys == ["lr", "nesterov", "staleness"]
    assert [summarize.settings_label(c, keys) for c in (a, b)] == [
        "lr 0.05, nesterov off, staleness 3", "lr 0.1, nesterov on, staleness 6"]
    assert summarize.differing_settings([a, a]) == []


def test_runs_are_labelled_by_their_settings_and_seed_only_where_it_alone_differs(runs):
    compared, _ = runs
    labels = plot.run_labels(compared)
    assert list(labels["group"]) == ["ssp, staleness 2"] * 2 + ["ssp, staleness 6"] * 2
    assert list(labels["label"]) == ["ssp, staleness 2, seed 0", "ssp, staleness 2, seed 1",
                                     "ssp, staleness 6, seed 0", "ssp, staleness 6, seed 1"]
    # the run directory and the seed are no settings
    assert summarize.differing_settings([summarize.settings(log) for log in compared]) == ["staleness"]
    assert list(plot.run_labels(compared[::2])["label"]) == ["ssp, staleness 2", "ssp, staleness 6"]
    assert list(plot.run_labels(compared[:2])["label"]) == ["ssp, seed 0", "ssp, seed 1"]
    # a line and a legend entry per run, the seeds of a setting in its colour
    assert labels["colour"][0] == labels["colour"][1] != labels["colour"][2]
    assert len({(c, ls) for c, ls in zip(labels["colour"], labels["ls"])}) == 4


def test_runs_of_different_settings_are_never_pooled(runs, figures, tmp_path):
    compared, _ = runs
    dirs = [log.run_dir for log in compared]
    table = summarize.table(dirs, 0.3)
    assert list(table["settings"]) == ["staleness 2"] * 2 + ["staleness 6"] * 2
    means = summarize.mean_table(table)
    assert list(means["settings"]) == ["staleness 2", "staleness 6"] and list(means["runs"]) == [2, 2]
    # time to target: a bar per setting, its seeds pooled
    groups = plot.target_frame(compared, 0.3).groupby(["cluster", "group"], sort=False).size()
    assert list(groups) == [2, 2]
    plot.time_to_target_figure(compared, str(tmp_path / "ttt.png"), 0.3)
    (_, [bars]), = figures
    # fastest first
    assert bars["y"] == plot.target_order(plot.target_frame(compared, 0.3))
    assert sorted(bars["y"]) == ["ssp, staleness 2", "ssp, staleness 6"]
    # the accuracy figure: a line and a legend entry per setting, the mean of its seeds
    plot.accuracy_figure(compared, str(tmp_path / "acc.png"), 0.3)
    accuracy, loss = figures[-1][1]
    assert loss["legend"] == ["ssp, staleness 2 (2 seeds)", "ssp, staleness 6 (2 seeds)"]
    assert len(accuracy["legend"]) == 0
    # per seed, one option away: a line per run
    plot.accuracy_figure(compared, str(tmp_path / "acc-seeds.png"), 0.3, per_seed=True)
    assert figures[-1][1][1]["legend"] == list(plot.run_labels(compared)["label"])


def test_a_64_worker_run_stays_readable(runs, figures, tmp_path):
    _, wide = runs
    path = plot.timeline_figure(wide, str(tmp_path / "timeline.png"))
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height <= 2000 and width <= 1500
    (_, [whole, window]), = figures
    assert whole["y"] == window["y"] == ["x1 (48 workers)", "x2 (12 workers)", "x4 (4 workers)"]
    text = summarize.render_text(summarize.table([wide.run_dir], 0.9), 0.9)
    assert max(map(len, text.splitlines())) <= summarize.WIDTH
    assert "slowdown 1x48,2x12,4x4" in text and "mlp on digits" in text


def test_a_settings_mean_curve_and_band_come_from_its_seeds():
    import pandas as pd

    ev = pd.DataFrame({"k": [0, 0, 0, 1, 1, 1, 2, 2], "group": ["a"] * 6 + ["b"] * 2,
                       "time": [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0],
                       "accuracy": [0.1, 0.5, 0.9, 0.3, 0.7, 0.7, 0.2, 0.4]})
    curves = {g: rest for g, *rest in plot.mean_curves(ev, points=5)}
    t, mean, low, high, runs = curves["a"]
    assert runs == 2 and list(t) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert mean.tolist() == pytest.approx([0.2, 0.4, 0.6, 0.7, 0.8])
    assert low.tolist() == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.7])
    assert high.tolist() == pytest.approx([0.3, 0.5, 0.7, 0.7, 0.9])
    t, mean, *_ = curves["b"]   # one seed, ending at 1.0: no values after its end
    assert list(t) == [0.0, 0.5, 1.0] and mean.tolist() == pytest.approx([0.2, 0.3, 0.4])


def test_time_to_target_bars_are_sorted_fastest_first_never_reached_last():
    import pandas as pd

    nan = float("nan")
    runs = pd.DataFrame({"group": ["slow", "never", "fast", "fast", "slow", "once", "once"],
                         "time": [9.0, nan, 1.0, 3.0, 7.0, 0.5, nan]})
    # "once" reached it in one run of two: after those that always did, however fast
    assert plot.target_order(runs) == ["fast", "slow", "once", "never"]


def test_entries_get_distinct_colours():
    assert len(set(plot.ENTRY_COLOURS)) == len(plot.ENTRY_COLOURS) >= 12


def test_more_than_eight_entries_are_drawn_as_small_multiples(tmp_path, figures):
    logs = []
    for k in range(10):
        log = write_log(tmp_path / f"run{k}", varying=False)
        log.label = f"entry{k}"   # as mpips compare names its entries' runs
        logs.append(log)
    plot.accuracy_figure(logs, str(tmp_path / "acc.png"), 0.5)
    (_, panels), = figures
    shown = [p for p in panels if p["title"]]
    assert [p["title"] for p in shown] == [f"entry{k}" for k in range(10)]   # a panel per entry
    assert all(not p["legend"] for p in shown)                               # named by its title
