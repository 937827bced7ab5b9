"""The search of `mpips plan`: every candidate (a paradigm with its settings)
simulated on the cluster profile with the user's settings, over seeds, in a
pool of processes that load torch and the dataset once for all their runs.
With a target, a run still short of it at STOP_AFTER times the best time to
it known when the run started is stopped there: it cannot rank first.

A stop signal (SIGTERM, SIGINT, SIGUSR1: preemption.remembered) ends the
pool's processes, not only the plan (270 MB each, they were left running
for good), and the search raises Stopped."""
from __future__ import annotations

import concurrent.futures as futures
import contextlib
import dataclasses
import functools
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import asdict, dataclass, field

from ...config import Config, ConfigError, load
from ...runtime.recovery import preemption
from ...validate import one_line
from ..ranking import STOP_AFTER, TARGET_EVALUATIONS, Run
from ..setups import OptionError, Setup, file_name

POLL = 0.5   # s between looks at the pool and at the signal flag


class Candidate(Setup):
    """A paradigm with settings, written PARADIGM[+COMPRESSOR][:SETTING=VALUE...]
    (ssp:staleness=1): setups.py's entries, as `mpips compare --paradigms`';
    none of the settings of the cluster, which the profile is."""
    OPTION = "--candidates"

    @classmethod
    def parse(cls, text: str) -> "Candidate":
        candidate = super().parse(text)
        own = [k for k in candidate.settings if k in CLUSTER]
        if own:   # (ssp:workers=2 ran 2 workers on a 4-worker profile, and was recommended with --workers 4)
            raise OptionError(cls.OPTION, candidate.name, f"{own[0]}: the cluster profile's, not a candidate's")
        return candidate


# What the profile says about the cluster: in the search it wins over the same
# settings given (which made the emulated cluster that was probed, and go into
# the printed command that trains on it).
CLUSTER = ("workers", "device_time", "slowdown", "straggler", "random_stragglers",
           "sim_latency", "sim_bandwidth", "sim_jitter", "sim_nodes", "sim_apply", "sim_apply_per_push")


def default_candidates(workers: int) -> list[str]:
    """Every paradigm at its defaults, and its main setting over a small grid;
    Local SGD also as plain model averaging and asynchronous with DyLU and
    delayed Nesterov (its outer momentum once per W pushes), as measured in
    benchmarks/results/localsgd-variants-8.md. From 32 workers also ASP and
    GSSP under the bounded delay compensation (`--async-rule dc-adaptive
    --dc-clip 1`), the per-push rule measured best there
    (benchmarks/results/async-scale.md) but not the default: at 8 workers it
    cost ASP 1.9 points."""
    grid = ["bsp", "asp", "ssp:staleness=1", "ssp", "ssp:staleness=8", "dssp",
            "dssp:staleness_low=1:staleness_high=7", "gssp", "gssp:compressor=gdtopk",
            "syncswitch:switch_at=0.05", "syncswitch", "syncswitch:switch_at=0.25", "lbbsp", "vsgd",
            "backup", "localsgd", "localsgd:outer_lr=1:outer_momentum=0",
            f"localsgd:local_mode=async:dylu=true:delayed_nesterov={workers}:outer_momentum=0.9"]
    if workers >= 8:
        grid.insert(grid.index("gssp:compressor=gdtopk"), "gssp:groups=4")
    if workers >= 32:
        for paradigm in ("asp", "gssp"):
            grid.insert(grid.index(paradigm) + 1, f"{paradigm}:async_rule=dc-adaptive:dc_clip=1")
    return grid


class Stopped(Exception):
    """A stop signal ended the search (its pool's processes ended too)."""

    def __init__(self, signum: int, done: int, total: int):
        super().__init__(f"the plan stopped on {signal.Signals(signum).name}: {done} of {total} simulations done")
        self.signum = signum


def _simulate(candidate: str, config: Config, target: float | None, evaluations: int, cut: float) -> dict:
    """In a pool process: simulate one run (dataset loaded once per process);
    the Run as a dict (mpips' own exceptions do not all pickle back)."""
    from ...runtime.job.simulate import simulate

    began = time.perf_counter()
    failed = ""
    os.makedirs(os.path.dirname(config.run_dir), exist_ok=True)
    with open(config.run_dir + ".out", "w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        try:
            data = _dataset(config.dataset, config.data_dir, config.test_fraction, config.synthetic_samples,
                            config.mnist1d_samples)
            simulate(config, dataset=data)   # its progress lines: beside the run, not among the plan's
        except Exception as e:   # noqa: BLE001 - a candidate that cannot train is an answer too
            print(traceback.format_exc(), flush=True)
            failed = one_line(e)
    if failed:
        return asdict(Run(candidate, config.seed, config.run_dir, None, 0.0, 0.0, 0, failed=failed))
    from ...io.log import RunLog

    log = RunLog(config.run_dir)
    cut = cut if log.summary()["samples"] < int(log.layout["total_samples"]) else 0.0   # cut short by it, or not
    return asdict(Run.from_log(candidate, config.run_dir, target, evaluations=evaluations, stopped_at=cut,
                               job_seconds=time.perf_counter() - began))


@functools.lru_cache(maxsize=4)
def _dataset(name, data_dir, test_fraction, synthetic_samples, mnist1d_samples):
    from ...training.data import load_dataset

    return load_dataset(Config(dataset=name, data_dir=data_dir, test_fraction=test_fraction,
                               synthetic_samples=synthetic_samples, mnist1d_samples=mnist1d_samples))


def _pool_start() -> None:
    # The simulator needs no MPI, and a pool process of a probe's rank 0 has
    # the launcher's environment: MPI_Init there would join (and hang) the job.
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False
    # A terminal's Ctrl-C reaches the whole process group: the plan ends its pool itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
        from ...runtime.job.simulate import simulated_config

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
        """Simulate every run, --jobs at a time; `report(line)` after each.
        Stopped on a stop signal, the pool's processes ended."""
        done: list[Run] = []
        pending = list(self.runs)
        context = multiprocessing.get_context("spawn")   # no fork of a process with torch threads
        others = set(multiprocessing.active_children())
        pool = futures.ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_pool_start)
        try:
            running: dict = {}
            while pending or running:
                while pending and len(running) < self.jobs:
                    c, seed, config = pending.pop(0)
                    limit = self._limit(done, config.time_limit)
                    cut = limit if limit != config.time_limit else 0.0
                    config = dataclasses.replace(config, time_limit=limit)
                    running[pool.submit(_simulate, c.name, config, self.target, self.evaluations, cut)] = c
                finished, _ = futures.wait(running, timeout=POLL, return_when=futures.FIRST_COMPLETED)
                if preemption.received():
                    raise Stopped(preemption.which(), len(done), len(self.runs))
                for f in finished:
                    running.pop(f)
                    done.append(Run(**f.result()))
                    report(_line(done[-1], len(done), len(self.runs), self.target))
        except BaseException:
            _end(pool, set(multiprocessing.active_children()) - others)
            raise
        pool.shutdown(wait=True)
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


def _end(pool: futures.ProcessPoolExecutor, workers) -> None:
    """The pool shut down without waiting for its runs (a stop, an error):
    its processes `workers` ended."""
    pool.shutdown(wait=False, cancel_futures=True)
    for p in workers:
        p.terminate()
    for p in workers:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()
    pool.shutdown(wait=True)


def _line(run: Run, k: int, n: int, target: float | None) -> str:
    if run.failed:
        return f"mpips plan: [{k}/{n}] {run.candidate} seed {run.seed}: failed: {run.failed} (see {run.run_dir}.out)"
    reached = ""
    if target:
        reached = (f", {100 * target:g}% at {run.time_to_target:.2f} s" if run.time_to_target is not None
                   else f", {100 * target:g}% not reached")
    if run.stopped_at:
        end = (f"accuracy {100 * run.final_accuracy:.1f}% when stopped at {run.seconds:.2f} s "
               f"({STOP_AFTER:g} x the best time to the target)")
    else:
        end = f"accuracy {100 * run.final_accuracy:.1f}% at {run.seconds:.2f} s"
    return f"mpips plan: [{k}/{n}] {run.candidate} seed {run.seed}: {end}{reached} ({run.job_seconds:.1f} s to simulate)"
