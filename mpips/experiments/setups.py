"""A paradigm with settings, as `mpips compare --paradigms` and `mpips plan
--candidates` name it (one parser for both, and for the benchmarks):

    PARADIGM[+COMPRESSOR][:SETTING=VALUE...]

e.g. `bsp`, `gssp+gdtopk`, `ssp:staleness=1`,
`localsgd:local_mode=async:dylu=true:delayed_nesterov=8`. A SETTING is a
shared train setting (a Config field, `-` or `_`) but those set per run
(paradigm, seed, run_dir), or one of PARADIGM's own options; its VALUE is
read as the setting's type and checked against what it allows. Every error is one line naming the option, the entry, the
setting and what is allowed (OptionError); a value the configuration rejects
later (staleness=-1, dylu=true in sync mode) names the entry too (`blame`).
"""
from __future__ import annotations

import contextlib
import difflib
import hashlib
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from ..config import COMPRESSORS, SHARED, ConfigError
from ..paradigms import available, options_class
from ..settings import specs

PER_RUN = ("paradigm", "seed", "run_dir")   # each run of a setup gets these from its comparison


class OptionError(ValueError):
    """A bad option of `mpips compare` or `mpips plan`; `str()` is one line
    naming it and what is allowed."""

    def __init__(self, option: str, value: str, allowed: str):
        super().__init__(f"invalid {option} {value!r}: {allowed}")


_S = TypeVar("_S", bound="Setup")

@dataclass(frozen=True)
class Setup:
    """One entry: its text (`name`, also the label of its runs in a
    comparison's tables) and its train settings, `paradigm` included."""
    name: str
    settings: dict
    OPTION = "--paradigms"   # the option whose entries these are, for the errors

    @classmethod
    def parse(cls: type[_S], text: str) -> _S:
        text = text.strip()
        head, *items = text.split(":")
        paradigm, plus, compressor = head.strip().partition("+")
        if paradigm not in available() or (plus and compressor not in COMPRESSORS[1:]):
            raise OptionError(cls.OPTION, text, f"PARADIGM[+COMPRESSOR][:SETTING=VALUE...], PARADIGM one of "
                                                f"{', '.join(available())}, COMPRESSOR one of "
                                                f"{', '.join(COMPRESSORS[1:])}; e.g. gssp+gdtopk, ssp:staleness=1")
        settings: dict[str, Any] = {"paradigm": paradigm, **({"compressor": compressor} if plus else {})}
        known = {**SHARED, **specs(options_class(paradigm))}
        for item in items:
            key, eq, value = item.partition("=")
            key, value = key.strip().replace("-", "_"), value.strip()
            if not eq or not key:
                raise OptionError(cls.OPTION, text, f"{item!r}: SETTING=VALUE, e.g. ssp:staleness=1")
            if key in PER_RUN:
                raise OptionError(cls.OPTION, text, f"{key}: set per run, not by an entry")
            if key not in known:
                near = difflib.get_close_matches(key, list(known), n=1)
                raise OptionError(cls.OPTION, text, f"unknown setting {key!r}"
                                                    + (f" (did you mean {near[0]}?)" if near else "")
                                                    + f"; any train setting shared by every paradigm, or one "
                                                      f"of {paradigm}'s own (`mpips train --help`)")
            if key in settings:
                raise OptionError(cls.OPTION, text, f"{key} given twice")
            try:
                settings[key] = known[key].coerce(value)
            except ConfigError as e:
                raise OptionError(cls.OPTION, text, f"{key}: {e.allowed}") from None
            try:
                known[key].check(settings[key])
            except ConfigError as e:
                shown = key if known[key].choices is not None else f"{key}={settings[key]!r}"
                raise OptionError(cls.OPTION, text, f"{shown}: {e.allowed}") from None
        return cls(text, settings)

    @contextlib.contextmanager
    def blame(self):
        """A ConfigError of one of this entry's own settings, raised inside,
        as an OptionError naming the entry (the configuration checks values
        with the others: dylu=true only with local_mode=async)."""
        try:
            yield
        except ConfigError as e:
            if e.field in self.settings:
                raise OptionError(self.OPTION, self.name, f"{e.field}={e.value!r}: {e.allowed}") from None
            raise


def file_name(name: str) -> str:
    """An entry as part of a run directory's name: ssp:staleness=1 ->
    ssp-staleness1. Only letters, digits and `._+-` are kept, so that no name
    leaves the folder it is made in (`bsp:data_dir=../x` made a run name
    that resolved outside `--runs`, and `/abs/path` one that did not exist);
    an entry that had other characters gets a hash of its text, so that two
    such entries never share a name."""
    kept = name.replace(":", "-").replace("=", "")
    safe = re.sub(r"(?:[^A-Za-z0-9._+-]|\.\.+)+", "_", kept).strip("._") or "entry"
    if safe == kept:
        return safe
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
