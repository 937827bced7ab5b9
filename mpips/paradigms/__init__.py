"""The paradigm registry: name -> class, the one list of paradigms.

A built-in paradigm is one file plus a line in REGISTRY; a paradigm of one's
own, in one's own file, is one call to `register_paradigm` (from a script
before `mpips.train`, or from a file given to the command line's `--plugin`).
The configuration's choices for `paradigm` are this registry's names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from ..validate import ConfigError, coerce_to
from .base import Paradigm, Push
from .gates import PASS, Gate, bounded_gate, own_writes_gate
from .view import MODE_ASP, MODE_BSP, ClusterView

# name -> "module:Class" (built in, imported on first use) or the class itself (registered)
REGISTRY: dict[str, str | type[Paradigm]] = {
    "bsp": "bsp:BSP",
    "asp": "asp:ASP",
    "ssp": "ssp:SSP",
    "dssp": "dssp:DSSP",
    "gssp": "gssp:GSSP",
    "syncswitch": "syncswitch:SyncSwitch",
    "lbbsp": "lbbsp:LBBSP",
    "vsgd": "vsgd:VSGD",
    "backup": "backup:Backup",
    "localsgd": "localsgd:LocalSGD",
}
BUILT_IN = tuple(REGISTRY)


@dataclass(frozen=True)
class Option:
    """A registered paradigm's own setting (`paradigm_options` of the configuration)."""

    default: Any
    help: str = ""

    @property
    def type(self) -> type:
        return type(self.default)


OPTIONS: dict[str, dict[str, Option]] = {}   # name -> its options (registered paradigms only)
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_OPTION_TYPES = (bool, int, float, str)


def register_paradigm(name: str, cls: type, *, options: dict[str, Any] | None = None,
                      replace: bool = False) -> type:
    """Make `cls` (a `Paradigm` subclass) the paradigm `name`, with its own
    `options`: {option: default} or {option: (default, help)}, defaults of
    type bool, int, float or str. A run selects it with `paradigm=name` and
    sets its options with `paradigm_options` ('key=value,...' or a mapping);
    the paradigm reads them, defaults filled in, as `self.options`. Under
    MPI, every rank must register it (the same file runs on every rank).
    Returns `cls`, so it also works as a decorator's body."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"paradigm name {name!r}: lower-case letters, digits, '_' and '-', "
                         f"starting with a letter")
    if name in BUILT_IN or (name in REGISTRY and not replace):
        raise ValueError(f"paradigm {name!r} is already registered"
                         + ("" if name in BUILT_IN else " (replace=True to replace it)"))
    if not (isinstance(cls, type) and issubclass(cls, Paradigm)):
        raise TypeError(f"paradigm {name!r}: {cls!r} is not a subclass of mpips.paradigms.Paradigm")
    parsed = {}
    for key, spec in (options or {}).items():
        default, help_ = spec if isinstance(spec, tuple) else (spec, "")
        if not isinstance(key, str) or not re.match(r"^[a-z_][a-z0-9_]*$", key):
            raise ValueError(f"paradigm {name!r}: option name {key!r} must be a lower-case identifier")
        if type(default) not in _OPTION_TYPES:
            raise TypeError(f"paradigm {name!r}: option {key!r} default {default!r} must be "
                            f"a bool, int, float or str")
        parsed[key] = Option(default, str(help_))
    REGISTRY[name] = cls
    OPTIONS[name] = parsed
    return cls


def unregister_paradigm(name: str) -> None:
    """Forget a registered paradigm (built-in ones stay)."""
    if name in BUILT_IN:
        raise ValueError(f"paradigm {name!r} is built in")
    REGISTRY.pop(name, None)
    OPTIONS.pop(name, None)


def available() -> list[str]:
    return list(REGISTRY)


def paradigm_class(name: str) -> type[Paradigm]:
    entry = REGISTRY[name]
    if isinstance(entry, str):
        module, cls = entry.split(":")
        return getattr(import_module(f".{module}", __name__), cls)
    return entry


def parse_options(paradigm: str, text: str) -> dict[str, Any]:
    """`paradigm_options` text ('key=value,...') as {option: value} with the
    registered defaults filled in; ConfigError names what is wrong."""
    known = OPTIONS.get(paradigm, {})
    values = {k: o.default for k, o in known.items()}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError("paradigm_options", text, "entries key=value, e.g. threshold=0.5")
        if key not in known:
            allowed = ", ".join(known) if known else "none (only a registered paradigm has options)"
            raise ConfigError("paradigm_options", text, f"unknown option {key!r} of paradigm "
                              f"{paradigm}; its options: {allowed}")
        values[key] = coerce_to(known[key].type, "paradigm_options", raw.strip(),
                                shown=f"{key}={raw.strip()}")
    return values


def make_paradigm(config, num_workers: int) -> Paradigm:
    """The paradigm object for `config.paradigm`."""
    if config.paradigm not in REGISTRY:
        raise ConfigError("paradigm", config.paradigm,
                          "not registered; available: " + ", ".join(REGISTRY))
    return paradigm_class(config.paradigm)(config, num_workers)


__all__ = ["REGISTRY", "OPTIONS", "Option", "available", "make_paradigm", "paradigm_class",
           "parse_options", "register_paradigm", "unregister_paradigm", "ClusterView", "Gate",
           "Paradigm", "Push", "PASS", "MODE_BSP", "MODE_ASP", "own_writes_gate", "bounded_gate"]
