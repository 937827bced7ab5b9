"""`mpips.train`: the Python API, called on every rank under mpirun/srun;
`mpips.simulate`: the same job in one process, in virtual time.

    import mpips
    log = mpips.train(paradigm="ssp", staleness=3, epochs=2,
                      model=lambda: torch.nn.Linear(64, 10),
                      dataset=(x_train, y_train, x_test, y_test),
                      loss=torch.nn.functional.cross_entropy)
    print(log.iterations_df.groupby("worker").wait.sum())
    log = mpips.simulate(workers=64, paradigm="ssp", model=..., dataset=...)

Bad input ends the job on every rank with the same one-line `SetupError`
(or `ConfigError`); any other failure of a rank aborts the whole job with
that rank's message, as `mpips train` does (a rank that raised alone would
leave the others waiting for it until the stall timeout).
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from .config import Config, ConfigError, load
from .plugins import raised_in_plugin


def abort_job(comm, e: BaseException) -> None:
    """A rank failed unexpectedly: say so with its traceback and end every
    rank of the job (`comm.Abort`); does not return. A full disk is one line
    naming the file (mpips.io.log.DiskFull): its traceback tells no more."""
    from .io.log import DiskFull

    rank = comm.Get_rank()
    if isinstance(e, DiskFull):
        print(f"mpips: error: {e}", file=sys.stderr, flush=True)
        comm.Abort(1)
    detail = "".join(traceback.format_exception(e)).rstrip()
    print(f"mpips: rank {rank}: {type(e).__name__}: {e}{raised_in_plugin(e)}\n{detail}\n"
          f"mpips: rank {rank}: aborting the job", file=sys.stderr, flush=True)
    comm.Abort(1)


def as_dataset(dataset: Any):
    """A user's dataset as mpips.training.data.Dataset (see there: tensors,
    arrays or torch Datasets); None stays None."""
    from .training.data import as_dataset as convert  # torch: only when called

    return convert(dataset)


def describe_objects(model, dataset, loss) -> dict[str, str]:
    """A run's user objects in words, for run.h5 (RunLog.user_objects)."""
    from .training.data import dataset_label
    from .training.models import model_label

    out = {}
    if model is not None:
        out["model"] = model_label(model)
    if dataset is not None:
        out["dataset"] = dataset_label(dataset)
    if loss is not None:
        out["loss"] = getattr(loss, "__qualname__", None) or type(loss).__name__
    return out


def _settings(config: Config | str | None, overrides: dict) -> Config:
    """A Config, a YAML file or None (the defaults), with `overrides` on top."""
    if isinstance(config, Config):
        return load(None, {**config.to_dict(), **overrides})
    return load(config, overrides)


def _record_objects(run_dir: str, model, dataset, loss) -> None:
    """run.h5 names the user's objects, if any (RunLog.user_objects)."""
    if model is not None or dataset is not None or loss is not None:
        from .io.log import set_user_objects

        set_user_objects(run_dir, describe_objects(model, dataset, loss))


def simulate(config: Config | str | None = None, *, model: Any = None, dataset: Any = None,
             loss: Callable | None = None, **overrides: Any):
    """`mpips simulate` from Python: every role of the job in this one process,
    in virtual time (mpips/runtime/job/simulate.py); returns the run's `RunLog`.
    The keywords are `train`'s, but `comm` (`workers` is needed). Raises
    ConfigError or DataError (mpips.training.data) for bad input,
    TrainingFailed for a run that did not train."""
    config, dataset = _settings(config, overrides), as_dataset(dataset)

    from .io.log import RunLog
    from .runtime.job.simulate import simulate as run

    run_dir = run(config, model=model, dataset=dataset, loss=loss)
    _record_objects(run_dir, model, dataset, loss)
    return RunLog(run_dir)


def train(config: Config | str | None = None, *, model: Any = None, dataset: Any = None,
          loss: Callable | None = None, comm: Any = None, **overrides: Any):
    """Train on every rank of `comm` (default COMM_WORLD); returns the run's
    `RunLog` on every rank.

    `config`: a Config, a YAML file, or None (defaults); `overrides` are
    settings by name (`paradigm="ssp", staleness=3`), applied on top.
    `model`: an nn.Module or a factory, `factory()` or
    `factory(input_shape, num_classes)` (build it in the factory so that
    every rank starts from the same weights, seeded by `seed`); default the
    configuration's `model`. `dataset`: see `as_dataset`; default the
    configuration's `dataset`. `loss`: `loss(output, target)`, a mean over
    the batch; default cross-entropy. Raises ConfigError or SetupError (the
    same on every rank) for bad input; any other failure aborts the job."""
    from .runtime.recovery import preemption
    from .runtime.transport.mpienv import quiet_ucx

    preemption.remember()
    quiet_ucx()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    config, dataset = _settings(config, overrides), as_dataset(dataset)

    from .io.log import RunLog
    from .runtime.job.train import SetupError, TrainingFailed
    from .runtime.job.train import train as run
    from .runtime.recovery.checkpointer import Preempted
    from .runtime.transport.wait import SetupTimeout

    try:
        run_dir = run(config, comm, model=model, dataset=dataset, loss=loss)
        if comm.Get_rank() == 0:
            _record_objects(run_dir, model, dataset, loss)
        comm.Barrier()   # every rank has closed its log file (and rank 0 written run.h5)
        return RunLog(run_dir)
    except (SetupError, TrainingFailed, Preempted, ConfigError):
        raise   # the same on every rank: the job ends cleanly
    except SetupTimeout as e:   # a rank that never arrived cannot take part in an orderly exit
        print(f"mpips: error: {e}", file=sys.stderr, flush=True)
        comm.Abort(e.status)
    except BaseException as e:  # noqa: BLE001 - any other failure must end the whole job
        abort_job(comm, e)
        raise
