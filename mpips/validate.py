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
