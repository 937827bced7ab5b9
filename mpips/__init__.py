"""mpips: PyTorch training on an MPI parameter server with a choice of
synchronization paradigm (BSP, ASP, SSP, DSSP, GSSP, Sync-Switch, LB-BSP, VSGD,
BSP with backup workers, Local SGD), or one's own (`register_paradigm`, its
settings an `Options` dataclass of `setting` fields).

The Python API, flat (under mpirun/srun, on every rank):

    import mpips
    log = mpips.train(paradigm="ssp", staleness=3, model=my_model, dataset=(x, y, xt, yt))
    log.iterations_df                      # a pandas DataFrame per table

and in one process, in virtual time: `mpips.simulate(workers=16, ...)`, the same keywords.
`import mpips` imports neither mpi4py nor torch; `train` and `simulate` do, when called.
"""

__version__ = "0.1.0"

from .config import Config, ConfigError, load  # noqa: E402
from .paradigms import Options, Paradigm, register_paradigm, unregister_paradigm  # noqa: E402
from .settings import setting  # noqa: E402

_LAZY = {"RunLog": ("io.log", "RunLog"), "train": ("api", "train"), "simulate": ("api", "simulate"),
         "TrainingFailed": ("runtime.job.assemble", "TrainingFailed"),
         "SetupError": ("runtime.job.train", "SetupError")}


def __getattr__(name):
    # h5py, torch and mpi4py load only when what needs them is first used
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        value = getattr(import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mpips' has no attribute {name!r}")


__all__ = ["Config", "ConfigError", "load", "RunLog", "train", "simulate", "Options", "Paradigm",
           "register_paradigm", "setting", "unregister_paradigm", "TrainingFailed", "SetupError", "__version__"]
