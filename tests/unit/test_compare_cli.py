"""`mpips compare` without training anything: what --paradigms and --seeds
accept, the command of each run, the one-line errors (exit 2), and why a
failed run failed. A real comparison: tests/sim/test_simulated_compare.py (simulated)
and tests/mpi/test_compare_job.py (under mpiexec)."""
from __future__ import annotations

import sys

import pytest

from mpips import cli
from mpips.config import ConfigError
from mpips.experiments.compare import (Comparison, OptionError, failure_reason, flags, parse_seeds,
                                       setup_settings)


def test_paradigms_and_variants():
    assert setup_settings("bsp") == {"paradigm": "bsp"}
    assert setup_settings("gssp+gdtopk") == {"paradigm": "gssp", "compressor": "gdtopk"}
    assert setup_settings("ssp+topk") == {"paradigm": "ssp", "compressor": "topk"}
    for bad in ("foo", "gssp+zip", "gssp+none", "", "+topk"):
        with pytest.raises(OptionError, match=r"invalid --paradigms .*one of bsp, asp, .*\+gdtopk"):
            setup_settings(bad)


def test_seeds():
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds("3,1,3") == [3, 1]          # each once: a run directory per seed
    for bad in ("0,x", "", "1.5", "0,,1"):
        with pytest.raises(OptionError, match="invalid --seeds .*comma-separated integers"):
            parse_seeds(bad)


def test_settings_as_train_flags():
    assert flags({"workers": 4, "lr": 0.05, "evaluator": True, "nesterov": False, "run_dir": "r/x"}) == [
        "--workers", "4", "--lr", "0.05", "--evaluator", "--no-nesterov", "--run-dir", "r/x"]


def test_each_run_under_mpi_gets_its_ranks_and_settings(tmp_path, srun_on_path):
    job = tmp_path / "job.yaml"
    job.write_text("groups: 3\n")
    c = Comparison(["bsp", "gssp+gdtopk", "bsp"], [0, 1], {"workers": "3", "evaluator": True}, "out",
                   launcher="srun --mpi=pmix", config=str(job), plugins=["mine.py"])
    assert [run for run, _ in c.plan] == ["out/bsp-s0", "out/gssp+gdtopk-s0", "out/bsp-s1", "out/gssp+gdtopk-s1"]
    bsp, gssp = c.plan[0][1], c.plan[1][1]
    # servers + group servers (GSSP's groups, from the YAML file) + workers + evaluator
    assert bsp[:4] == ["srun", "--mpi=pmix", "-n", "5"] and gssp[:4] == ["srun", "--mpi=pmix", "-n", "8"]
    assert bsp[4:] == [sys.executable, "-m", "mpips", "train", "--config", str(job), "--plugin", "mine.py",
                       "--workers", "3", "--evaluator", "--paradigm", "bsp", "--seed", "0",
                       "--run-dir", "out/bsp-s0"]
    assert gssp[gssp.index("--paradigm"):] == ["--paradigm", "gssp", "--compressor", "gdtopk", "--seed", "0",
                                               "--run-dir", "out/gssp+gdtopk-s0"]


def test_each_simulated_run_is_a_process_of_its_own():
    c = Comparison(["ssp"], [3], {"workers": 64}, "r", simulate=True, prefix="het-")
    assert c.plan == [("r/het-ssp-s3", [sys.executable, "-m", "mpips", "simulate", "--workers", "64",
                                        "--paradigm", "ssp", "--seed", "3", "--run-dir", "r/het-ssp-s3"])]


def test_bad_settings_stop_the_comparison_before_any_run(tmp_path):
    with pytest.raises(ConfigError, match="workers"):
        Comparison(["bsp"], [0], {}, str(tmp_path))                  # under MPI: how many ranks?
    with pytest.raises(ConfigError, match="device"):
        Comparison(["bsp"], [0], {"workers": 2, "device": "cuda"}, str(tmp_path), simulate=True)
    with pytest.raises(ConfigError, match="groups"):                 # only GSSP has group servers
        Comparison(["bsp", "gssp"], [0], {"workers": 2, "groups": 3}, str(tmp_path))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["--paradigms", "bsp,foo", "--workers", "2"], "invalid --paradigms 'foo': one of bsp, asp,"),
    (["--seeds", "0,x", "--workers", "2"], "invalid --seeds '0,x': comma-separated integers"),
    (["--paradigms", "bsp"], "invalid workers=0: the number of workers is needed (--workers N)"),
    (["--workers", "2", "--lr", "fast"], "invalid lr='fast': must be of type float"),
    # a launcher that cannot start the runs (each was a traceback: FileNotFoundError, ValueError)
    (["--workers", "2", "--launcher", ""], "invalid --launcher '': empty; a command that starts N ranks"),
    (["--workers", "2", "--launcher", "no-such-mpiexec -x"],
     "invalid --launcher 'no-such-mpiexec -x': cannot start no-such-mpiexec (not on PATH, or not an executable"),
    (["--workers", "2", "--launcher", "/"], "invalid --launcher '/': cannot start /"),
    (["--workers", "2", "--simulate", "--parallel", "0"], "invalid --parallel '0': a whole number >= 1"),
    (["--workers", "2", "--launcher", "srun '--mpi=pmix"], "not a command line (No closing quotation)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert cli.main(["compare", "--runs", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"mpips: error: {err.split('mpips: error: ', 1)[1]}" and err.count("\n") == 1
    assert message in err
    assert not list(tmp_path.iterdir())


def test_a_launcher_that_starts_nothing_is_a_failed_run(tmp_path):
    # (`true` exits 0: the run counted as finished, and reading its log was a traceback)
    c = Comparison(["bsp"], [0], {"workers": 1, "iterations": 1}, str(tmp_path), launcher="true")
    assert c.train() == ([], ["bsp-s0: exited 0 without a finished run log"])


def test_compare_is_a_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "compare" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    help_ = capsys.readouterr().out
    assert "--paradigms" in help_ and "--simulate" in help_ and "--staleness" in help_
    assert "--run-dir" not in help_ and "--paradigm " not in help_   # set per run


def test_a_run_past_its_timeout_fails_and_is_left_out(tmp_path, capsys):
    assert cli.main(["compare", "--simulate", "--paradigms", "bsp", "--workers", "2", "--timeout", "0.01",
                     "--runs", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "mpips: run bsp-s0 failed: no result within 0.01 s (see " in err
    assert "mpips: error: no run finished" in err


def test_why_a_run_failed(tmp_path):
    out = tmp_path / "run.out"
    cases = {
        # mpips' own message, after the ranks' output
        "mpips: ssp | 1 server(s), 4 workers\nmpips: error: invalid staleness=-1: must be >= 0\n"
        "----------\nprterun has exited\n": "mpips: error: invalid staleness=-1: must be >= 0",
        # Open MPI's: the first line of its last message
        "prterun has detected an attempt to run as root.\n\nRunning as root is discouraged\n"
        "------------------------------\n": "prterun has detected an attempt to run as root.",
        "mpips: ssp | 1 server(s)\n-----\nprterun noticed that process rank 1 with PID 0 on node vm exited on\n"
        "signal 9 (Killed).\n-----\n": "prterun noticed that process rank 1 with PID 0 on node vm exited on",
        "": "no output",
    }
    for text, reason in cases.items():
        out.write_text("mpiexec -n 5 python -m mpips train --run-dir errors/x\n" + text)
        assert failure_reason(str(out)) == reason
