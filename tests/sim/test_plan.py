"""`mpips plan --profile`: three candidates x two seeds simulated on a
profile of 3 workers at 20 ms and one 4x slower, ranked; the table,
plan.json, the figure and a command that `mpips train` takes."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from mpips.cli import main
from mpips.io.log import RunLog, time_to_target

CLUSTER = {"workers": [{"device_time": {"a": 0.0, "c": 0.00125}, "count": 3},
                       {"device_time": {"a": 0.0, "c": 0.00125}, "slowdown": 4}]}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    base = tmp_path_factory.mktemp("plan")
    (base / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    # evaluations every half epoch: the time to the target is a mean of 3 (the
    # default --target-evaluations), of which 3 epochs at the default 1 would have 3 in all, all still climbing
    code = main(["plan", "--profile", str(base / "cluster.yaml"), "--candidates", "bsp,asp,ssp:staleness=1",
                 "--target", "0.8", "--epochs", "6", "--eval-every", "0.5", "--out", str(base / "out")])
    return base / "out", code


def test_the_plan_ranks_every_candidate_and_recommends_the_fastest(planned, capsys):
    out, code = planned
    assert code == 0
    plan = json.loads((out / "plan.json").read_text())
    ranking = plan["ranking"]
    assert [r["candidate"] for r in ranking][0] == "asp"
    assert sorted(r["candidate"] for r in ranking) == ["asp", "bsp", "ssp:staleness=1"]
    # BSP waits for the 4x worker every round; ASP does not (about 2.7x here). BSP's
    # seed 0 ran first, before any time to the target was known to stop it early.
    first = next(r for r in plan["runs"] if (r["candidate"], r["seed"]) == ("bsp", 0))
    assert first["stopped_at"] == 0 and first["time_to_target"] > 1.5 * ranking[0]["time_to_target"]
    assert len(plan["runs"]) == 6 and {r["seed"] for r in plan["runs"]} == {0, 1}
    assert plan["target_evaluations"] == 3
    for r in plan["runs"]:   # each's time to the target: when a mean of 3 of its evaluations reached it
        t, a = zip(*r["curve"])
        assert r["time_to_target"] == time_to_target(t, a, 0.8, 3) is not None
    for r in plan["runs"]:   # each a simulation on the profile's cluster
        log = RunLog(r["run_dir"])
        assert log.config["slowdown"] == "1x3,4" and log.layout["workers"] == 4
    assert (out / "plan.png").stat().st_size > 10_000
    table = (out / "plan.md").read_text()
    assert "| 1 | asp |" in table and "time to 80% (mean of 3 evaluations) s" in table and "recommended: asp" in table


def test_the_recommended_command_is_one_mpips_train_takes(planned, capsys):
    out, _ = planned
    how = json.loads((out / "plan.json").read_text())["recommended"]
    words = shlex.split(how["mpirun"])
    assert words[:2] == ["mpirun", "-n"] and words[3:7] == ["python", "-m", "mpips", "train"]
    # the same flags, asked how many ranks they need, say the -n of the command
    capsys.readouterr()
    assert main(["ranks", *words[7:]]) == 0
    assert int(capsys.readouterr().out) == int(words[2]) == how["ranks"] == 5
    assert how["sbatch"] == "MPIPS_EPOCHS=6 MPIPS_EVAL_EVERY=0.5 MPIPS_WORKERS=4 sbatch -n 5 jobs/asp.slurm"


def test_a_plan_needs_a_target_or_a_time_limit(tmp_path, capsys):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--candidates", "bsp",
                 "--out", str(tmp_path / "out")]) == 2
    assert "--target ACC" in capsys.readouterr().err


def test_a_time_to_the_target_needs_one_evaluation_or_more(tmp_path, capsys):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--candidates", "bsp", "--target", "0.5",
                 "--target-evaluations", "0", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "target_evaluations" in err and ">= 1" in err


def test_a_bad_candidate_is_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--candidates", "ssp:staleness=x",
                 "--target", "0.5", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "staleness" in err


def test_the_profile_is_the_cluster_not_the_settings_that_made_one(tmp_path):
    # --device-time, --slowdown, --random-stragglers given (an emulated
    # cluster's, as a probed plan is started): the search simulates the
    # profile's cluster, and the printed command keeps them
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    given = ["--device-time", "5ms", "--slowdown", "1,1,1,2", "--random-stragglers", "0.2:3:2", "--workers", "4"]
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--candidates", "asp", "--seeds", "0",
                 "--target", "0.5", "--epochs", "1", "--out", str(tmp_path / "out"), *given]) == 0
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    config = RunLog(plan["runs"][0]["run_dir"]).config
    assert (config["slowdown"], config["random_stragglers"]) == ("1x3,4", "")
    assert config["device_time"] == "a=0.0s,c=0.00125s,p=1.0"
    assert "--slowdown 1,1,1,2 --random-stragglers 0.2:3:2" in plan["recommended"]["mpirun"]


# --- what a plan may recommend, and how it ends (#52) ---------------------------------

def test_a_plan_whose_every_candidate_fails_recommends_nothing(tmp_path, capsys):
    """It printed `recommended: bsp` and `mpirun -n 2001 ...`, exit 0."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"workers": [{"device_time": {"c": 0.001}, "count": 2000}]}))
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--candidates", "bsp,asp", "--seeds", "0",
                 "--jobs", "1", "--target", "0.5", "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert "recommended" not in captured.out
    assert captured.err.startswith("mpips: error: no candidate ran, nothing to recommend (bsp: seed 0: "
                                   "ConfigError: invalid workers=2000: more than the 1438 training samples")
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["recommended"] is None


@pytest.mark.parametrize("flags, message", [
    # the printed command would exit 2 in `mpips train` (a 4-worker profile)
    (["--slowdown", "1,2"], "invalid slowdown='1,2'"),
    # a candidate of 2 workers was simulated on 2, and recommended with --workers 4
    (["--candidates", "ssp:workers=2"], "invalid --candidates 'ssp:workers=2': workers: the cluster profile's"),
])
def test_what_mpips_train_would_refuse_is_refused_before_any_run(tmp_path, capsys, flags, message):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--target", "0.5", "--candidates", "bsp",
                 "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out" / "runs").exists()


def test_a_plan_refuses_an_out_in_use(tmp_path, capsys):
    """Two plans on one --out replaced each other's files; the one whose runs failed exited 0."""
    from mpips.io.rundir import RunDirLock

    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "out").mkdir()
    lock = RunDirLock(str(tmp_path / "out"), option="out")
    try:
        assert main(["plan", "--profile", str(tmp_path / "cluster.yaml"), "--target", "0.5", "--candidates", "bsp",
                     "--out", str(tmp_path / "out")]) == 2
    finally:
        lock.release()
    assert "invalid --out " in capsys.readouterr().err and not (tmp_path / "out" / "runs").exists()


def test_sigterm_ends_the_plan_and_its_pool(tmp_path):
    """SIGTERM to `mpips plan` left its pool's processes (270 MB each) alive for good."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    out = tmp_path / "out"
    plan = subprocess.Popen([sys.executable, "-m", "mpips", "plan", "--profile", str(tmp_path / "cluster.yaml"),
                             "--candidates", "bsp,asp,ssp", "--seeds", "0", "--target", "0.99", "--epochs", "500",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("runs/*.out"))) < 2:   # both pool processes simulating
            assert plan.poll() is None and time.monotonic() < deadline, plan.communicate()[0]
            time.sleep(0.2)
        pool = children(plan.pid)
        assert len(pool) >= 2
        plan.send_signal(signal.SIGTERM)
        output = plan.communicate(timeout=60)[0]
    finally:
        plan.kill()
    assert plan.returncode == 128 + signal.SIGTERM, output
    assert "mpips: error: the plan stopped on SIGTERM: 0 of 3 simulations done" in output
    assert not [pid for pid in pool if os.path.exists(f"/proc/{pid}")]   # (ended, and reaped by the plan)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the pool's; multiprocessing's resource tracker aside)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                tracker = b"resource_tracker" in fh.read()
        except OSError:
            continue
        if parent == pid and not tracker:
            found.append(int(entry))
    return found
