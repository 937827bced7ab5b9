"""`mpips.train`: the Python API, called on every rank under mpirun/srun.

    import mpips
    log = mpips.train(paradigm="ssp", staleness=3, epochs=2,
                      model=lambda: torch.nn.Linear(64, 10),
                      dataset=(x_train, y_train, x_test, y_test),
                      loss=torch.nn.functional.cross_entropy)
    print(log.iterations_df.groupby("worker").wait.sum())

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
    """A user's dataset as mpips.training.data.Dataset: a data.Dataset; a tuple
    (x_train, y_train, x_test, y_test) of tensors or arrays; or a pair
    (train, test) of torch Datasets yielding (x, y) (read into memory once:
    every rank holds the whole training set). Labels are class indices."""
    import numpy as np
    import torch

    from .training.data import Dataset

    if dataset is None or isinstance(dataset, Dataset):
        return dataset
    if isinstance(dataset, dict):
        dataset = tuple(dataset[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    if not isinstance(dataset, (tuple, list)) or len(dataset) not in (2, 4):
        raise ConfigError("dataset", type(dataset).__name__,
                          "a user's dataset is (x_train, y_train, x_test, y_test) tensors or "
                          "(train, test) torch Datasets")
    if len(dataset) == 2:
        parts = []
        for split in dataset:
            try:
                xs, ys = zip(*(split[i] for i in range(len(split))))
            except Exception as e:  # noqa: BLE001 - a user's Dataset may raise anything
                raise ConfigError("dataset", type(split).__name__,
                                  f"cannot read it as (x, y) items: {type(e).__name__}: {e}") from None
            parts += [torch.stack([torch.as_tensor(x) for x in xs]), torch.as_tensor(np.asarray(ys))]
        dataset = parts
    x_train, y_train, x_test, y_test = (torch.as_tensor(np.asarray(t)) if not isinstance(t, torch.Tensor) else t
                                        for t in dataset)
    if x_train.is_floating_point():
        x_train, x_test = x_train.float(), x_test.float()
    y_train, y_test = y_train.long(), y_test.long()
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) != len(y) or len(x) == 0 or y.dim() != 1:
            raise ConfigError("dataset", f"{name} {tuple(x.shape)}/{tuple(y.shape)}",
                              "needs as many labels (one class index each) as samples, and at least one")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ConfigError("dataset", f"{tuple(x_train.shape)}/{tuple(x_test.shape)}",
                          "train and test samples differ in shape")
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if int(min(y_train.min(), y_test.min())) < 0:
        raise ConfigError("dataset", "labels", "class indices must be >= 0")
    return Dataset("user", x_train, y_train, x_test, y_test, tuple(x_train.shape[1:]), num_classes)


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
    from .runtime import preemption

    preemption.remember()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    if isinstance(config, Config):
        config = load(None, {**config.to_dict(), **overrides})
    else:
        config = load(config, overrides)
    dataset = as_dataset(dataset)

    from .io.log import RunLog, set_user_objects
    from .runtime.checkpointer import Preempted
    from .runtime.job import SetupError, TrainingFailed
    from .runtime.job import train as run
    from .runtime.rendezvous import SetupTimeout

    try:
        run_dir = run(config, comm, model=model, dataset=dataset, loss=loss)
        if comm.Get_rank() == 0 and (model is not None or dataset is not None or loss is not None):
            set_user_objects(run_dir, describe_objects(model, dataset, loss))
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
