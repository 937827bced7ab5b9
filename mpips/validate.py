"""What a bad setting is, and reading one value as a type: shared by the
configuration and everything that checks a setting of its own (paradigms,
their options, compressors, predictors), which must not import the
configuration (it imports them, for their lists of names)."""
from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable


class ConfigError(ValueError):
    """A bad setting. `str()` is one line naming the field and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = name, value, allowed
        super().__init__(f"invalid {name}={value!r}: {allowed}")


class StopSignal(BaseException):
    """A stop signal that mpips handles (SIGTERM, SIGINT, SIGUSR1), raised
    where it ends the work at once (the simulator): never the failure of
    the code it interrupts, a user's function included."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def user_code(name: str, value: Any, what: str, form: str = "{what} failed: {error}"):
    """Around a call of a user's code (--model, --dataset, mpips.train's
    objects): whatever it raises is a ConfigError naming the setting and
    `what` failed, BaseException too (a SystemExit(0) in a dataset function
    ended `mpips simulate` with status 0 and no run), but a stop: a signal
    mpips handles (StopSignal: it keeps its status, 143, 130, 138; it was
    "invalid dataset") or Ctrl-C where Python's own handler raises it."""
    try:
        yield
    except (StopSignal, KeyboardInterrupt):
        raise
    except BaseException as e:  # noqa: BLE001 - the user's code may raise anything
        raise ConfigError(name, value, form.format(what=what, error=one_line(e))) from None


def one_line(e: BaseException) -> str:
    """An exception as `Type: message` on one line (a user's code may raise anything)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def function_name(name: str, text: str, allowed: str) -> tuple[str, str]:
    """A `package.module:function` setting as (module, function), or a ConfigError naming `name`."""
    module, _, function = text.partition(":")
    if not module or not function or ":" in function:
        raise ConfigError(name, text, allowed)
    return module, function


def user_function(name: str, text: str, allowed: str) -> Callable:
    """The function a `package.module:function` setting `name` names (--model,
    --dataset), imported; a one-line ConfigError naming `name` when it cannot be."""
    module_name, function = function_name(name, text, allowed)
    with user_code(name, text, module_name, "cannot import {what} ({error})"):   # (its code runs)
        module = importlib.import_module(module_name)
    found = getattr(module, function, None)
    if not callable(found):
        raise ConfigError(name, text, f"module {module_name} has no function {function}")
    return found


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
