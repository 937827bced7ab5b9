"""A folder a command writes into (a run directory; compare's --runs and
--out, syncswitch-search's and plan's --out), made and tried before any
work: a path that is a file, a read-only place or /proc is one line at the
start, not a traceback once the runs are done (compare wrote its figures
last, and a bad --out lost the table of every run)."""
from __future__ import annotations

import os


def folder_problem(path: str) -> str:
    """'' where `path` is a folder (made if missing) that takes a new file;
    else why not, in a few words."""
    if os.path.exists(path) and not os.path.isdir(path):
        return "a file, not a folder"
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".mpips-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        return e.strerror or str(e)
    return ""
