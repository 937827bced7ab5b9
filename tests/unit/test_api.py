"""The package's faces without MPI: RunLog's DataFrames, the DataFrame
summary, the `mpips` command's subcommands and plugins, the console-script
entry point, and the user objects `mpips.train` accepts."""
from __future__ import annotations

import configparser
import os

import numpy as np
import pandas as pd
import pytest
import torch
from test_analysis_tables import write_log

from mpips import cli
from mpips.analysis import summarize
from mpips.api import as_dataset
from mpips.config import ConfigError
from mpips.io.log import TABLES
from mpips.training.data import Dataset
from mpips.training.models import build_model, check_model, model_label

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_runlog_tables_as_dataframes(tmp_path):
    log = write_log(tmp_path / "run", varying=True)
    frames = log.frames()
    assert set(frames) == set(TABLES)
    it = log.iterations_df
    assert list(it.columns) == list(TABLES["iterations"].names) and len(it) == len(log.iterations)
    np.testing.assert_array_equal(it["wait"].to_numpy(), log.iterations["wait"])
    assert it.groupby("worker")["batch"].sum().to_dict() == {
        w: int(log.iterations["batch"][log.iterations["worker"] == w].sum()) for w in (0, 1)}
    ev = log.evaluations_df
    assert ev["time"].is_monotonic_increasing and len(ev) == 20
    events = log.events_df
    assert {"time", "rank", "kind", "r_star", "group"} <= set(events.columns)
    assert (events.loc[events["kind"] == "dssp_controller", "r_star"].notna()).all()
    assert len(log.applies_df) == 20 and log.exchanges_df.empty
    with pytest.raises(KeyError, match="no table"):
        log.frame("nothing")


def test_summary_table_is_a_dataframe(tmp_path):
    write_log(tmp_path / "runs" / "a", varying=False)
    write_log(tmp_path / "runs" / "b", varying=True)
    runs = summarize.find_runs([str(tmp_path / "runs")])
    df = summarize.table(runs, 0.5)
    assert isinstance(df, pd.DataFrame) and list(df["run"]) == ["a", "b"]
    means = summarize.mean_table(df)
    assert len(means) == 1 and means["runs"].iloc[0] == 2 and means["reached"].iloc[0] == "2/2"
    assert means["final_accuracy"].iloc[0] == pytest.approx(df["final_accuracy"].mean())
    # rendering takes the DataFrame as it takes the dicts
    assert summarize.render_text(df, 0.5) == summarize.render_text(summarize.rows(runs, 0.5), 0.5)
    summarize.write_csv(df, str(tmp_path / "t.csv"))
    assert list(pd.read_csv(tmp_path / "t.csv")["run"]) == ["a", "b"]


def test_figures_draw_from_dataframes(tmp_path):
    from mpips.analysis import plot

    logs = [write_log(tmp_path / name, varying=v) for name, v in (("a", False), ("b", True))]
    ev = plot.evaluation_frame(logs)
    assert len(ev) == 40 and list(ev.groupby("run").size()) == [20, 20]
    assert {"k", "cluster", "name", "paradigm", "time", "accuracy", "loss"} <= set(ev.columns)
    runs = plot.target_frame(logs, 0.5)
    assert list(runs["time"]) == [logs[0].time_to_accuracy(0.5)] * 2
    assert plot.evaluation_frame([]).empty
    for figure in (plot.accuracy_figure(logs, str(tmp_path / "acc.png"), 0.5),
                   plot.time_to_target_figure(logs, str(tmp_path / "ttt.png"), 0.5)):
        assert os.path.getsize(figure) > 10_000


def test_mpips_summarize_and_plot_subcommands(tmp_path, capsys):
    run = str(write_log(tmp_path / "run", varying=True).run_dir)
    assert cli.main(["summarize", run, "--target", "0.5"]) == 0
    assert "dssp" in capsys.readouterr().out
    assert cli.main(["plot", run, "-o", str(tmp_path / "figs")]) == 0
    written = capsys.readouterr().out.split()
    assert {"accuracy.png", "staleness.png", "time_to_target.png", "dynamics-run.png"} <= {
        os.path.basename(p) for p in written}
    with pytest.raises(SystemExit):
        cli.main(["summarize", "--help"])
    assert capsys.readouterr().out.startswith("usage: mpips summarize")


def test_console_script_entry_point():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    scripts = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    assert scripts == ["mpips = mpips.cli:main"]
    assert "pandas" in cfg["options"]["install_requires"].split()


def test_plugins_are_loaded_before_the_configuration(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\nraise RuntimeError('no good')\n")
    assert cli.main(["train", "--plugin", str(bad)]) == 2
    assert "plugin " + str(bad) + " failed at line 2: RuntimeError: no good" in capsys.readouterr().err
    assert cli.main(["train", "--plugin", str(tmp_path / "none.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    good = tmp_path / "mine.py"
    good.write_text("import mpips\nclass Mine(mpips.Paradigm):\n    pass\n"
                    "mpips.register_paradigm('mine-cli', Mine, options={'k': 1})\n")
    try:
        with pytest.raises(SystemExit):
            cli.main(["simulate", "--plugin", str(good), "--help"])
        assert "mine-cli" in capsys.readouterr().out   # a choice of --paradigm
    finally:
        from mpips.paradigms import unregister_paradigm
        unregister_paradigm("mine-cli")


@pytest.mark.parametrize("source, line", [
    ("x = 1\ndef f(:\n    pass\n", 2),                                        # was the line of importlib's frame
    ("import mpips\n\nmpips.register_paradigm('Bad Name', mpips.Paradigm)\n", 3),  # was a line of mpips' registry
])
def test_a_plugin_that_fails_to_load_is_named_with_its_own_line(tmp_path, capsys, source, line):
    plugin = tmp_path / "mine.py"
    plugin.write_text(source)
    assert cli.main(["simulate", "--plugin", str(plugin)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mpips: error: plugin {plugin} failed at line {line}: ") and err.count("\n") == 1, err


def _run_plugin_paradigm(tmp_path, name: str, methods: str, *args: str) -> int:
    """`mpips simulate` (one process) of a plugin's paradigm `name`, a Paradigm with `methods`."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"import mpips\n\n\nclass Mine(mpips.Paradigm):\n{methods}\n\n"
                      f"mpips.register_paradigm({name!r}, Mine)\n")
    try:
        return cli.main(["simulate", "--plugin", str(plugin), "--paradigm", name, "--workers", "2",
                         "--iterations", "2", "--run-dir", str(tmp_path / "run"), *args])
    finally:
        from mpips.paradigms import unregister_paradigm
        unregister_paradigm(name)


def test_an_error_in_a_plugin_paradigms_hook_names_the_plugins_line(tmp_path, capsys):
    # (it named no file: the worker's call of the hook is mpips' line, not the one to fix)
    methods = "    def gate(self, worker, view):\n        return refuse(worker)\n\n\ndef refuse(worker):\n" \
              "    raise RuntimeError(f'no gate for {worker}')\n"
    assert _run_plugin_paradigm(tmp_path, "hook-raises", methods) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mpips: error: the simulated job failed: ")
    assert err.endswith(f"RuntimeError: no gate for 0 (plugin {tmp_path / 'plugin.py'}, line 10)\n"), err


@pytest.mark.parametrize("hook, returns, args", [
    ("batch_size(self, worker, view)", 0, []),                     # was a torch.cat traceback
    ("round_samples(self)", 0, []),                                 # was ZeroDivisionError
    ("iterations_per_epoch(self, num_train)", -1, ["--budget", "per-worker", "--iterations", "0"]),  # ran, epoch -1.00
    ("group_servers(cls, config)", -1, []),                         # a layout of -1 group servers
])
def test_a_plugin_hooks_count_below_one_is_a_one_line_error(tmp_path, capsys, hook, returns, args):
    decorator = "    @classmethod\n" if hook.startswith("group_servers") else ""
    methods = f"{decorator}    def {hook}:\n        return {returns}\n"
    assert _run_plugin_paradigm(tmp_path, "bad-count", methods, *args) == 2
    least = 0 if hook.startswith("group_servers") else 1
    assert capsys.readouterr().err == (f"mpips: error: invalid paradigm='bad-count': its {hook.split('(')[0]}() "
                                       f"returned {returns}, not an integer >= {least}\n")


def test_user_datasets():
    x = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
    y = np.arange(40) % 3
    d = as_dataset((x[:30], y[:30], x[30:], y[30:]))
    assert isinstance(d, Dataset) and d.input_shape == (5,) and d.num_classes == 3
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    pairs = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    d2 = as_dataset((torch.utils.data.Subset(pairs, range(30)), torch.utils.data.Subset(pairs, range(30, 40))))
    assert torch.equal(d2.x_train, d.x_train) and torch.equal(d2.y_test, d.y_test)
    assert as_dataset(d) is d and as_dataset(None) is None
    with pytest.raises(ConfigError, match="as many labels"):
        as_dataset((x, y[:3], x, y))
    with pytest.raises(ConfigError, match="a user's dataset is"):
        as_dataset(x)


def test_user_models():
    module = torch.nn.Linear(5, 3)
    assert build_model(module, (5,), 3) is module
    assert isinstance(build_model(lambda: torch.nn.Linear(5, 3), (5,), 3), torch.nn.Linear)
    made = build_model(lambda shape, classes: torch.nn.Linear(shape[0], classes), (5,), 3)
    assert made.out_features == 3
    with pytest.raises(ConfigError, match="returned int"):
        build_model(lambda: 3, (5,), 3)
    with pytest.raises(ConfigError, match="needs \\(batch, 4\\)"):
        check_model(module, model_label(module), torch.zeros(2, 5), 4)
    assert model_label(module) == "<Linear>"
