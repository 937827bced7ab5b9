"""The signals that stop a training job, remembered from the moment the process starts.

SIGUSR1 asks for a checkpoint and an exit to be requeued: Slurm sends it
(`--signal=B:USR1@T`) whenever the time limit nears, which may be while the
job is still starting: importing torch and setting up take seconds. A
signal then must neither kill the rank (the default action of SIGUSR1) nor
be lost: `remember()` is the first thing `python -m mpips` does, and the
trainer's checkpointer (mpips/runtime/recovery/checkpointer.py) acts on `received()`
at its first chance. SIGTERM and SIGINT (scancel, a time limit, Ctrl-C)
stop the job the same way, after a checkpoint, but are not requeued: the
job exits 128 + the signal's number (`exit_status`). However many come, the
first decides, and one checkpoint is taken. Once the job has ended,
`ignore()` keeps late ones from killing the rank on its way out (Python puts
back the default action of its handlers as it exits: a USR1 then ended a
preempted rank with signal 10, exit 138, and it was not requeued).
Standard library only, so that it is in place before anything heavy is imported.
"""
from __future__ import annotations

import contextlib
import signal
import threading

PREEMPTED_EXIT = 3       # "checkpointed, not finished": jobs/common.sh requeues
STOPS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_received = 0            # the first stop signal received, 0 if none


def _handle(signum, frame) -> None:
    global _received
    if not _received:
        _received = signum


def remember(*signals: int) -> None:
    """From now on these signals (default SIGUSR1) set the flag (only the main
    thread may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        for s in signals or (signal.SIGUSR1,):
            signal.signal(s, _handle)


def ignore() -> None:
    """The job has ended: a stop signal from now on changes nothing."""
    if threading.current_thread() is threading.main_thread():
        for s in STOPS:
            signal.signal(s, signal.SIG_IGN)


def received() -> bool:
    return bool(_received)


def which() -> int:
    return _received


def exit_status(signum: int) -> int:
    """The job's status after the checkpoint `signum` asked for."""
    return PREEMPTED_EXIT if signum in (0, signal.SIGUSR1) else 128 + signum


def clear() -> None:
    """After the checkpoint it asked for: a later run in this process starts clean."""
    global _received
    _received = 0


@contextlib.contextmanager
def remembered():
    """Inside, the stop signals set the flag (`mpips compare`, `plan`,
    `syncswitch-search`: they end their runs and exit 128 + the signal);
    after, the handlers before are back and the flag is clear (a command
    run in a process that goes on: mpips.cli.main from a test or a script)."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in STOPS} if main else {}
    remember(*STOPS)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        clear()
