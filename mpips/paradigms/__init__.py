"""The paradigm registry: name -> class, the one list of paradigms.

A built-in paradigm is one file plus a line in REGISTRY; a paradigm of one's
own, in one's own file, is one call to `register_paradigm` (from a script
before `mpips.train`, or from a file given to the command line's `--plugin`).
The configuration's choices for `paradigm` are this registry's names.
"""
from __future__ import annotations

import dataclasses
import re
from importlib import import_module
from typing import Any

from ..settings import PLAIN, Spec, setting, specs
from ..validate import ConfigError
from .base import Options, Paradigm, Push
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


OPTIONS: dict[str, type[Options]] = {}   # name -> its options' class (registered paradigms)
# Names no option may take: the shared settings (mpips.config adds them as it
# is imported; it imports this package, not the other way round).
RESERVED: set[str] = {"paradigm_options"}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_OPTION = re.compile(r"^[a-z_][a-z0-9_]*$")


def register_paradigm(name: str, cls: type, *, options: dict[str, Any] | None = None,
                      replace: bool = False) -> type:
    """Make `cls` (a `Paradigm` subclass) the paradigm `name`. Its own
    settings are `cls.Options`, a frozen dataclass subclass of
    `mpips.paradigms.Options` whose fields are made by `mpips.settings.setting`
    (or plain: `period: int = 2`); or, the older form, `options`: {option:
    default} or {option: (default, help)}, defaults of type bool, int, float
    or str. Each becomes a flag (`--period 3`), a YAML key and a keyword of
    `mpips.train`, typed and checked; `paradigm_options` ('key=value,...' or
    a mapping) sets them too. The paradigm reads them as `self.options`.
    Under MPI, every rank must register it (the same file runs on every
    rank). Returns `cls`, so it also works as a decorator's body."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"paradigm name {name!r}: lower-case letters, digits, '_' and '-', "
                         f"starting with a letter")
    if name in BUILT_IN or (name in REGISTRY and not replace):
        raise ValueError(f"paradigm {name!r} is already registered"
                         + ("" if name in BUILT_IN else " (replace=True to replace it)"))
    if not (isinstance(cls, type) and issubclass(cls, Paradigm)):
        raise TypeError(f"paradigm {name!r}: {cls!r} is not a subclass of mpips.paradigms.Paradigm")
    own = _options_of_mapping(name, options) if options else cls.Options
    if not (isinstance(own, type) and issubclass(own, Options) and dataclasses.is_dataclass(own)
            and own.__dataclass_params__.frozen):   # type: ignore[attr-defined]
        raise TypeError(f"paradigm {name!r}: its Options {own!r} must be a frozen dataclass "
                        f"subclass of mpips.paradigms.Options")
    fields = {f.name: f for f in dataclasses.fields(own)}
    for key in specs(own):
        if not _OPTION.match(key):
            raise ValueError(f"paradigm {name!r}: option name {key!r} must be a lower-case identifier")
        if key in RESERVED:
            raise ValueError(f"paradigm {name!r}: option {key!r} is a shared setting; name it otherwise")
        fields.pop(key)
    if fields:
        raise TypeError(f"paradigm {name!r}: option {next(iter(fields))!r} must have a default of type "
                        f"bool, int, float or str")
    REGISTRY[name] = cls
    OPTIONS[name] = own
    return cls


def _options_of_mapping(name: str, options: dict[str, Any]) -> type[Options]:
    """{option: default or (default, help)} as an Options dataclass."""
    fields = []
    for key, spec in options.items():
        default, help_ = spec if isinstance(spec, tuple) else (spec, "")
        if not isinstance(key, str) or not _OPTION.match(key):
            raise ValueError(f"paradigm {name!r}: option name {key!r} must be a lower-case identifier")
        if key in RESERVED:
            raise ValueError(f"paradigm {name!r}: option {key!r} is a shared setting; name it otherwise")
        if type(default) not in PLAIN:
            raise TypeError(f"paradigm {name!r}: option {key!r} default {default!r} must be "
                            f"a bool, int, float or str")
        fields.append((key, type(default), setting(default, str(help_))))
    return dataclasses.make_dataclass(f"{name.title().replace('-', '')}Options", fields,
                                      bases=(Options,), frozen=True)


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


def options_class(name: str) -> type[Options]:
    """The class of paradigm `name`'s own settings."""
    return OPTIONS.get(name) or paradigm_class(name).Options


def option_specs() -> dict[str, dict[str, Spec]]:
    """Every registered paradigm's own settings: {paradigm: {option: Spec}}."""
    return {name: specs(options_class(name)) for name in REGISTRY}


def options_markdown() -> str:
    """Every registered paradigm's own settings as a Markdown table (docs/paradigms.md's)."""
    rows = ["| paradigm | flag (YAML key, keyword: with `_`) | default | takes | meaning |",
            "|---|---|---|---|---|"]
    for paradigm, own in option_specs().items():
        rows += [f"| `{paradigm}` | `{s.flag}` | `{s.default!r}` | {s.takes()} | {s.help} |" for s in own.values()]
    return "\n".join(rows) + "\n"


def make_paradigm(config, num_workers: int) -> Paradigm:
    """The paradigm object for `config.paradigm`."""
    if config.paradigm not in REGISTRY:
        raise ConfigError("paradigm", config.paradigm,
                          "not registered; available: " + ", ".join(REGISTRY))
    return paradigm_class(config.paradigm)(config, num_workers)


__all__ = ["REGISTRY", "OPTIONS", "Options", "available", "make_paradigm", "option_specs", "options_class",
           "options_markdown",
           "paradigm_class", "register_paradigm", "unregister_paradigm", "ClusterView", "Gate",
           "Paradigm", "Push", "PASS", "MODE_BSP", "MODE_ASP", "own_writes_gate", "bounded_gate"]
