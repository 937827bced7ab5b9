"""`mpips plan`, the command: its options, the probe or the profile, the
search, the ranking of what ran, and the recommendation with its reasons
and the command that trains it, checked as `mpips train` checks its own."""
from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import asdict
from typing import Any

from ...config import Config, ConfigError, known, load
from ...io.log import DiskFull
from ...io.outdir import folder_problem
from ...io.rundir import RunDirLock
from ...runtime.recovery import preemption
from ...validate import number_in
from ..compare import flags as as_flags
from ..compare import parse_seeds
from ..ranking import STOP_AFTER, TARGET_EVALUATIONS, eval_every, failures, rank, render, verdict
from ..setups import OptionError
from . import probe_run
from .report import figure, write
from .search import CLUSTER, Candidate, Search, Stopped, default_candidates


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
                        "with 8 workers or more; asp and gssp with async_rule=dc-adaptive:dc_clip=1 "
                        "with 32 or more)]")
    g.add_argument("--seeds", default="0,1", help="comma-separated seeds, one simulation each [default: 0,1]")
    g.add_argument("--jobs", type=int, default=2, help="simulations at once, each a process [default: 2]")
    g.add_argument("--out", default=None, help="where cluster.yaml, plan.md, plan.json, plan.png and the "
                                               "runs go [default: plans/<time>]")
    g.add_argument("--launcher", default="mpirun",
                   help="the launcher of the printed command, e.g. 'srun --mpi=pmix' [default: mpirun]")


def cmd_plan(args, comm=None) -> int:
    """`comm`: the ranks of a probe (default COMM_WORLD; cli.main's, as for train).
    A stop signal, at any point, ends the plan with 128 + its number (the
    pool's processes and the probe's runs with it)."""
    with preemption.remembered():
        return _cmd_plan(args, comm)


def _cmd_plan(args, comm) -> int:
    settings = {k: v for k, v in vars(args).items() if known(k)}
    config_file = getattr(args, "config", None)
    out = args.out or os.path.join("plans", time.strftime("%Y%m%d-%H%M%S"))
    probed, status, lock = None, 2, None   # probed: rank 0 of a probe, whose other ranks wait for the plan's end
    patience = Config().stall_timeout
    try:
        base = load(config_file, settings)   # bad settings: one line before any work
        patience = base.stall_timeout
        if "eval_every" not in settings:   # the time to the target: not one evaluation interval
            settings["eval_every"] = eval_every(base.epochs)
        candidates = None if args.candidates is None else [Candidate.parse(c) for c in args.candidates.split(",")]
        seeds = parse_seeds(args.seeds)
        if args.jobs < 1:
            raise ConfigError("jobs", args.jobs, "an integer >= 1")
        if args.target_evaluations < 1:
            raise ConfigError("target_evaluations", args.target_evaluations, "an integer >= 1")
        path = args.profile
        if path is None:
            comm = probe_run.communicator(comm)
            out = comm.bcast(out)   # rank 0's: a default named by the time differs per rank
            why = None
            if comm.Get_rank() == 0:
                try:
                    lock = _own(out)
                except OptionError as e:
                    why = str(e)
            why = comm.bcast(why)
            if why:   # said by rank 0 alone, before the probe
                raise probe_run.ProbeFailed(why, comm.Get_rank())
            path = probe_run.probe(base, comm, args, out)
            if path is None:
                return probe_run.wait_for_plan(comm)
            probed = comm
            if args.probe_only:
                status = 0
                return status
        else:
            lock = _own(out)
        status = _plan(args, settings, config_file, base, candidates, seeds, path, out)
        return status
    except (ConfigError, OptionError) as e:
        return _fail(str(e))
    except probe_run.ProbeFailed as e:
        return _fail(str(e)) if e.rank == 0 else 2
    except (Stopped, probe_run.ProbeStopped) as e:
        status = 128 + e.signum
        if probed is not None or comm is None or comm.Get_rank() == 0:
            _fail(str(e), status)
        return status
    except DiskFull as e:
        status = 1
        return _fail(str(e), status)
    finally:
        if probed is not None:   # the others hear how it ended; they too were given a stop signal
            probe_run.release(probed, status, timeout=patience, hear=not preemption.received())
        if lock is not None:
            lock.release()


def _own(out: str) -> RunDirLock:
    """--out made and this plan's alone (two plans on one --out replaced each
    other's files, and the one whose runs failed exited 0): its lock, or an
    OptionError saying why not."""
    why = folder_problem(out)
    if why:
        raise OptionError("--out", out, f"cannot write there ({why})")
    try:
        return RunDirLock(out, option="out")
    except ConfigError as e:
        raise OptionError("--out", out, e.allowed) from None


def _plan(args, settings: dict, config_file, base, candidates, seeds, path: str, out: str) -> int:
    from .. import profile as cluster

    found = cluster.load(path)
    workers = len(found.workers)
    candidates = candidates or [Candidate.parse(c) for c in default_candidates(workers)]
    # the command each candidate would be trained with, checked as `mpips train` checks it,
    # before any simulation (--slowdown 1,2 on a 4-worker profile printed one that exits 2)
    for c in candidates:
        with c.blame():
            commands(c, settings, config_file, workers, args.launcher)
    # the profile is the cluster: settings given that make one (an emulated
    # cluster's, probed) do not override it in the search
    job = {k: v for k, v in settings.items() if k not in CLUSTER}
    search = Search({**found.settings(base.batch_size), "straggler": ""}, job, candidates, seeds, out,
                    target=args.target, evaluations=args.target_evaluations, config=config_file, jobs=args.jobs)
    began = time.perf_counter()
    print(f"mpips plan: {len(candidates)} candidates x {len(seeds)} seeds on {path} ({workers} workers), "
          f"{search.jobs} at once", flush=True)
    runs = search.run(lambda line: print(line, flush=True))
    failed = failures(runs)
    table = rank(runs, search.target)
    seconds = time.perf_counter() - began
    record: dict[str, Any] = {"profile": path, "cluster": found.to_dict(), "target": search.target,
                              "target_evaluations": search.evaluations, "time_limit": base.time_limit,
                              "seeds": seeds, "settings": settings,
                              "candidates": {c.name: c.settings for c in candidates},
                              "ranking": table.to_dict("records"), "failed": failed,
                              "runs": [asdict(r) for r in runs], "seconds": seconds, "stop_after": STOP_AFTER}
    text = render(table, search.target, base.time_limit, search.evaluations) if len(table) else ""
    if table.empty:   # nothing to recommend: say why, and keep what was found
        why = "; ".join(f"{k}: {v}" for k, v in failed.items())
        write(out, {**record, "recommended": None}, f"No candidate ran.\n\n{why}\n")
        return _fail(f"no candidate ran, nothing to recommend ({why}; see {out}/runs/*.out)", 1)
    best = next(c for c in candidates if c.name == table["candidate"][0])
    how = commands(best, settings, config_file, workers, args.launcher)
    image = figure(runs, table, os.path.join(out, "plan.png"), search.target)
    advice = (f"\nrecommended: {best.name}\n" + verdict(table, search.target, failed).partition("\n")[2]
              + f"  {how['mpirun']}\n  {how['sbatch']}\n"
              f"(predicted by `mpips simulate` on {path}; {len(runs)} simulations in {seconds:.0f} s)\n")
    write(out, {**record, "recommended": {"candidate": best.name, **how}}, text + advice)
    print("\n" + text + advice + f"plan.md, plan.json, {os.path.basename(image)} in {out}/", flush=True)
    return 0


def commands(candidate: Candidate, settings: dict, config_file: str | None, workers: int,
             launcher: str = "mpirun") -> dict[str, Any]:
    """How to train `candidate` for real: the `mpirun` command, and the
    environment of its `sbatch jobs/PARADIGM.slurm` (jobs/common.sh); its
    settings checked as `mpips train` checks them on `workers` workers (a
    ConfigError naming the setting)."""
    from ...runtime.layout import ranks_for

    chosen = {**{k: v for k, v in settings.items() if k != "workers"}, **candidate.settings, "workers": workers}
    config = load(config_file, chosen)
    ranks = ranks_for(config)
    config.check_workers(workers)
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


def _fail(message: str, code: int = 2) -> int:
    print(f"mpips: error: {message}", file=sys.stderr, flush=True)
    return code
