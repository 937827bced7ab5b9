"""`mpips plan`: every candidate (a paradigm with its settings) simulated on
the user's job and a cluster profile, over seeds, ranked, and the best one's
command.

    mpips plan --profile cluster.yaml --target 0.9 --epochs 20 --dataset mnist1d --model cnn1d
    mpirun -n 5 python -m mpips plan --target 0.9 --epochs 20   # probe the cluster first

- probe_run.py: under a launcher, the probe on every rank (../probe.py), then
  rank 0 plans while the others wait, and the launch ends together;
- search.py: each (candidate, seed) is `mpips simulate` on the profile's
  settings (../profile.py) with the user's and the candidate's on top, in
  --jobs processes; with --target a run still short of it at STOP_AFTER
  times the best time to it known when it started is stopped there;
- ../ranking.py: the ranking of the candidates that ran (by the mean time to
  the target plus its standard error over seeds, or the accuracy at
  --time-limit) and the verdict with its reasons, as `mpips compare`'s;
- report.py: OUT/plan.png, OUT/plan.md and OUT/plan.json;
- command.py: the options, and the recommended candidate's `mpirun` command
  and `sbatch` environment (jobs/common.sh), checked as `mpips train` checks
  them before they are printed.
"""
from ..ranking import STOP_AFTER, TARGET_EVALUATIONS, Run, rank, render
from .command import add_arguments, cmd_plan, commands
from .search import CLUSTER, Candidate, Search, default_candidates

__all__ = ["CLUSTER", "STOP_AFTER", "TARGET_EVALUATIONS", "Candidate", "Run", "Search", "add_arguments",
           "cmd_plan", "commands", "default_candidates", "rank", "render"]
