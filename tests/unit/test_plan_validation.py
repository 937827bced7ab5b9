"""benchmarks/plan_validation.py's bookkeeping, on made-up plan and job
records: the seeds on both sides, each candidate's prediction error next to
its seeds' spread and noise, a failure's reason in the table, the estimate
of how long a validation takes."""
import argparse
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import plan_validation as pv  # noqa: E402


def runs(times, accuracy=0.97, **extra):
    return [{"seed": k, "time_to_target": t, "final_accuracy": accuracy, **extra} for k, t in enumerate(times)]


def test_seeds_are_a_count_or_a_list():
    assert pv.parse_seeds("4") == [0, 1, 2, 3]
    assert pv.parse_seeds("0,1") == [0, 1] and pv.parse_seeds("3,") == [3]
    for bad in ("0", "-1", "1,1", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            pv.parse_seeds(bad)


def test_the_error_is_predicted_over_measured_next_to_the_seeds_noise():
    # measured 4.54-4.55 s (no spread), predicted 5.46-5.90: +25%, beyond any noise
    v = pv.compare(runs([5.46, 5.90, 5.46, 5.90]), runs([4.54, 4.55, 4.54, 4.55]))
    assert v["error"] == pytest.approx(5.68 / 4.545 - 1)
    assert v["measured_spread"] == pytest.approx(0.01 / 4.545)
    assert v["verdict"] == "beyond 15% and the seeds' noise"
    # measured seeds 27% apart: -23% is within 2 standard errors of the two means' ratio
    v = pv.compare(runs([2.9, 3.9, 2.9, 3.9]), runs([3.4, 5.4, 3.4, 5.4]))
    se_m = math.sqrt(4 / 3) * 1.0 / 2 / 4.4       # sd (ddof 1) of 3.4, 5.4, 3.4, 5.4 is sqrt(4/3); / sqrt(4); / mean
    se_p = math.sqrt(1 / 3) / 2 / 3.4
    assert v["noise"] == pytest.approx(2 * math.hypot(se_m, se_p))
    assert v["error"] == pytest.approx(3.4 / 4.4 - 1) and v["verdict"] == "beyond 15%, within the seeds' noise"
    assert pv.compare(runs([3.0, 3.2]), runs([3.1, 3.3]))["verdict"] == "within 15%"


def test_a_seed_short_of_the_target_is_counted_not_averaged():
    v = pv.compare(runs([3.0, None, 3.1, 3.2]), runs([3.0, 3.1, 3.2, 3.3]))
    assert v["predicted_time"] is None and v["error"] is None
    assert v["verdict"] == "target not reached in every seed (simulated 3/4, MPI 4/4)"
    assert pv.times_cell(None, v["predicted_times"]) == "3/4 reached"


OUTPUT = """mpips: rank 2: worker 1 at iteration 40
Traceback (most recent call last):
  File "x.py", line 3, in <module>
mpips.runtime.job.train.TrainingFailed: the loss diverged (nan) at iteration 41
mpiexec noticed that process rank 2 exited on signal
"""


def test_a_failed_candidate_shows_why():
    assert pv.failure(OUTPUT, 2) == "exit 2: mpips.runtime.job.train.TrainingFailed: the loss diverged (nan) at iteration 41"
    simulated = runs([3.0, 3.1]) + [{"seed": 2, "time_to_target": None, "final_accuracy": 0.0,
                                     "failed": "diverged: loss nan"}]
    measured = runs([3.1, 3.2]) + [{"seed": 2, "failed": pv.failure(OUTPUT, 2)}]
    v = pv.compare(simulated, measured)
    assert v["verdict"] == ("failed: simulated seed 2: diverged: loss nan; MPI seed 2: exit 2: "
                            "mpips.runtime.job.train.TrainingFailed: the loss diverged (nan) at iteration 41")
    assert v["accuracy"] == pytest.approx(0.97)   # of the runs that ran, not a 0 for the failed one
    plan = {"runs": [{**r, "candidate": "ssp"} for r in simulated] + [{**r, "candidate": "asp"} for r in runs([2] * 3)],
            "recommended": {"candidate": "asp"}, "cluster": {}}
    result = pv.shape_result("mixed", [], plan, {"ssp": measured, "asp": runs([2.1, 2.1, 2.1])}, 70.0)
    assert result["real_best"] == "asp" and result["regret"] == 1.0
    args = argparse.Namespace(device_time="20ms", epochs=10.0, target=0.9, target_evaluations=3, probe_seconds=60.0)
    text = pv.report([result], args, [0, 1, 2], 100.0)
    row = next(line for line in text.splitlines() if line.startswith("| mixed | ssp |"))
    assert "failed: simulated seed 2: diverged: loss nan; MPI seed 2: exit 2:" in row


def test_the_estimate_scales_the_previous_jobs_by_seeds_and_candidates():
    previous = {"seeds": [0, 1], "probe_seconds": 60.0, "results": [
        {"shape": "mixed", "plan_seconds": 70.0, "candidates": {
            "bsp": {"measured_runs": [{"job_seconds": 20.0}, {"job_seconds": 22.0}]},
            "asp": {"measured_runs": [{"job_seconds": 10.0}, {"job_seconds": 12.0}]}}}]}
    seconds, how = pv.estimate(previous, ["mixed"], ["bsp", "asp", "ssp:staleness=1"], 4, 60.0)
    # jobs: 4 x (21 + 11 + the shape's mean 16); plan: 60 s probe + 10 s search x (4 x 3) / (2 x 2)
    assert seconds == pytest.approx(4 * (21 + 11 + 16) + 60 + 10 * 3)
    assert "ssp:staleness=1 not run before" in how
    assert math.isnan(pv.estimate(None, ["mixed"], ["bsp"], 4, 60.0)[0])


def test_a_candidates_settings_are_the_flags_mpips_train_reads():
    # a boolean setting is a bare flag: "--dylu True" was an unrecognized argument
    c = pv.Candidate.parse("localsgd:local_mode=async:dylu=true:delayed_nesterov=4")
    flags = pv.candidate_flags(c)
    assert flags == ["--local-mode", "async", "--dylu", "--delayed-nesterov", "4"]
    from mpips.cli import parser
    parser().parse_args(["train", "--paradigm", "localsgd", *flags])


def test_a_kept_plan_of_another_statistic_is_ranked_again_on_this_one(tmp_path):
    # asp touches 90% at 1 s and swings under it until 4 s; gssp climbs and holds it from 2 s
    swinging = [(1, 0.91), (2, 0.80), (3, 0.92), (4, 0.93), (5, 0.95)]
    climbing = [(1, 0.85), (2, 0.90), (3, 0.91), (4, 0.92), (5, 0.93)]
    plan = {"target_evaluations": 1, "recommended": {"candidate": "asp"}, "runs": [
        {"candidate": name, "seed": seed, "run_dir": "", "time_to_target": 1.0 if name == "asp" else 2.0,
         "final_accuracy": curve[-1][1], "seconds": 5.0, "bytes_sent": 0, "stopped_at": 0.0, "curve": curve,
         "job_seconds": 0.1, "failed": ""}
        for seed in (0, 1) for name, curve in (("asp", swinging), ("gssp", climbing))]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    same = pv.read_plan(str(tmp_path), 0.9, 1)   # its own statistic: its times as they were
    assert [r["time_to_target"] for r in same["runs"]] == [1.0, 2.0, 1.0, 2.0]
    assert same["recommended"]["candidate"] == "asp"
    again = pv.read_plan(str(tmp_path), 0.9, 3)
    # means of 3: asp .877 .883 .933 (at 5 s); gssp .887 .91 (at 4 s)
    assert again["recommended"]["candidate"] == "gssp" and again["target_evaluations"] == 3
    assert {(r["candidate"], r["time_to_target"]) for r in again["runs"]} == {("asp", 5), ("gssp", 4)}


def test_the_misses_of_an_exact_prediction_are_its_seeds_chance_of_an_error_beyond_the_bound():
    # noise 0.30: one standard deviation of 0.15, the bound: P(|z| > 1) = 0.3173; noise 0.15: P(|z| > 2) = 0.0455
    candidates = [{"error": 0.0, "noise": 0.30}, {"error": -0.2, "noise": 0.15}, {"error": 0.1, "noise": math.nan},
                  {"error": None, "noise": None}]
    assert pv.exact_misses(candidates) == pytest.approx(0.3173 + 0.0455, abs=1e-4)
