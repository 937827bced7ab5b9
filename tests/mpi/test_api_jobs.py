"""The package used from Python and with a paradigm of one's own, as whole
MPI jobs: a user's script calling `mpips.train(model=, dataset=, loss=)`,
`mpips train --plugin mine.py` with a paradigm registered outside mpips and
its own settings as flags, and `mpips.train` with them as keywords."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from conftest import mpiexec, train

from mpips.analysis import summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a script's own directory comes first on its sys.path: this checkout's mpips next
ENV = {"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

USER_SCRIPT = '''
import json, sys
import numpy as np
import torch
import mpips

rng = np.random.default_rng(1)
centers = rng.normal(size=(4, 6)) * 3
labels = rng.integers(0, 4, size=600)
x = (centers[labels] + rng.normal(size=(600, 6))).astype(np.float32)
calls = 0

def loss(out, target):             # the user's loss: counted, then cross-entropy
    global calls
    calls += 1
    return torch.nn.functional.cross_entropy(out, target)

log = mpips.train(paradigm="ssp", staleness=2, epochs=2, batch_size=20, lr=0.2,
                  run_dir=sys.argv[1], stall_timeout=60,
                  model=lambda shape, classes: torch.nn.Sequential(torch.nn.Linear(shape[0], 16),
                                                                   torch.nn.ReLU(), torch.nn.Linear(16, classes)),
                  dataset=(torch.from_numpy(x[:500]), torch.from_numpy(labels[:500]),
                           x[500:], labels[500:]),
                  loss=loss)
it = log.iterations_df
print("RESULT " + json.dumps({"calls": calls, "iterations": len(log.iterations),
                              "workers": sorted(int(w) for w in it["worker"].unique()),
                              "samples": int(it["batch"].sum()),
                              "final_accuracy": float(log.evaluations["accuracy"][-1]),
                              "status": log.status, "user_objects": log.user_objects}), flush=True)
'''


def test_a_users_script_trains_its_own_model_data_and_loss(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    run_dir = tmp_path / "run"
    p = mpiexec(4, [str(script), str(run_dir)], timeout=180, env=ENV)
    out = p.stdout.replace("\x00", "")
    assert p.returncode == 0, out[-4000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line]
    assert len(results) == 4, out[-4000:]            # every rank got the RunLog back
    first = results[0]
    for r in results:                                 # the same log on every rank
        assert {k: r[k] for k in ("iterations", "workers", "samples", "status")} == \
               {k: first[k] for k in ("iterations", "workers", "samples", "status")}
    assert first["status"] == "finished" and first["workers"] == [0, 1, 2]
    assert first["samples"] == 2 * 500                # 2 epochs of the user's 500 training samples
    # the user's loss computed every gradient (and the evaluations)
    assert sum(r["calls"] for r in results) >= first["iterations"] > 0
    # it trained on the user's four clusters (chance: 0.25). Its 50 SSP iterations under MPI
    # end where the ranks' interleaving leaves them: 0.65-0.97 in 21 runs (seeds 0-4 under
    # three CPU kernels and 6 runs of seed 0; benchmarks/test_margins.py's kernels), 0.65 once
    assert first["final_accuracy"] > 0.5, first
    # run.h5 says what was used instead of the configuration's model and dataset
    assert first["user_objects"] == {
        "model": "<lambda>", "loss": "loss",
        "dataset": "user: 500 training and 100 test samples of shape (6,), 4 classes"}
    # and every reader names them, from the job's first line on, never the defaults
    model, data = "<lambda> (Sequential)", "user: 500 training and 100 test samples of shape (6,), 4 classes"
    assert f"| {model} on {data} (" in out and "mlp on digits" not in out
    info = subprocess.run([sys.executable, "-m", "mpips", "info", str(run_dir)], stdout=subprocess.PIPE, text=True)
    lines = dict((line.split(None, 1) + [""])[:2] for line in info.stdout.splitlines())
    assert (lines["model"], lines["dataset"]) == (model, data), info.stdout
    table = summarize.render_text(summarize.rows([str(run_dir)], 0.5), 0.5)
    assert f"{model} on user" in table and "digits" not in table and "mlp" not in table, table


def test_a_failing_rank_aborts_the_job_from_python(tmp_path):
    script = tmp_path / "user.py"
    script.write_text("import sys, mpips\n"
                      "mpips.train(epochs=1, fail_at='1:2', run_dir=sys.argv[1], stall_timeout=60)\n"
                      "print('NOT REACHED', flush=True)\n")
    p = mpiexec(4, [str(script), str(tmp_path / "run")], timeout=120, env=ENV)
    out = p.stdout.replace("\x00", "")
    assert p.returncode != 0 and "NOT REACHED" not in out, out[-4000:]
    assert "RuntimeError: injected failure (fail_at) at worker 1 iteration 2" in out
    assert "aborting the job" in out


PLUGIN = '''
"""A paradigm of one's own: SSP's bound, and a gate that turns a worker away
on all but every `period`-th poll (then the base read-your-writes gate)."""
from dataclasses import dataclass

from mpips import Options, setting
from mpips.paradigms import Gate, Paradigm, bounded_gate, register_paradigm


@dataclass(frozen=True)
class EveryOtherOptions(Options):
    period: int = setting(2, "polls per pass", low=1, high=1000)
    bound: int = setting(1, "staleness bound", low=0)


class EveryOther(Paradigm):
    name = "every-other"
    Options = EveryOtherOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.period = self.options.period
        self.polls = 0
        self.told = False

    def gate(self, worker, view):
        self.polls += 1
        if self.polls % self.period:
            return Gate(False, (worker,))
        return bounded_gate(worker, view, self.options.bound)

    def measured(self, worker, *, clock, batch, compute, transfer):
        if not self.told:
            self.told = True
            return {"kind": "every_other", "period": self.period, "polls": self.polls}
        return None


register_paradigm("every-other", EveryOther)
'''


def test_a_paradigm_from_a_plugin_file_trains_from_the_command_line(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    job = train(4, tmp_path / "run", "--plugin", str(plugin), "--paradigm", "every-other",
                "--period", "3", "--iterations", "12", "--budget", "per-worker", timeout=180)
    log = job.log
    assert log.paradigm == "every-other" and (log.config["period"], log.config["bound"]) == (3, 1)
    assert log.status == "finished"
    it = log.iterations_df
    assert it.groupby("worker").size().to_dict() == {0: 12, 1: 12, 2: 12}
    assert it["clock_gap"].max() <= 1               # its own option `bound` (default 1) held
    told = log.events_df.query("kind == 'every_other'")
    assert sorted(told["rank"]) == [1, 2, 3] and set(told["period"]) == {3}
    assert (told["polls"] % 3 == 0).all()           # passed on every third poll
    # a bad value of its own option is refused on every rank, with one line
    bad = train(4, tmp_path / "bad", "--plugin", str(plugin), "--paradigm", "every-other",
                "--period", "0", check=False, timeout=120)
    assert bad.returncode == 2
    assert bad.output.count("mpips: error: invalid period=0: must be an integer >= 1, at most 1000\n") == 1
    assert not np.any([os.path.exists(tmp_path / "bad")])


def test_a_plugins_options_are_keywords_of_mpips_train(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent(PLUGIN))
    script = tmp_path / "user.py"
    script.write_text("import sys\nimport mpips\nimport mine  # registers every-other\n\n"
                      "log = mpips.train(paradigm='every-other', period=4, bound=2, iterations=6, "
                      "budget='per-worker', run_dir=sys.argv[1], stall_timeout=60)\n"
                      "print('RESULT', log.config['period'], log.config['bound'], log.status, flush=True)\n")
    p = mpiexec(4, [str(script), str(tmp_path / "run")], timeout=180, env=ENV)
    out = p.stdout.replace("\x00", "")
    assert p.returncode == 0 and out.count("RESULT 4 2 finished") == 4, out[-4000:]
