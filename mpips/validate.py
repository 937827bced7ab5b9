"""What a bad setting is, and reading one value as a type: shared by the
configuration and everything that checks a setting of its own (paradigms,
their options, compressors, predictors), which must not import the
configuration (it imports them, for their lists of names)."""
from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A bad setting. `str()` is one line naming the field and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str):
        self.field = name
        super().__init__(f"invalid {name}={value!r}: {allowed}")


def coerce_to(t: type, name: str, value: Any, shown: Any = None) -> Any:
    """`value` as type `t`, or a ConfigError naming `name` (showing `shown`, default the value)."""
    shown = value if shown is None else shown
    if isinstance(value, t) and not (t is int and isinstance(value, bool)):
        return value
    if isinstance(value, bool):
        # YAML `batch_size: true` is not 1
        raise ConfigError(name, shown, f"must be of type {t.__name__}, not a boolean")
    try:
        if t is bool:
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if t is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        if t is str:
            return str(value)
        return t(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(name, shown, f"must be of type {t.__name__}") from None


def number_in(low: float, high: float, *, low_open: bool = False):
    """An argparse `type` for a command's own numeric option: a finite number in
    [low, high] (low excluded with `low_open`); NaN, inf or a value outside is
    the usual one-line usage error naming the option (a NaN target or tolerance
    made every comparison false, silently)."""
    import math
    from argparse import ArgumentTypeError

    where = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ArgumentTypeError(f"{text!r} is not a number (a finite one in {where})") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            raise ArgumentTypeError(f"{text!r}: a finite number in {where}")
        return value

    return number
