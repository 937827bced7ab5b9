"""`mpips train|simulate|compare|info|summarize|plot|syncswitch-search ...` (or
`python -m mpips ...`): the command line.

Options of `train` are generated from the fields of `Config`, so the YAML
keys, the flags and the error messages always agree.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import traceback

from .api import abort_job
from .config import Config, ConfigError, load
from .experiments import compare, syncswitch_search
from .runtime import preemption


def _train_parser(sub, name: str, help: str, exclude=(), **kw) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, argument_default=argparse.SUPPRESS, **kw)
    p.add_argument("--config", help="YAML file of settings (flags override it)")
    p.add_argument("--plugin", action="append", metavar="FILE.py",
                   help="a Python file run first (on every rank), e.g. one that calls "
                        "mpips.register_paradigm; repeatable")
    for f in dataclasses.fields(Config):
        if f.name in exclude:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        choices = f.metadata.get("choices")
        if choices:
            help_ += f" ({'|'.join(choices)})"
        help_ += f" [default: {f.default!r}]"
        if isinstance(f.default, bool):
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, help=help_)
        else:
            # Strings here; Config coercion gives the one-line error naming the field.
            p.add_argument(flag, dest=f.name, metavar=f.name.upper(), help=help_)
    return p


class _Parser(argparse.ArgumentParser):
    """Under a launcher every rank parses the same arguments: rank 0 says what
    is wrong, the others exit with the same status without repeating it."""

    def error(self, message):
        if _launched_rank() not in (None, "0"):
            sys.exit(2)
        super().error(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mpips",
                                description="PyTorch training on an MPI parameter server.")
    sub = p.add_subparsers(dest="command", required=True)
    _train_parser(sub, "train", "train under mpirun/srun (world = servers [+ groups] + workers)")
    _train_parser(sub, "simulate", "run the same job in one process in virtual time (mpips/runtime/simulate.py): "
                                   "--workers N, --device-time (default 20ms), --sim-latency, --sim-bandwidth")
    _train_parser(sub, "ranks", "print the number of ranks a job of these settings (with --workers N) "
                                "needs: servers + group servers + workers + evaluator (jobs/common.sh)")
    compare.add_arguments(_train_parser(
        sub, "compare", "train each of several paradigms (x seeds) on the same job, under MPI or "
                        "--simulate, then one table and the figures (mpips/experiments/compare.py)",
        exclude=compare.PER_RUN, description=compare.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mpips compare [--paradigms P,...] [--seeds S,...] [--simulate] [--runs DIR]\n"
              "                     [--out DIR] [...] [TRAIN SETTINGS]"))
    info = sub.add_parser("info", help="summarize a run directory")
    info.add_argument("run_dir")
    info.add_argument("--json", action="store_true", help="one JSON object")
    syncswitch_search.add_parser(sub)
    for name, (_, help_) in DELEGATED.items():   # their own parsers take the arguments (main)
        sub.add_parser(name, help=help_, add_help=False)
    return p


# Subcommands that are whole programs of mpips.analysis: `mpips NAME ARGS` is their main(ARGS).
DELEGATED = {
    "summarize": ("mpips.analysis.summarize", "one table over run logs (mpips summarize --help)"),
    "plot": ("mpips.analysis.plot", "figures over run logs (mpips plot --help)"),
}

_OWN = ("command", "config", "plugin")   # arguments that are not settings


def _launched_rank() -> str | None:
    """This process's rank as the launcher tells it (None: not launched by one)."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return None


class PluginError(Exception):
    pass


def load_plugins(paths: list[str]) -> None:
    """Run each file as a module (its own name, mpips_plugin_<stem>), before
    the configuration is read, so what it registers is a valid choice."""
    for path in paths:
        stem = os.path.splitext(os.path.basename(path))[0]
        name = "mpips_plugin_" + "".join(c if c.isalnum() else "_" for c in stem)
        if not os.path.isfile(path):
            raise PluginError(f"plugin {path}: no such file")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - the user's file may raise anything
            del sys.modules[name]
            where = traceback.extract_tb(e.__traceback__)[-1]
            raise PluginError(f"plugin {path} failed at line {where.lineno}: "
                              f"{type(e).__name__}: {' '.join(str(e).split())}") from None


def _fail(message: str, code: int = 2) -> int:
    print(f"mpips: error: {message}", file=sys.stderr, flush=True)
    return code


def cmd_train(args, comm=None) -> int:
    """`comm`: the ranks the job runs on (default COMM_WORLD: every rank of the launch)."""
    # SIGUSR1 (preemption) asks the trainer for a checkpoint; one that comes
    # before it can take one is remembered (`python -m mpips` did this first
    # of all), and once the run is finished it must not kill the rank.
    preemption.remember()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    overrides = {k: v for k, v in vars(args).items() if k not in _OWN}
    try:
        config = load(getattr(args, "config", None), overrides)
    except ConfigError as e:
        return _fail(str(e)) if comm.Get_rank() == 0 else 2

    from .runtime.checkpointer import PREEMPTED_EXIT, Preempted
    from .runtime.job import SetupError, TrainingFailed, train

    try:
        train(config, comm)
    except SetupError as e:
        return _fail(str(e)) if comm.Get_rank() == 0 else 2
    except TrainingFailed as e:
        return _fail(str(e), 1) if comm.Get_rank() == 0 else 1
    except Preempted:
        return PREEMPTED_EXIT  # checkpointed, not finished: jobs/common.sh requeues the job
    except BaseException as e:  # noqa: BLE001 - any failure must end the whole job
        abort_job(comm, e)
    return 0


def cmd_simulate(args) -> int:
    overrides = {k: v for k, v in vars(args).items() if k not in _OWN}
    from .io.log import DiskFull
    from .runtime.job import TrainingFailed
    from .runtime.scheduler import TaskFailed
    from .runtime.simulate import simulate
    from .runtime.wait import StallError
    from .training.data import DataError

    try:
        simulate(load(getattr(args, "config", None), overrides))
    except (ConfigError, DataError) as e:
        return _fail(str(e))
    except (TrainingFailed, DiskFull) as e:
        return _fail(str(e), 1)
    except (TaskFailed, StallError) as e:
        return _fail(f"the simulated job failed: {e}", 1)
    return 0


def cmd_ranks(args) -> int:
    from .runtime.layout import ranks_for

    overrides = {k: v for k, v in vars(args).items() if k not in _OWN}
    try:
        print(ranks_for(load(getattr(args, "config", None), overrides)))
    except ConfigError as e:
        return _fail(str(e))
    return 0


def cmd_info(args) -> int:
    from .io.log import RunLog

    try:
        log = RunLog(args.run_dir)
        s = log.summary()
    except (FileNotFoundError, OSError, KeyError, ValueError) as e:
        return _fail(f"{args.run_dir}: not a readable run log ({' '.join(str(e).split())})")
    # A damaged log (a rank file missing, truncated, unreadable) is summarized
    # from what is left, says so, and exits 1: its numbers are not the run's.
    code = 1 if log.problems else 0
    if args.json:
        whole = log.completeness()
        print(json.dumps({**s, **{k: v for k, v in whole.items() if k not in ("complete", "reason")}}))
        return code
    width = max(len(k) for k in s)
    for k, v in s.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        print(f"{k:<{width}}  {v}")
    if log.problems:
        print(f"mpips: warning: {args.run_dir}: damaged run log: {'; '.join(log.problems)}",
              file=sys.stderr, flush=True)
    return code


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
    # the job resolves the same with either; README, "Your own model")
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
        # every rank fails alike; one says so
        return _fail(str(e)) if _launched_rank() in (None, "0") else 2
    args = parser().parse_args(argv)
    if args.command == "train":
        return cmd_train(args, comm)
    return {"simulate": cmd_simulate, "ranks": cmd_ranks, "info": cmd_info,
            "compare": compare.cmd_compare, "syncswitch-search": syncswitch_search.cmd_search}[args.command](args)
