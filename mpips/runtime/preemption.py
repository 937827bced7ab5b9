"""The preemption signal (SIGUSR1), remembered from the moment the process starts.

Slurm sends it (`--signal=B:USR1@T`) whenever the time limit nears, which
may be while the job is still starting: importing torch and setting up
take seconds. A signal then must neither kill the rank (the default action
of SIGUSR1) nor be lost: `remember()` is the first thing `python -m mpips`
does, and the trainer's checkpointer (mpips/runtime/checkpointer.py) acts on
`received()` at its first chance. Standard library only, so that it is in
place before anything heavy is imported.
"""
from __future__ import annotations

import signal
import threading

_received = False


def _handle(signum, frame) -> None:
    global _received
    _received = True


def remember() -> None:
    """From now on SIGUSR1 sets the flag (only the main thread may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, _handle)


def received() -> bool:
    return _received


def clear() -> None:
    """After the checkpoint it asked for: a later run in this process starts clean."""
    global _received
    _received = False
