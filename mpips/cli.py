"""`mpips train|simulate|compare|info|summarize|plot|syncswitch-search ...` (or
`python -m mpips ...`): the command line.

Options of `train` are generated from the shared settings (`Config`) and
every registered paradigm's own (`Paradigm.Options`, a plugin's too), so the
YAML keys, the flags and the error messages always agree.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from .api import abort_job
from .config import OPTIONS_TEXT, SHARED, Config, ConfigError, known, load, spec_of
from .experiments import compare, plan, setups, syncswitch_search
from .paradigms import option_specs
from .plugins import PluginError, load_plugins, raised_in_plugin
from .runtime.recovery import preemption
from .runtime.transport.mpienv import quiet_ucx
from .settings import Spec
from .validate import StopSignal


def _train_parser(sub, name: str, help: str, exclude=(), **kw) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, argument_default=argparse.SUPPRESS, **kw)
    p.add_argument("--config", help="YAML file of settings (flags override it)")
    p.add_argument("--plugin", action="append", metavar="FILE.py",
                   help="a Python file run first (on every rank), e.g. one that calls "
                        "mpips.register_paradigm; repeatable")
    for spec in SHARED.values():
        if spec.name not in exclude:
            _add_flag(p, spec, spec.help)
    p.add_argument("--paradigm-options", dest=OPTIONS_TEXT, metavar="KEY=VALUE,...",
                   help="the paradigm's own settings as one text (a fallback for the flags below, which "
                        "override it)")
    # each paradigm's own settings, a group each; one flag for a name two declare
    # (ssp's and vsgd's staleness), its help the first's
    added: set[str] = set()
    for paradigm, own in option_specs().items():
        if not own.keys() - added:
            continue
        group = p.add_argument_group(f"{paradigm}'s own settings")
        for spec in own.values():
            if spec.name not in added:
                added.add(spec.name)
                owners = [name for name, specs in option_specs().items() if spec.name in specs]
                _add_flag(group, spec, spec.help + (f" (also {', '.join(owners[1:])})" if owners[1:] else ""))
    return p


def _add_flag(p, spec: Spec, help_: str) -> None:
    if spec.choices is not None:
        help_ += f" ({'|'.join(spec.choices)})"
    help_ += f" [default: {spec.default!r}]"
    if spec.type is bool:
        p.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction, help=help_)
    else:
        # Strings here; the configuration's coercion gives the one-line error naming the setting.
        p.add_argument(spec.flag, dest=spec.name, metavar=spec.name.upper(), help=help_)


class _Parser(argparse.ArgumentParser):
    """Under a launcher every rank parses the same arguments: rank 0 says what
    is wrong, the others exit with the same status without repeating it."""

    def error(self, message):
        if _launched_rank() not in (None, "0"):
            sys.exit(2)
        super().error(message)


def parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(prog="mpips", description="PyTorch training on an MPI parameter server.")
    p.add_argument("--version", action="version", version=f"mpips {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _train_parser(sub, "train", "train under mpirun/srun (world = servers [+ groups] + workers)")
    simulate = _train_parser(sub, "simulate", "run the same job in one process in virtual time "
                                              "(mpips/runtime/job/simulate.py): --workers N, --device-time "
                                              "(default 20ms), --sim-latency, --sim-bandwidth")
    simulate.add_argument("--cluster", metavar="PROFILE.yaml",
                          help="a cluster profile (`mpips plan`, docs/plan.md): its workers, device times, "
                               "slowdowns, stragglers and --sim-* settings; flags given here override it")
    _train_parser(sub, "ranks", "print the number of ranks a job of these settings (with --workers N) "
                                "needs: servers + group servers + workers + evaluator (jobs/common.sh)")
    compare.add_arguments(_train_parser(
        sub, "compare", "train each of several paradigms (x seeds) on the same job, under MPI or "
                        "--simulate, then one table and the figures (mpips/experiments/compare.py)",
        exclude=setups.PER_RUN, description=compare.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mpips compare [--paradigms P,...] [--seeds S,...] [--simulate] [--runs DIR]\n"
              "                     [--out DIR] [...] [TRAIN SETTINGS]"))
    plan.add_arguments(_train_parser(
        sub, "plan", "probe the cluster (under your launcher) or read its profile, simulate every paradigm "
                     "on your job, rank them and print the command of the best (mpips/experiments/plan/)",
        exclude=setups.PER_RUN, description=PLAN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mpirun -n SERVERS+WORKERS python -m mpips plan [--target ACC | --time-limit S] [...]\n"
              "       mpips plan --profile CLUSTER.yaml [--target ACC | --time-limit S] [--candidates C,...]\n"
              "                  [--seeds S,...] [--jobs N] [--out DIR] [TRAIN SETTINGS]"))
    info = sub.add_parser("info", help="summarize a run directory")
    info.add_argument("run_dir")
    info.add_argument("--json", action="store_true", help="one JSON object")
    syncswitch_search.add_parser(sub)
    for name, (_, help_) in DELEGATED.items():   # their own parsers take the arguments (main)
        sub.add_parser(name, help=help_, add_help=False)
    return p


PLAN_HELP = """\
Which paradigm, with which setting, trains this job fastest on this cluster?

1. The cluster: under your launcher, on the allocation you will train on, with
   your model and data, the plan first probes it (--probe-seconds of training
   in three short real runs: every worker's compute at three batch sizes, the
   pulls, pushes and applies, the stragglers) and writes OUT/cluster.yaml;
   or --profile FILE reads one (docs/plan.md).
2. The search: every candidate, over --seeds, simulated on that profile with
   your settings (`mpips simulate`, --jobs processes), ranked by the predicted
   time to --target (or the accuracy at --time-limit); runs hopeless against
   the best so far are stopped early.
3. The table (OUT/plan.md), OUT/plan.json, OUT/plan.png, and the command that
   trains the recommended candidate: `mpirun -n RANKS python -m mpips train
   ...` and its `sbatch jobs/PARADIGM.slurm` environment.

Settings that describe an emulated cluster (--device-time, --slowdown,
--straggler, --random-stragglers) make the cluster the probe measures and go
into the printed command; in the search the profile stands for the cluster.
"""

# Subcommands that are whole programs of mpips.analysis: `mpips NAME ARGS` is their main(ARGS).
DELEGATED = {
    "summarize": ("mpips.analysis.summarize", "one table over run logs (mpips summarize --help)"),
    "plot": ("mpips.analysis.plot", "figures over run logs (mpips plot --help)"),
    "export": ("mpips.analysis.export", "a run log as TensorBoard scalars or a Chrome/Perfetto trace "
                                        "(mpips export --help)"),
}

_OWN = ("command", "config", "plugin", "cluster")   # arguments that are not settings


def settings(args) -> Config:
    """The run's configuration: defaults < --config's file < --cluster's profile
    (the simulate settings it stands for, mpips/experiments/profile.py) < the flags given."""
    flags = {k: v for k, v in vars(args).items() if k not in _OWN}
    path = getattr(args, "config", None)
    cluster = getattr(args, "cluster", None)
    if not cluster:
        return load(path, flags)
    from .experiments import profile

    measured = profile.load(cluster).settings(load(path, flags).batch_size)
    return load(path, {**measured, **flags})


def _launched_rank() -> str | None:
    """This process's rank as the launcher tells it (None: not launched by one)."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return None


def _fail(message: str, code: int = 2) -> int:
    print(f"mpips: error: {message}", file=sys.stderr, flush=True)
    return code


def cmd_train(args, comm=None, *, plugin_error: str | None = None) -> int:
    """`comm`: the ranks the job runs on (default COMM_WORLD: every rank of the launch).
    `plugin_error`: this rank could not load a plugin (then `args` is None)."""
    # SIGUSR1 (preemption), SIGTERM and SIGINT ask the trainer for a checkpoint and
    # an exit; one that comes before it can take one is remembered (`python -m
    # mpips` did this first of all for USR1), and once the job has ended none
    # may kill the rank (mpips/runtime/recovery/preemption.py).
    preemption.remember(*preemption.STOPS)
    from mpi4py import MPI

    from .runtime.transport.mpi import allgather_within, progress_interval
    from .runtime.transport.wait import SetupTimeout

    comm = MPI.COMM_WORLD if comm is None else comm
    config, error = None, plugin_error
    if error is None:
        try:
            config = load(getattr(args, "config", None), {k: v for k, v in vars(args).items() if k not in _OWN})
            progress_interval()   # MPIPS_PROGRESS_INTERVAL, checked with the settings
        except ConfigError as e:
            error = str(e)
    # A plugin or a file that only some ranks fail to read: every rank hears of it,
    # rank 0 says which (alone, a failed rank's exit left the others waiting forever).
    waits = config or Config()
    try:
        errors = allgather_within(comm, error, what="set-up (plugins and configuration)",
                                  warn=waits.stall_warn, timeout=waits.stall_timeout)
    except SetupTimeout as e:
        _fail(str(e))
        comm.Abort(2)
    failed = [r for r, e in enumerate(errors) if e]
    if failed:
        message = (errors[failed[0]] if len(failed) == len(errors) or failed[0] == 0
                   else f"rank {failed[0]}: {errors[failed[0]]}")
        return _fail(message) if comm.Get_rank() == 0 else 2

    if comm.Get_rank() == 0 and config is not None and config.progress != "off":
        print(f"mpips: set-up: {comm.Get_size()} rank(s) started; importing torch", file=sys.stderr, flush=True)
    from .runtime.job.train import SetupError, TrainingFailed, train
    from .runtime.recovery.checkpointer import Preempted

    assert config is not None   # (no rank failed to load it)
    try:
        train(config, comm)
    except SetupTimeout as e:   # a rank that never arrived cannot take part in an orderly exit
        _fail(str(e), e.status)
        comm.Abort(e.status)
    except SetupError as e:
        return _fail(str(e)) if comm.Get_rank() == 0 else 2
    except TrainingFailed as e:
        return _fail(str(e), 1) if comm.Get_rank() == 0 else 1
    except Preempted as e:
        # checkpointed, not finished: jobs/common.sh requeues the job after USR1 (3), not after TERM/INT
        return e.status
    except BaseException as e:  # noqa: BLE001 - any failure must end the whole job
        abort_job(comm, e)
    finally:
        preemption.ignore()
    return 0


def cmd_simulate(args) -> int:
    from .io.log import DiskFull
    from .runtime.job.assemble import TrainingFailed
    from .runtime.job.simulate import simulate
    from .runtime.transport.scheduler import TaskFailed
    from .runtime.transport.wait import StallError
    from .training.data import DataError

    # A stop signal ends the simulation where it is, its logs flushed (before,
    # SIGUSR1 lost every worker's rows): no checkpoints in virtual time.
    previous = {s: signal.signal(s, _stop_simulation) for s in preemption.STOPS}
    try:
        simulate(settings(args))
    except (ConfigError, DataError) as e:
        return _fail(str(e))
    except (TrainingFailed, DiskFull) as e:
        return _fail(str(e), 1)
    except SimulationStopped as e:
        return _stopped(e)
    except TaskFailed as e:
        cause = e.__cause__
        if isinstance(cause, SimulationStopped):
            return _stopped(cause)
        if isinstance(cause, ConfigError):   # found bad in the run: a paradigm hook's answer
            return _fail(str(cause))
        return _fail(f"the simulated job failed: {e}{raised_in_plugin(cause) if cause else ''}", 1)
    except StallError as e:
        return _fail(f"the simulated job failed: {e}", 1)
    finally:
        # Once a stop signal ended it, later ones (a burst) stay ignored: put back, they
        # killed the process as it exited (Python restores the default actions then; a
        # second USR1 0.05 s after the first: signal 10, not exit 138)
        for s, handler in previous.items():
            if signal.getsignal(s) is not signal.SIG_IGN:
                signal.signal(s, handler)
    return 0


def _stopped(e: "SimulationStopped") -> int:
    return _fail(f"the simulation stopped on {signal.Signals(e.signum).name}; its logs so far are "
                 f"written (the run is incomplete)", 128 + e.signum)


class SimulationStopped(StopSignal):
    """(a BaseException: a user's function it interrupts does not make it a failure)"""


def _stop_simulation(signum, frame):
    for s in preemption.STOPS:   # the first one stops it; the logs are being closed
        signal.signal(s, signal.SIG_IGN)
    raise SimulationStopped(signum)


def cmd_ranks(args) -> int:
    from .runtime.layout import ranks_for

    overrides = {k: v for k, v in vars(args).items() if k not in _OWN}
    try:
        print(ranks_for(load(getattr(args, "config", None), overrides)))
    except ConfigError as e:
        return _fail(str(e))
    return 0


def cmd_info(args) -> int:
    from .analysis.placement import node_line
    from .io.log import LogError, RunLog

    try:
        log = RunLog(args.run_dir)
        s = log.summary()
    except LogError as e:   # one line naming run.h5 already
        return _fail(str(e))
    except (FileNotFoundError, OSError, KeyError, ValueError) as e:
        return _fail(f"{args.run_dir}: not a readable run log ({' '.join(str(e).split())})")
    # A damaged log (a rank file missing, truncated, unreadable) is summarized
    # from what is left, says so, and exits 1: its numbers are not the run's.
    code = 1 if log.problems else 0
    shown = run_settings(log.config)
    if args.json:
        whole = log.completeness()
        print(json.dumps({**s, **{k: v for k, v in whole.items() if k not in ("complete", "reason")},
                          "settings": shown, "placement": log.placement}))
        return code
    width = max(len(k) for k in [*s, *shown])
    for k, v in s.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        print(f"{k:<{width}}  {v}")
    for i, (host, ranks) in enumerate(log.by_node().items()):   # the layout by node
        print(f"{'placement' if i == 0 else '':<{width}}  {host}: {node_line(ranks)}")
    print("settings (those that differ from the defaults, and the learning rate, batch and seed):")
    for k, v in shown.items():
        print(f"  {k:<{width - 2}}  {v!r}" if isinstance(v, str) else f"  {k:<{width - 2}}  {v}")
    if log.problems:
        print(f"mpips: warning: {args.run_dir}: damaged run log: {'; '.join(log.problems)}",
              file=sys.stderr, flush=True)
    return code


ALWAYS_SHOWN = ("paradigm", "lr", "batch_size", "epochs", "seed")


def run_settings(config: dict) -> dict:
    """A run's settings as `info` shows them: the paradigm, learning rate, batch,
    epochs and seed, then every other one that differs from its default (a
    paradigm's options, the compressor, the emulated cluster, ...)."""
    defaults = {k: spec_of(k).default for k in config if known(k) and k != OPTIONS_TEXT}
    changed = {k: v for k, v in config.items()
               if k not in ALWAYS_SHOWN and k != "run_dir" and k in defaults and v != defaults[k]}
    return {**{k: config[k] for k in ALWAYS_SHOWN if k in config}, **changed}


def main(argv=None, *, comm=None) -> int:
    """`comm`: the ranks a `train` runs on (mpips.train's `comm`; default COMM_WORLD)."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv), comm)
    except BrokenPipeError:
        # the reader stopped early (`mpips info RUN | head`): end quietly, as a Unix tool
        # does; stdout goes to /dev/null so that the flush at exit does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str], comm) -> int:
    # One module search path for `mpips` and `python -m mpips`: the current directory
    # first, as `python -m` puts it (a user's --model pkg.mod:fn or --dataset beside
    # the job resolves the same with either; docs/guide.md, "Datasets and models")
    quiet_ucx()   # before any MPI starts (train, plan under mpirun; compare's jobs inherit it)
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
    if argv and argv[0] in DELEGATED:
        from importlib import import_module

        return import_module(DELEGATED[argv[0]][0]).main(argv[1:], prog=f"mpips {argv[0]}")
    pre = _Parser(add_help=False)
    pre.add_argument("--plugin", action="append", default=[])
    try:
        load_plugins(pre.parse_known_args(argv)[0].plugin)
    except PluginError as e:
        if argv[:1] == ["train"]:   # the job's other ranks may have loaded it: they hear of it
            return cmd_train(None, comm, plugin_error=str(e))
        return _fail(str(e))
    args = parser().parse_args(argv)
    if args.command == "train":
        return cmd_train(args, comm)
    if args.command == "plan":
        return plan.cmd_plan(args, comm)
    return {"simulate": cmd_simulate, "ranks": cmd_ranks, "info": cmd_info,
            "compare": compare.cmd_compare, "syncswitch-search": syncswitch_search.cmd_search}[args.command](args)
