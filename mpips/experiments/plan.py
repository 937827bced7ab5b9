"""`mpips plan`'s search: every candidate (a paradigm with its settings)
simulated on the user's job and a cluster profile, over seeds, ranked.

    mpips plan --profile cluster.yaml --target 0.9 --epochs 20 --dataset mnist1d --model cnn1d

Each (candidate, seed) is `mpips simulate` on the profile's settings
(mpips/experiments/profile.py) with the user's train settings and the
candidate's on top, run in one of --jobs processes that load torch and the
dataset once for all their runs. With --target, candidates rank by the mean
predicted time to it (a seed that never reaches it: not reached), then by
final accuracy; with --time-limit, by the mean accuracy at that time. With
--target a run still short of it at STOP_AFTER times the best time to it
known when the run started is stopped there: it cannot rank first. Then the
table (OUT/plan.md), OUT/plan.json, OUT/plan.png, and the recommended
candidate's `mpirun` command and `sbatch` environment (jobs/common.sh).
"""
from __future__ import annotations

import concurrent.futures as futures
import contextlib
import dataclasses
import functools
import json
import multiprocessing
import os
import shlex
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import Config, ConfigError, load
from ..io.outdir import folder_problem
from ..validate import number_in, one_line
from .compare import flags as as_flags
from .setups import OptionError, Setup, file_name

STOP_AFTER = 3.0   # a run this many times slower to the target than the best known is hopeless
# The time to the target: the first evaluation at which the mean of it and the
# two before reached it. The first single evaluation at the target is a chance
# of a point on an asynchronous run's oscillating accuracy (io/log.time_to_target).
TARGET_EVALUATIONS = 3


class Candidate(Setup):
    """A paradigm with settings, written PARADIGM[+COMPRESSOR][:SETTING=VALUE...]
    (ssp:staleness=1): setups.py's entries, as `mpips compare --paradigms`'."""
    OPTION = "--candidates"


def default_candidates(workers: int) -> list[str]:
    """Every paradigm at its defaults, and its main setting over a small grid;
    Local SGD also as plain model averaging and asynchronous with DyLU and
    delayed Nesterov (its outer momentum once per W pushes), as measured in
    benchmarks/results/localsgd-variants-8.md."""
    grid = ["bsp", "asp", "ssp:staleness=1", "ssp", "ssp:staleness=8", "dssp",
            "dssp:staleness_low=1:staleness_high=7", "gssp", "gssp:compressor=gdtopk",
            "syncswitch:switch_at=0.05", "syncswitch", "syncswitch:switch_at=0.25", "lbbsp", "vsgd",
            "backup", "localsgd", "localsgd:outer_lr=1:outer_momentum=0",
            f"localsgd:local_mode=async:dylu=true:delayed_nesterov={workers}"]
    if workers >= 8:
        grid.insert(grid.index("gssp:compressor=gdtopk"), "gssp:groups=4")
    return grid


@dataclass
class Run:
    """One simulated (candidate, seed): what the ranking and the figure need."""
    candidate: str
    seed: int
    run_dir: str
    time_to_target: float | None
    final_accuracy: float
    seconds: float                  # virtual seconds of the whole run (to its budget, or stopped)
    bytes_sent: int
    stopped_at: float = 0.0         # the time limit that cut it as hopeless (0: ran its budget)
    curve: list = field(default_factory=list)   # (virtual seconds, accuracy) of its evaluations
    job_seconds: float = 0.0        # wall seconds the simulation took
    failed: str = ""                # why the simulation failed (diverged, a paradigm's error): ranked last


def _simulate(config: Config, target: float | None, evaluations: int) -> dict:
    """In a pool process: simulate one run (dataset loaded once per process)."""
    from ..io.log import RunLog
    from ..runtime.job.simulate import simulate

    began = time.perf_counter()
    data = _dataset(config.dataset, config.data_dir, config.test_fraction, config.synthetic_samples,
                    config.mnist1d_samples)
    os.makedirs(os.path.dirname(config.run_dir), exist_ok=True)
    with open(config.run_dir + ".out", "w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        try:
            simulate(config, dataset=data)   # its progress lines: beside the run, not among the plan's
        except Exception as e:   # noqa: BLE001 - a candidate that cannot train is an answer too
            # (as a string: mpips' own exceptions do not all pickle back from a pool process)
            print(traceback.format_exc(), flush=True)
            return {"failed": one_line(e)}
    log = RunLog(config.run_dir)
    s, ev = log.summary(), log.evaluations
    return {"time_to_target": log.time_to_accuracy(target, evaluations) if target else None,
            "final_accuracy": float(s["final_accuracy"] or 0.0), "seconds": float(s["wall_seconds"]),
            "bytes_sent": int(s["bytes_sent"]), "samples": int(s["samples"]),
            "total_samples": int(log.layout["total_samples"]),
            "curve": [(float(t), float(a)) for t, a in zip(ev["time"], ev["accuracy"])],
            "job_seconds": time.perf_counter() - began}


@functools.lru_cache(maxsize=4)
def _dataset(name, data_dir, test_fraction, synthetic_samples, mnist1d_samples):
    from ..training.data import load_dataset

    return load_dataset(Config(dataset=name, data_dir=data_dir, test_fraction=test_fraction,
                               synthetic_samples=synthetic_samples, mnist1d_samples=mnist1d_samples))


def _pool_start() -> None:
    # The simulator needs no MPI, and a pool process of a probe's rank 0 has
    # the launcher's environment: MPI_Init there would join (and hang) the job.
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False
    import torch

    torch.set_num_threads(1)


@dataclass
class Search:
    """The runs of a plan, checked when made (ConfigError before any run)."""
    profile_settings: dict          # the cluster's (ClusterProfile.settings)
    settings: dict                  # the user's train settings, by Config field
    candidates: list[Candidate]
    seeds: list[int]
    out: str
    target: float | None = None
    evaluations: int = TARGET_EVALUATIONS   # the time to the target: when a mean of this many reached it
    config: str | None = None       # the user's YAML file of settings
    jobs: int = 2
    runs: list[tuple[Candidate, int, Config]] = field(init=False)   # seeds outermost

    def __post_init__(self):
        from ..runtime.job.simulate import simulated_config

        self.runs = []
        for seed in self.seeds:
            for c in self.candidates:
                run_dir = os.path.join(self.out, "runs", f"{file_name(c.name)}-s{seed}")
                with c.blame():
                    config = load(self.config, {**self.profile_settings, **self.settings, **c.settings,
                                                "seed": seed, "run_dir": run_dir, "overwrite": True})
                    self.runs.append((c, seed, simulated_config(config)))
        if not self.target and not self.runs[0][2].time_limit:
            raise ConfigError("target", self.target, "give --target ACC (rank by the time to it) or "
                                                     "--time-limit SECONDS (rank by the accuracy then)")

    def run(self, report=print) -> list[Run]:
        """Simulate every run, --jobs at a time; `report(line)` after each."""
        done: list[Run] = []
        pending = list(self.runs)
        context = multiprocessing.get_context("spawn")   # no fork of a process with torch threads
        with futures.ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_pool_start) as pool:
            running: dict = {}
            while pending or running:
                while pending and len(running) < self.jobs:
                    c, seed, config = pending.pop(0)
                    limit = self._limit(done, config.time_limit)
                    cut = limit if limit != config.time_limit else 0.0
                    config = dataclasses.replace(config, time_limit=limit)
                    running[pool.submit(_simulate, config, self.target, self.evaluations)] = (c, seed, config, cut)
                finished, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                for f in finished:
                    c, seed, config, cut = running.pop(f)
                    r = f.result()
                    if "failed" in r:
                        run = Run(c.name, seed, config.run_dir, None, 0.0, 0.0, 0, failed=r["failed"])
                    else:
                        cut = cut if r["samples"] < r["total_samples"] else 0.0   # cut short by it, or not
                        run = Run(c.name, seed, config.run_dir, r["time_to_target"], r["final_accuracy"],
                                  r["seconds"], r["bytes_sent"], cut, r["curve"], r["job_seconds"])
                    done.append(run)
                    report(_line(run, len(done), len(self.runs), self.target))
        order = {(c.name, seed): k for k, (c, seed, _) in enumerate(self.runs)}
        return sorted(done, key=lambda r: order[(r.candidate, r.seed)])

    def _limit(self, done: list[Run], own: float) -> float:
        """The time limit of the next run: its own, or STOP_AFTER x the best
        time to the target so far if shorter."""
        times = [r.time_to_target for r in done if r.time_to_target is not None]
        if not self.target or not times:
            return own
        hopeless = STOP_AFTER * min(times)
        return min(own, hopeless) if own else hopeless


def _line(run: Run, k: int, n: int, target: float | None) -> str:
    if run.failed:
        return f"mpips plan: [{k}/{n}] {run.candidate} seed {run.seed}: failed: {run.failed} (see {run.run_dir}.out)"
    reached = ""
    if target:
        reached = (f", {100 * target:g}% at {run.time_to_target:.2f} s" if run.time_to_target is not None
                   else f", {100 * target:g}% not reached")
    cut = f" (stopped at {run.stopped_at:.2f} s, {STOP_AFTER:g} x the best time to the target)" if run.stopped_at else ""
    return (f"mpips plan: [{k}/{n}] {run.candidate} seed {run.seed}: accuracy {100 * run.final_accuracy:.1f}% "
            f"at {run.seconds:.2f} s{reached}{cut} ({run.job_seconds:.1f} s to simulate)")


def rank(runs: list[Run], target: float | None):
    """One row per candidate, best first (a pandas DataFrame). By the time to
    the target, its mean over seeds plus the mean's standard error: of two
    candidates predicted as fast, the one whose seeds agree is the safer
    choice. (Seen in a validation: ASP predicted 3.75 s, its seeds 2.99-4.67,
    asynchronous Local SGD 3.77 s, 3.45-4.17; ASP measured 18% slower.)"""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame([asdict(r) for r in runs])
    rows = []
    for name, g in df.groupby("candidate", sort=False):
        reached = g["time_to_target"].notna()
        times = g["time_to_target"].astype(float)
        rows.append({"candidate": name, "seeds": len(g), "_hits": int(reached.sum()),
                     "reached": f"{int(reached.sum())}/{len(g)}" if target else "",
                     "time_to_target": float(times.mean()) if reached.all() else np.nan,
                     "time_upper": float(times.mean() + (times.sem() if len(g) > 1 else 0.0))
                     if reached.all() else np.nan,
                     "time_spread": f"{times.min():.2f}-{times.max():.2f}" if reached.all() else "",
                     "final_accuracy": float(g["final_accuracy"].mean()),
                     "accuracy_spread": f"{100 * g['final_accuracy'].min():.1f}-{100 * g['final_accuracy'].max():.1f}",
                     "seconds": float(g["seconds"].mean()),
                     "bytes_sent_mb": float(g["bytes_sent"].mean() / 1e6),
                     "stopped": int((g["stopped_at"] > 0).sum())})
    table = pd.DataFrame(rows)
    if target:
        table = table.sort_values(["_hits", "time_upper", "final_accuracy"],
                                  ascending=[False, True, False], kind="stable")
    else:
        table = table.sort_values("final_accuracy", ascending=False, kind="stable")
    table = table.drop(columns="_hits")
    table.insert(0, "rank", range(1, len(table) + 1))
    return table.reset_index(drop=True)


def render(table, target: float | None, time_limit: float, evaluations: int) -> str:
    """The ranking as text (Markdown), times in (predicted) seconds."""
    t = table.copy()
    heads = {"rank": "rank", "candidate": "candidate", "seeds": "seeds", "final_accuracy": "final accuracy %",
             "accuracy_spread": "accuracy range %", "seconds": "run s", "bytes_sent_mb": "bytes sent MB",
             "stopped": "stopped early"}
    t["final_accuracy"] = (100 * t["final_accuracy"]).map("{:.1f}".format)
    t["seconds"] = t["seconds"].map("{:.2f}".format)
    t["bytes_sent_mb"] = t["bytes_sent_mb"].map("{:.1f}".format)
    if target:
        for column in ("time_to_target", "time_upper"):
            t[column] = t[column].map(lambda v: "not reached" if v != v else f"{v:.2f}")
        mean = f" (mean of {evaluations} evaluations)" if evaluations > 1 else ""
        heads = {**heads, "reached": "reached", "time_to_target": f"time to {100 * target:g}%{mean} s",
                 "time_spread": "time range s", "time_upper": "mean + its standard error s (ranked by)"}
        order = ["rank", "candidate", "time_to_target", "time_spread", "time_upper", "reached", "final_accuracy",
                 "accuracy_spread", "seconds", "bytes_sent_mb", "stopped"]
    else:
        heads["final_accuracy"] = f"accuracy at {time_limit:g} s %"
        order = ["rank", "candidate", "final_accuracy", "accuracy_spread", "seconds", "bytes_sent_mb"]
    t = t[order].rename(columns=heads).astype(str)
    # (pandas' to_markdown needs tabulate, which mpips does not depend on)
    lines = ["| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in t.itertuples(index=False)]) + "\n"


def commands(candidate: Candidate, settings: dict, config_file: str | None, workers: int,
             launcher: str = "mpirun") -> dict[str, Any]:
    """How to train `candidate` for real: the `mpirun` command, and the
    environment of its `sbatch jobs/PARADIGM.slurm` (jobs/common.sh)."""
    from ..runtime.layout import ranks_for

    chosen = {**settings, **candidate.settings, "workers": workers}
    ranks = ranks_for(load(config_file, chosen))
    own = ["--config", config_file] if config_file else []
    mpirun = shlex.join([*shlex.split(launcher), "-n", str(ranks), "python", "-m", "mpips", "train",
                         *own, *as_flags(chosen)])
    env: dict[str, Any] = {f"MPIPS_{k.upper()}": (int(v) if isinstance(v, bool) else v)
           for k, v in chosen.items() if k != "paradigm"}
    if config_file:
        env["MPIPS_CONFIG"] = config_file
    sbatch = " ".join([*(f"{k}={shlex.quote(str(v))}" for k, v in env.items()),
                       "sbatch", "-n", str(ranks), f"jobs/{candidate.settings['paradigm']}.slurm"])
    return {"mpirun": mpirun, "sbatch": sbatch, "ranks": ranks}


def figure(runs: list[Run], table, path: str, target: float | None) -> str:
    """Accuracy against predicted time per candidate (every seed), and the
    ranking's predicted time to the target (or accuracy) with its range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table["candidate"])
    colours = dict(zip(names, plt.colormaps["tab10" if len(names) <= 10 else "tab20"].colors))  # type: ignore[attr-defined]  # a ListedColormap
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), dpi=110)
    for r in runs:
        if r.curve:
            t, a = zip(*r.curve)
            left.plot(t, [100 * x for x in a], color=colours[r.candidate], alpha=0.8, lw=1.2,
                      label=r.candidate if r.seed == runs[0].seed else None)
    if target:
        left.axhline(100 * target, color="grey", ls="--", lw=0.8)
    left.set(xlabel="predicted seconds (simulated)", ylabel="test accuracy %", title="every run")
    left.legend(fontsize=7, ncol=2)
    by = {name: [r for r in runs if r.candidate == name] for name in names}
    if target:
        values = [[r.time_to_target for r in by[n] if r.time_to_target is not None] for n in names]
        right.set(xlabel=f"predicted seconds to {100 * target:g}% (mean, range over seeds)")
    else:
        values = [[100 * r.final_accuracy for r in by[n]] for n in names]
        right.set(xlabel="predicted final accuracy % (mean, range over seeds)")
    y = range(len(names))[::-1]
    for k, (name, v) in enumerate(zip(names, values)):
        if v:
            mean = sum(v) / len(v)
            right.barh(y[k], mean, color=colours[name], xerr=[[mean - min(v)], [max(v) - mean]], capsize=3)
    right.set_yticks(list(y), [f"{k + 1}. {n}" for k, n in enumerate(names)], fontsize=8)
    right.set_title("ranking (unreached: no bar)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write(out: str, record: dict, text: str) -> None:
    with open(os.path.join(out, "plan.json"), "w") as fh:
        json.dump(record, fh, indent=1, default=float)
    with open(os.path.join(out, "plan.md"), "w") as fh:
        fh.write(text)


# --- the command ------------------------------------------------------------------

# What the profile says about the cluster: in the search it wins over the same
# settings given (which made the emulated cluster that was probed, and go into
# the printed command that trains on it).
CLUSTER = ("workers", "device_time", "slowdown", "straggler", "random_stragglers",
           "sim_latency", "sim_bandwidth", "sim_jitter", "sim_apply", "sim_apply_per_push")


def add_arguments(p) -> None:
    """`mpips plan`'s own options (cli.py adds every train setting but PER_RUN)."""
    g = p.add_argument_group("the cluster")
    g.add_argument("--profile", metavar="CLUSTER.yaml", default=None,
                   help="a cluster profile (docs/plan.md) to plan on; without it the plan first probes "
                        "the cluster it runs on: start it with your launcher, `mpirun -n SERVERS+WORKERS "
                        "python -m mpips plan ...`, and it writes OUT/cluster.yaml")
    g.add_argument("--probe-seconds", type=number_in(1, 3600), default=60.0,
                   help="seconds of training the probe spends, over three short runs [default: 60]")
    g.add_argument("--probe-only", action="store_true", default=False,
                   help="write the profile and stop (plan later with --profile)")
    g = p.add_argument_group("the search (the other options: train settings of every run)")
    g.add_argument("--target", type=number_in(0, 1, low_open=True), default=None,
                   help="rank by the predicted time to this test accuracy (or give --time-limit: rank "
                        "by the accuracy at that time)")
    g.add_argument("--target-evaluations", type=int, default=TARGET_EVALUATIONS, metavar="K",
                   help="the time to the target: the first evaluation at which the mean accuracy of it and "
                        "the K-1 before reached it (1: the first evaluation at the target, which an "
                        "oscillating accuracy touches by chance) [default: %(default)s]")
    g.add_argument("--candidates", default=None, metavar="PARADIGM[:SETTING=VALUE...],...",
                   help="what to simulate [default: every paradigm at its defaults and a small grid of "
                        "its main setting: " + ",".join(default_candidates(8)) + " (gssp:groups=4 "
                        "with 8 workers or more)]")
    g.add_argument("--seeds", default="0,1", help="comma-separated seeds, one simulation each [default: 0,1]")
    g.add_argument("--jobs", type=int, default=2, help="simulations at once, each a process [default: 2]")
    g.add_argument("--out", default=None, help="where cluster.yaml, plan.md, plan.json, plan.png and the "
                                               "runs go [default: plans/<time>]")
    g.add_argument("--launcher", default="mpirun",
                   help="the launcher of the printed command, e.g. 'srun --mpi=pmix' [default: mpirun]")


def cmd_plan(args, comm=None) -> int:
    """`comm`: the ranks of a probe (default COMM_WORLD; cli.main's, as for train)."""
    from ..config import field_types
    from . import profile as cluster
    from .compare import parse_seeds

    settings = {k: v for k, v in vars(args).items() if k in field_types()}
    config_file = getattr(args, "config", None)
    out = args.out or os.path.join("plans", time.strftime("%Y%m%d-%H%M%S"))
    probed = None   # rank 0 of a probe: its other ranks wait for the plan's end
    try:
        base = load(config_file, settings)   # bad settings: one line before any work
        candidates = None if args.candidates is None else [Candidate.parse(c) for c in args.candidates.split(",")]
        seeds = parse_seeds(args.seeds)
        if args.jobs < 1:
            raise ConfigError("jobs", args.jobs, "an integer >= 1")
        if args.target_evaluations < 1:
            raise ConfigError("target_evaluations", args.target_evaluations, "an integer >= 1")
        path = args.profile
        if path is None:
            comm = _communicator(comm)
            out = comm.bcast(out)   # rank 0's: a default named by the time differs per rank
            why = comm.bcast(folder_problem(out) if comm.Get_rank() == 0 else None)
            if why:   # said by rank 0 alone, before the probe
                raise ProbeFailed(f"invalid --out {out!r}: cannot write there ({why})", comm.Get_rank())
            path = _probe(base, comm, args, out)
            if path is None:
                return 0
            probed = comm
            if args.probe_only:
                return 0
        found = cluster.load(path)
        candidates = candidates or [Candidate.parse(c) for c in default_candidates(len(found.workers))]
        why = folder_problem(out)
        if why:
            raise OptionError("--out", out, f"cannot write there ({why})")
        # the profile is the cluster: settings given that make one (an emulated
        # cluster's, probed) do not override it in the search
        job = {k: v for k, v in settings.items() if k not in CLUSTER}
        search = Search({**found.settings(base.batch_size), "straggler": ""}, job, candidates, seeds, out,
                        target=args.target, evaluations=args.target_evaluations, config=config_file,
                        jobs=args.jobs)
        return _plan(search, candidates, found, path, settings, config_file, args, base.time_limit)
    except (ConfigError, OptionError) as e:
        return _fail(str(e))
    except ProbeFailed as e:
        return _fail(str(e)) if e.rank == 0 else 2
    finally:
        if probed is not None:
            _release(probed)


def _plan(search: Search, candidates, found, path, settings, config_file, args, time_limit) -> int:
    began = time.perf_counter()
    print(f"mpips plan: {len(candidates)} candidates x {len(search.seeds)} seeds on {path} "
          f"({len(found.workers)} workers), {search.jobs} at once", flush=True)
    runs = search.run(lambda line: print(line, flush=True))
    table = rank(runs, search.target)
    best = next(c for c in candidates if c.name == table["candidate"][0])
    how = commands(best, {k: v for k, v in settings.items() if k != "workers"}, config_file,
                   len(found.workers), args.launcher)
    text = render(table, search.target, time_limit, search.evaluations)
    image = figure(runs, table, os.path.join(search.out, "plan.png"), search.target)
    seconds = time.perf_counter() - began
    advice = (f"\nrecommended: {best.name}\n  {how['mpirun']}\n  {how['sbatch']}\n"
              f"(predicted by `mpips simulate` on {path}; {len(runs)} simulations in {seconds:.0f} s)\n")
    write(search.out, {"profile": path, "cluster": found.to_dict(), "target": search.target,
                       "target_evaluations": search.evaluations,
                       "time_limit": time_limit, "seeds": search.seeds, "settings": settings,
                       "candidates": {c.name: c.settings for c in candidates},
                       "ranking": table.to_dict("records"), "runs": [asdict(r) for r in runs],
                       "recommended": {"candidate": best.name, **how}, "seconds": seconds,
                       "stop_after": STOP_AFTER}, text + advice)
    print("\n" + text + advice + f"plan.md, plan.json, {os.path.basename(image)} in {search.out}/", flush=True)
    return 0


def _fail(message: str, code: int = 2) -> int:
    import sys

    print(f"mpips: error: {message}", file=sys.stderr, flush=True)
    return code


class ProbeFailed(Exception):
    def __init__(self, message: str, rank: int):
        super().__init__(message)
        self.rank = rank


def _communicator(comm):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() < 2:
        raise ConfigError("profile", None, "give --profile FILE, or probe the cluster: start the plan with "
                                           "your launcher, mpirun -n SERVERS+WORKERS python -m mpips plan ...")
    return comm


def _probe(config: Config, comm, args, out: str) -> str | None:
    """Probe the cluster on every rank (mpips/experiments/probe.py); rank 0 writes
    OUT/cluster.yaml and gets its path; the other ranks wait, asleep, for rank 0's
    plan to end, and get None."""
    import sys

    from ..runtime.job.train import SetupError, TrainingFailed
    from . import profile as cluster
    from .probe import run_probe

    rank = comm.Get_rank()
    if rank == 0:
        os.makedirs(out, exist_ok=True)
    try:
        found = run_probe(config, comm, seconds=args.probe_seconds, out=os.path.join(out, "probe"))
    except (ConfigError, SetupError, TrainingFailed) as e:   # the same on every rank
        raise ProbeFailed(f"the probe: {e}", rank) from None
    except BaseException:   # noqa: BLE001 - one rank's failure must end every rank of the launch
        traceback.print_exc()
        comm.Abort(1)
    if rank != 0:
        _wait_quietly(comm)
        return None
    path = os.path.join(out, "cluster.yaml")
    assert found is not None   # (rank 0's fit)
    cluster.save(found, path, comment=f"probed by: {' '.join(sys.argv)}\n{comm.Get_size()} ranks, "
                                      f"{args.probe_seconds:g} s, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"mpips plan: the cluster's profile: {path}", flush=True)
    return path


def _wait_quietly(comm) -> None:
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.05)


def _release(comm) -> None:
    """Rank 0: the other ranks, waiting in _wait_quietly, may end."""
    comm.Ibarrier().Wait()
