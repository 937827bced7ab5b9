"""`mpips compare` without training anything: what --paradigms and --seeds
accept, the command of each run, the one-line errors (exit 2), and why a
failed run failed. A real comparison: tests/sim/test_simulated_compare.py (simulated)
and tests/mpi/test_compare_job.py (under mpiexec)."""
from __future__ import annotations

import sys

import pytest

from mpips import cli
from mpips.config import ConfigError
from mpips.experiments.compare import Comparison, OptionError, failure_reason, flags, parse_seeds
from mpips.experiments.launch import Launches
from mpips.experiments.plan import Candidate
from mpips.experiments.setups import Setup


def test_paradigms_and_variants():
    assert Setup.parse("bsp").settings == {"paradigm": "bsp"}
    assert Setup.parse("gssp+gdtopk").settings == {"paradigm": "gssp", "compressor": "gdtopk"}
    assert Setup.parse("ssp+topk").settings == {"paradigm": "ssp", "compressor": "topk"}
    for bad in ("foo", "gssp+zip", "gssp+none", "", "+topk", "foo:staleness=1"):
        with pytest.raises(OptionError, match=r"invalid --paradigms .*one of bsp, asp, .*\+gdtopk"):
            Setup.parse(bad)


def test_entries_with_settings_of_their_own():
    # `mpips plan --candidates`' syntax, by the same parser: values read as their fields' types
    async_ = Setup.parse("localsgd:local_mode=async:dylu=true:delayed-nesterov=8")
    assert async_.name == "localsgd:local_mode=async:dylu=true:delayed-nesterov=8"
    assert async_.settings == {"paradigm": "localsgd", "local_mode": "async", "dylu": True, "delayed_nesterov": 8}
    assert Setup.parse("gssp+gdtopk:groups=4").settings == {"paradigm": "gssp", "compressor": "gdtopk", "groups": 4}
    assert Setup.parse(" ssp:staleness=1 ").settings == {"paradigm": "ssp", "staleness": 1}
    assert Candidate.parse("gssp+gdtopk").settings == {"paradigm": "gssp", "compressor": "gdtopk"}


@pytest.mark.parametrize("entry, allowed", [
    ("ssp:staleness=x", "staleness: must be of type int"),
    ("localsgd:dylu=maybe", "dylu: must be of type bool"),
    ("localsgd:local_mode=asyn", "local_mode: allowed: sync, async"),
    ("localsgd:optimizer=lamb", "optimizer: allowed: sgd, adam"),
    ("ssp:stalenes=1", "unknown setting 'stalenes' (did you mean staleness?); any train setting"),
    ("ssp:no_such_thing=1", "unknown setting 'no_such_thing'; any train setting"),
    ("ssp:staleness", "'staleness': SETTING=VALUE"),
    ("ssp:=1", "'=1': SETTING=VALUE"),
    ("ssp:seed=1", "seed: set per run"),
    ("ssp:run_dir=x", "run_dir: set per run"),
    ("ssp:paradigm=bsp", "paradigm: set per run"),
    ("ssp:staleness=1:staleness=2", "staleness given twice"),
    ("gssp+gdtopk:compressor=topk", "compressor given twice"),
])
def test_a_bad_entry_is_one_line_naming_the_setting_and_what_is_allowed(entry, allowed):
    for parse, option in ((Setup.parse, "--paradigms"), (Candidate.parse, "--candidates")):   # plan's: the same
        with pytest.raises(OptionError) as e:
            parse(entry)
        assert str(e.value).startswith(f"invalid {option} {entry!r}: {allowed}") and "\n" not in str(e.value)


def test_a_value_the_configuration_rejects_names_the_entry(tmp_path):
    # checked with the other settings: DyLU only in the asynchronous mode, staleness >= 0
    with pytest.raises(OptionError, match=r"^invalid --paradigms 'localsgd:dylu=true': dylu=True: only with "
                                          r"local_mode async"):
        Comparison(["bsp", "localsgd:dylu=true"], [0], {"workers": 2}, str(tmp_path), simulate=True)
    with pytest.raises(OptionError, match=r"^invalid --paradigms 'ssp:staleness=-1': staleness=-1: "):
        Comparison(["ssp:staleness=-1"], [0], {"workers": 2}, str(tmp_path), simulate=True)
    assert not list(tmp_path.iterdir())


def test_an_entry_with_settings_is_a_run_of_its_own():
    c = Comparison(["localsgd", "localsgd:local_mode=async:dylu=true", "ssp:staleness=1"], [0],
                   {"workers": 4, "staleness": 2}, "r", simulate=True, prefix="het-")
    runs = ["r/het-localsgd-s0", "r/het-localsgd-local_modeasync-dylutrue-s0", "r/het-ssp-staleness1-s0"]
    assert [run for run, _ in c.plan] == runs
    assert c.labels == dict(zip(runs, c.setups))
    sync, async_, ssp = (cmd[cmd.index("--workers"):] for _, cmd in c.plan)
    # the entry's settings over the shared ones (staleness 1, not 2)
    assert sync == ["--workers", "4", "--staleness", "2", "--paradigm", "localsgd", "--seed", "0",
                    "--run-dir", runs[0]]
    assert async_ == ["--workers", "4", "--staleness", "2", "--paradigm", "localsgd", "--local-mode", "async",
                      "--dylu", "--seed", "0", "--run-dir", runs[1]]
    assert ssp == ["--workers", "4", "--staleness", "1", "--paradigm", "ssp", "--seed", "0", "--run-dir", runs[2]]


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
    (["--paradigms", "bsp,foo", "--workers", "2"], "invalid --paradigms 'foo': PARADIGM[+COMPRESSOR]"
                                                    "[:SETTING=VALUE...], PARADIGM one of bsp, asp,"),
    (["--paradigms", "bsp,localsgd:local_mode=asyn", "--workers", "2"],
     "invalid --paradigms 'localsgd:local_mode=asyn': local_mode: allowed: sync, async"),
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
    with Launches() as launches:
        assert c.train(launches) == ([], ["bsp-s0: exited 0 without a finished run log"])


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


def test_claim_makes_a_missing_runs_folder_and_holds_it(tmp_path):
    runs = tmp_path / "new" / "section"
    c = Comparison(["bsp"], [0], {"workers": 2}, str(runs), simulate=True)
    lock = c.claim()
    try:
        assert runs.is_dir() and (runs / ".lock").is_file()
        with pytest.raises(OptionError, match="in use"):
            Comparison(["bsp"], [1], {"workers": 2}, str(runs), simulate=True).claim()
    finally:
        lock.release()
    (tmp_path / "file").write_text("")
    with pytest.raises(OptionError, match="cannot write there"):
        Comparison(["bsp"], [0], {"workers": 2}, str(tmp_path / "file"), simulate=True).claim()
