"""Writes that leave a file whole or as it was.

A full disk. A write that finds it full raises DiskFull, one line naming
the file, and leaves every file as it was before: run.h5 (and a checkpoint)
is built in memory and written under a temporary name renamed over it
(`written_whole`), and a rank log writes a flush only where the disk holds
it (`writer.RankLog._room`). HDF5 (2.0) that ran out of space itself wrote a
table's new length and not its rows (read back as zeros), left run.h5 that
no tool could open, and crashed the process when it closed the file.
"""
from __future__ import annotations

import errno
import io
import os
import re
from contextlib import contextmanager

import h5py


class DiskFull(OSError):
    """A write that found no space left on its disk (or its quota spent).
    `str()` is one line naming the file."""

    def __init__(self, path: str, detail: str = os.strerror(errno.ENOSPC)):
        self.path = path
        super().__init__(f"disk full writing {path}: {detail}")


_FULL = (errno.ENOSPC, errno.EDQUOT)


def _full(e: BaseException) -> int:
    """The errno of a full disk behind `e`, or 0: an OSError's own, or the one
    HDF5 puts in its message (h5py raises a RuntimeError for a failed flush)."""
    if isinstance(e, OSError) and e.errno in _FULL:
        return e.errno
    found = re.search(r"errno = (\d+)", str(e))
    return int(found.group(1)) if found and int(found.group(1)) in _FULL else 0


@contextmanager
def writing(path: str):
    """Writes to `path` inside: one that finds the disk full is DiskFull, one
    line naming the file (h5py's message is HDF5's internals, over lines)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        code = _full(e)
        if not code:
            raise
        raise DiskFull(path, os.strerror(code)) from None


@contextmanager
def written_whole(path: str, tmp: str, *, changing: bool = False):
    """An HDF5 file (h5py.File) to fill in, built in memory (`changing`: from
    `path` as it is, if it is there), then written to `tmp`, synced and
    renamed over `path`: atomic, so a reader, or a job killed meanwhile,
    finds the file before or after; a write that fails removes `tmp` (a
    partial file, and the space a full disk needs back). HDF5 never writes
    to the disk itself (see above)."""
    image = io.BytesIO()
    if changing and os.path.exists(path):
        with open(path, "rb") as fh:
            image.write(fh.read())
    with h5py.File(image, "a", libver="latest") as f:   # (latest: its metadata checksummed)
        yield f
    try:
        with writing(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(image.getbuffer())
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
