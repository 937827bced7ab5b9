"""The paradigm registry: name -> class. A new paradigm is one file plus a line here."""
from __future__ import annotations

from importlib import import_module

from .base import MODE_ASP, MODE_BSP, ClusterView, Gate, Paradigm, Push

REGISTRY = {
    "bsp": "bsp:BSP",
    "asp": "asp:ASP",
    "ssp": "ssp:SSP",
    "dssp": "dssp:DSSP",
    "vsgd": "vsgd:VSGD",
    "lbbsp": "lbbsp:LBBSP",
    "gssp": "gssp:GSSP",
    "syncswitch": "syncswitch:SyncSwitch",
}


def available() -> list[str]:
    return list(REGISTRY)


def make_paradigm(config, num_workers: int) -> Paradigm:
    """The paradigm object for `config.paradigm`."""
    from ..config import ConfigError

    if config.paradigm not in REGISTRY:
        raise ConfigError("paradigm", config.paradigm,
                          "not built in this version; available: " + ", ".join(REGISTRY))
    module, cls = REGISTRY[config.paradigm].split(":")
    return getattr(import_module(f".{module}", __name__), cls)(config, num_workers)


__all__ = ["REGISTRY", "available", "make_paradigm", "ClusterView", "Gate", "Paradigm",
           "Push", "MODE_BSP", "MODE_ASP"]
