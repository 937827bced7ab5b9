"""Settings declared once: a field of a frozen dataclass made with `setting`
carries its default, help, allowed values and bounds, and everything that
reads or shows a setting takes them from there (the command line's flags,
YAML keys, `mpips.train` keywords, `mpips compare` entries, the docs' tables
and the one-line errors). The shared `Config` and every paradigm's options
(`Paradigm.Options`) are such dataclasses.

Every number has bounds, so a value that validation accepts runs: a count,
a factor or a time beyond them is refused here in one line, not found later
as a MemoryError or an OverflowError deep in a run.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Collection

from .validate import ConfigError, coerce_to

KEY = "setting"   # the metadata key of a field made by `setting`
MAX_WORKERS = 100_000     # workers (or servers) of a job: the tables hold a row each
MAX_COUNT = 10**9         # iterations, steps, rounds: counts a run may reach
MAX_STALENESS = 10**6     # a staleness bound (beyond the clocks any run reaches: ASP)


@dataclass(frozen=True)
class Spec:
    """One setting: `type` is its default's; `choices` its allowed values;
    `low`/`high` its bounds (`low_open`: low itself excluded; `high_open`:
    high itself excluded); `note` ends its range's message ("seconds; 0 = off")."""

    name: str
    default: Any
    help: str
    choices: Collection[str] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""

    @property
    def type(self) -> type:
        return type(self.default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def coerce(self, value: Any) -> Any:
        """A YAML, command-line or Python value as this setting's type (the
        checks of `check` follow); None (YAML's `null`) is refused, not read
        as the text 'None' (a run directory ./None)."""
        if value is None:
            raise ConfigError(self.name, value, f"must be of type {self.type.__name__}, not null "
                                                f"(leave the setting out for its default)")
        return coerce_to(self.type, self.name, value)

    def check(self, value: Any) -> None:
        """A ConfigError naming this setting and what is allowed, unless `value` is."""
        t = self.type
        if self.choices is not None:
            if value not in self.choices:
                raise ConfigError(self.name, value, "allowed: " + ", ".join(self.choices))
            return
        if t is bool:
            if not isinstance(value, bool):
                raise ConfigError(self.name, value, "must be true or false")
            return
        if t is str:
            if not isinstance(value, str):
                raise ConfigError(self.name, value, "must be text")
            return
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if t is int and not (number and isinstance(value, int)):
            raise ConfigError(self.name, value, self.allowed())
        if t is float and not (number and math.isfinite(value)):
            # NaN passes every `x < 0` test and inf every `x > 0`: no float setting takes them
            raise ConfigError(self.name, value, "must be a finite number" + self._range(", "))
        if not self.within(value):
            raise ConfigError(self.name, value, self.allowed())

    def takes(self) -> str:
        """What it takes, in words for a table ('an integer >= 0, at most 1000000')."""
        if self.choices is not None:
            return ", ".join(self.choices)
        if self.type in (bool, str):
            return "true or false" if self.type is bool else "text"
        return self.allowed().removeprefix("must be ").removeprefix("in ")

    def within(self, value: float) -> bool:
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return low_ok and high_ok

    def allowed(self) -> str:
        """What this setting takes, as an error says it ('must be an integer >= 0, at most 1000000')."""
        if self.choices is not None:
            return "allowed: " + ", ".join(self.choices)
        if self.type is int:
            return "must be an integer" + self._range(" ")
        return "must be" + (" a number" if self.low is None or self.high is None else "") + self._range(" ")

    def _range(self, sep: str) -> str:
        low, high = self.low, self.high
        note = f" ({self.note})" if self.note else ""
        if low is None and high is None:
            return note
        if self.type is float and low is not None and high is not None:
            return (f"{sep}in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
                    + note)
        def shown(x: float) -> str:
            return str(x) if self.type is int else f"{x:g}"

        parts = []
        if low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {shown(low)}")
        if high is not None:
            parts.append(f"{'<' if self.high_open else 'at most'} {shown(high)}")
        return sep + ", ".join(parts) + note


def setting(default: Any, help: str, *, choices: Collection[str] | None = None,
            low: float | None = None, high: float | None = None, low_open: bool = False,
            high_open: bool = False, note: str = "") -> Any:
    """A field of a settings dataclass (see Spec); its type is its default's:
    write a float's default as one (`1.0`)."""
    rule = dict(help=help, choices=choices, low=low, high=high, low_open=low_open,
                high_open=high_open, note=note)
    return field(default=default, metadata={KEY: rule})


PLAIN = (bool, int, float, str)


def specs(cls: type) -> dict[str, Spec]:
    """The settings of a settings dataclass, by name: its fields made by
    `setting`, and plain ones whose default is a bool, int, float or str
    (a plugin's `period: int = 2`, without help or bounds)."""
    out = {}
    for f in dataclasses.fields(cls):
        if KEY in f.metadata:
            out[f.name] = Spec(f.name, f.default, **f.metadata[KEY])
        elif f.init and not f.metadata and type(f.default) in PLAIN:
            out[f.name] = Spec(f.name, f.default, "")
    return out


def check(obj: Any) -> None:
    """Every setting of `obj` checked against its Spec (the first bad one raises)."""
    for name, spec in specs(type(obj)).items():
        spec.check(getattr(obj, name))


def values(obj: Any) -> dict[str, Any]:
    """The settings of `obj` by name, in declaration order."""
    return {name: getattr(obj, name) for name in specs(type(obj))}
