"""Files given to `--plugin`: run first, on every rank, so that what they
register (a paradigm) is a valid choice; and where in one an error was
raised, the line its author needs (not the line of mpips that called it)."""
from __future__ import annotations

import importlib.util
import os
import sys

PREFIX = "mpips_plugin_"   # a plugin's module name: PREFIX + its file's stem


class PluginError(Exception):
    pass


def load_plugins(paths: list[str]) -> None:
    """Run each file as a module (its own name, mpips_plugin_<stem>), before
    the configuration is read, so what it registers is a valid choice."""
    for path in paths:
        stem = os.path.splitext(os.path.basename(path))[0]
        name = PREFIX + "".join(c if c.isalnum() else "_" for c in stem)
        if not os.path.isfile(path):
            raise PluginError(f"plugin {path}: no such file")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:   # (a .py file always has one)
            raise PluginError(f"plugin {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - the user's file may raise anything
            del sys.modules[name]
            where: tuple[str, int | None] | None = _frame(e)
            if isinstance(e, SyntaxError) and e.filename == path:   # it does not compile: no frame of its own
                where = (path, e.lineno)
            at = f" at line {where[1]}" if where else ""
            raise PluginError(f"plugin {path} failed{at}: "
                              f"{type(e).__name__}: {' '.join(str(e).split())}") from None


def _frame(e: BaseException) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of `e`'s traceback in a plugin, or None."""
    found, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith(PREFIX):
            found = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def raised_in_plugin(e: BaseException) -> str:
    """' (plugin FILE, line N)' where a plugin raised `e` (a hook of its paradigm
    during a run), else ''."""
    where = _frame(e)
    return f" (plugin {where[0]}, line {where[1]})" if where else ""
