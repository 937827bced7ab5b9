"""Give a fresh venv this venv's torch, and what torch needs, by hard links.

    python tests/link_torch.py VENV

`make install` unpacked the pinned torch wheel into .venv once; the other
venvs of `make test` (.venv-mpich for test-portability, the install test's)
would each unpack and byte-compile the same wheel again, about a minute on
2 cores. Linking its files (a copy where VENV is on another file system),
dist-info included, gives the same installed distribution: pip sees torch
as installed and resolves everything else itself.
"""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from importlib.metadata import distribution, distributions
from pathlib import Path

from packaging.requirements import Requirement


def key(dist) -> str:
    return dist.metadata["Name"].lower().replace("_", "-")


def closure(name: str, skip: set) -> list:
    """The distribution `name` and every one it requires (markers as here),
    once each, but those named in `skip` (already installed there)."""
    seen, todo = {}, [name]
    while todo:
        dist = distribution(todo.pop())
        if key(dist) in seen or key(dist) in skip:
            continue
        seen[key(dist)] = dist
        for spec in dist.requires or ():
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def link_into(venv: Path, name: str = "torch") -> int:
    """Link the files of `name`'s closure into venv's site-packages; the number linked."""
    here = Path(sysconfig.get_paths()["purelib"])
    there = venv / Path(sysconfig.get_paths()["purelib"]).relative_to(sys.prefix)
    installed = {key(d) for d in distributions(path=[str(there)])}
    count = 0
    for dist in closure(name, installed):
        for f in dist.files or ():
            if f.parts[0] == "..":    # a console script in bin/: not needed
                continue
            src, dst = here / f, there / f
            if not src.is_file():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:           # another file system
                shutil.copy2(src, dst)
            count += 1
    return count


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "bin" / "python").exists():
        sys.exit("usage: python tests/link_torch.py VENV   (an existing venv)")
    print(f"linked {link_into(Path(sys.argv[1]))} files of torch and its requirements into {sys.argv[1]}")
