"""mpips: PyTorch training on an MPI parameter server with a choice of
synchronization paradigm (BSP, ASP, SSP, DSSP, GSSP, Sync-Switch, LB-BSP, VSGD)."""

__version__ = "0.1.0"

from .config import Config, ConfigError, load  # noqa: E402
from .log import RunLog  # noqa: E402

__all__ = ["Config", "ConfigError", "load", "RunLog", "__version__"]
