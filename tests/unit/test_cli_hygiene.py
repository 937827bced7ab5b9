"""What a newcomer meets at the command line: a closed pipe ends quietly, an
argparse error is printed by one rank, a device time needs its unit, and
`mpips` finds a user's module where `python -m mpips` does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpips.cli import main
from mpips.config import ConfigError, load

MPIPS = Path(sys.executable).parent / "mpips"   # the console script of this environment


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpips", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, **kw)


def test_a_reader_that_stops_early_ends_the_output_quietly(tmp_path):
    assert main(["simulate", "--run-dir", str(tmp_path / "run"), "--workers", "1", "--iterations", "2"]) == 0
    p = subprocess.Popen([sys.executable, "-m", "mpips", "info", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()     # as `| head` does once it has its lines
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1 and err == "", err


def test_an_argparse_error_is_printed_by_rank_0_only():
    rank0 = run(["train", "--nesterov", "maybe"], env={**os.environ, "OMPI_COMM_WORLD_RANK": "0"})
    assert rank0.returncode == 2 and "unrecognized arguments: maybe" in rank0.stderr
    rank1 = run(["train", "--nesterov", "maybe"], env={**os.environ, "OMPI_COMM_WORLD_RANK": "1"})
    assert rank1.returncode == 2 and rank1.stderr == ""


@pytest.mark.parametrize("text", ["20", "0.02", "a=2,c=1ms"])
def test_a_device_time_without_its_unit_is_refused(text):
    with pytest.raises(ConfigError, match="device_time.*with its unit") as e:
        load(overrides={"device_time": text})
    assert "\n" not in str(e.value)


def test_device_times_with_units_and_zero_are_accepted():
    assert load(overrides={"device_time": "20ms"}).device_time_model().seconds(16) == pytest.approx(0.02)
    assert load(overrides={"device_time": "a=0,c=1ms,p=1"}).device_time_model().seconds(2) == pytest.approx(0.002)


def test_the_command_and_python_m_find_a_users_module_alike(tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import torch\n\ndef net(shape, classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, classes))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for command in ([str(MPIPS)], [sys.executable, "-m", "mpips"]):
        p = subprocess.run([*command, "simulate", "--model", "mymodel:net", "--workers", "1", "--iterations", "2",
                            "--run-dir", str(tmp_path / f"run-{len(command)}")], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        assert p.returncode == 0, (command, p.stdout[-2000:])


COMMAND_NUMBERS = [("summarize", "--target"), ("plot", "--target"), ("compare", "--target"), ("compare", "--timeout"),
                   ("syncswitch-search", "--low"), ("syncswitch-search", "--high"),
                   ("syncswitch-search", "--tolerance"), ("syncswitch-search", "--timeout")]


@pytest.mark.parametrize("command, option", COMMAND_NUMBERS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_commands_own_numbers_refuse_nan_and_inf(command, option, value, capsys, tmp_path):
    required = {"plot": ["RUN", "-o", str(tmp_path)], "summarize": ["RUN"], "syncswitch-search": ["-n", "5"]}
    with pytest.raises(SystemExit) as e:
        main([command, *required.get(command, []), f"{option}={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert option in err and "a finite number" in err, err


@pytest.mark.parametrize("window", ["0:inf", "-inf:1"])
def test_a_plot_window_refuses_inf(window, capsys, tmp_path):
    # (it drew until matplotlib's ValueError: Axis limits cannot be NaN or Inf)
    with pytest.raises(SystemExit) as e:
        main(["plot", "RUN", "-o", str(tmp_path), f"--window={window}"])
    assert e.value.code == 2 and "--window: START:END in finite seconds" in capsys.readouterr().err


# A folder a command writes into that cannot be one: checked before any run (compare's and
# syncswitch-search's ended in a traceback, compare's --out once every run was done).
OUTPUTS = [("compare", "--runs", ["--simulate", "--workers", "1", "--paradigms", "ssp"]),
           ("compare", "--out", ["--simulate", "--workers", "1", "--paradigms", "ssp"]),
           ("syncswitch-search", "--out", ["-n", "3"]),
           ("plan", "--out", ["--profile", "CLUSTER", "--target", "0.5"])]


@pytest.mark.parametrize("command, option, flags", OUTPUTS, ids=[f"{c} {o}" for c, o, _ in OUTPUTS])
@pytest.mark.parametrize("where", ["a file", "below a file", "read-only"])
def test_an_output_folder_that_cannot_be_one_is_one_line_before_any_run(command, option, flags, where, tmp_path,
                                                                          capsys, read_only_folder):
    (tmp_path / "file").write_text("")
    (tmp_path / "cluster.yaml").write_text("workers:\n- device_time: {a: 0.0, c: 0.001}\n  count: 2\n")
    folder = {"a file": tmp_path / "file", "below a file": tmp_path / "file" / "sub",
              "read-only": read_only_folder / "out"}[where]
    flags = [str(tmp_path / "cluster.yaml") if f == "CLUSTER" else f for f in flags]
    assert main([command, *flags, option, str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"mpips: error: invalid {option} "), err
    assert str(folder) in err[0] and "cannot write there" in err[0], err
    assert not list(tmp_path.glob("**/*.h5")), "a run was started"


def test_every_numeric_setting_refuses_nan_and_inf():
    import dataclasses

    from mpips.config import Config

    for f in dataclasses.fields(Config):
        if isinstance(f.default, float):
            for value in ("nan", "inf", "-inf"):
                with pytest.raises(ConfigError, match=f.name):
                    load(overrides={f.name: value})


def test_a_batch_larger_than_the_training_set_is_refused(tmp_path, capsys):
    # (under the global budget it ran, and its one claim logged epoch 1.39 after a single pass)
    assert main(["simulate", "--workers", "2", "--batch-size", "2000", "--run-dir", str(tmp_path / "run")]) == 2
    assert "invalid batch_size=2000: must be <= 1438, the training samples of digits" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("small") / "run"
    assert main(["simulate", "--run-dir", str(run), "--workers", "1", "--iterations", "2"]) == 0
    return run


# summarize's files and plot's folder where they cannot be (a file where plot's folder goes, a
# folder where summarize's file goes): one line each, exit 2
WRITTEN = [(command, option, where) for command, option, places in [
    ("summarize", "--csv", ("a folder", "below a file", "read-only")),
    ("summarize", "--markdown", ("a folder", "below a file", "read-only")),
    ("plot", "-o", ("a file", "below a file", "read-only"))] for where in places]


@pytest.mark.parametrize("command, option, where", WRITTEN)
def test_an_output_path_that_cannot_be_written_is_one_line(command, option, where, small_run, tmp_path, capsys,
                                                            read_only_folder):
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    path = {"a file": tmp_path / "file", "a folder": tmp_path / "folder", "below a file": tmp_path / "file" / "x",
            "read-only": read_only_folder / "x"}[where]
    assert main([command, str(small_run), option, str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "cannot write" in err[0] and str(path) in err[0], err


def test_plot_on_an_unreadable_run_h5_is_one_line(small_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    (run / "run.h5").write_bytes((run / "run.h5").read_bytes()[:1000])
    assert main(["plot", str(run), "-o", str(tmp_path / "figures")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "run.h5: not a readable run log" in err[0], err


def test_info_shows_the_runs_settings(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    assert main(["simulate", "--run-dir", run_dir, "--workers", "2", "--iterations", "2", "--staleness", "5",
                 "--slowdown", "1,2", "--lr", "0.02", "--progress", "off"]) == 0
    capsys.readouterr()
    assert main(["info", run_dir]) == 0
    shown = {line.split()[0]: line.split(None, 1)[1] for line in capsys.readouterr().out.splitlines()
             if line.startswith("  ")}
    assert shown["staleness"] == "5" and shown["slowdown"] == "'1,2'" and shown["lr"] == "0.02"
    assert shown["seed"] == "0" and shown["paradigm"] == "'ssp'" and "eval_every" not in shown   # a default
    assert main(["info", run_dir, "--json"]) == 0
    assert '"settings": {"paradigm": "ssp", "lr": 0.02' in capsys.readouterr().out


def test_version_and_the_whole_help_of_plot():
    import mpips

    assert run(["--version"]).stdout.strip() == f"mpips {mpips.__version__}"
    help_ = run(["plot", "--help"]).stdout
    assert "dynamics-RUN.png" in help_ and "the axes\nsay so." in help_   # the docstring to its end
