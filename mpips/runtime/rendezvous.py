"""Exchanges of every rank (set-up, the end of the run) that cannot hang.

Before the run, ranks exchange what each found (a bad input, the shapes of
its model and data). A blocking `allgather` there waits forever for a rank
that is stuck in a user's model factory, stopped, or gone its own way after
an error only it saw. `allgather_within` gathers at rank 0 by point-to-point
messages, polled with backoff (runtime/wait.py), so rank 0 knows which ranks
have not arrived and names them after `timeout` seconds; every other rank
waits for rank 0's answer the same way, longer (so that rank 0 names the
missing rank first, unless it is the one stuck). A SetupTimeout ends the job
(`comm.Abort`: the missing rank cannot take part in an orderly exit).
"""
from __future__ import annotations

from .wait import StallError, wait_until

_UP, _DOWN = 0x6D70, 0x6D71   # tags: to rank 0, from it (nothing else sends on these)


class SetupTimeout(RuntimeError):
    """A rank did not arrive at an exchange; `str()` is one line naming it
    (`missing`: the ranks, as rank 0 saw them; empty on the other ranks).
    `status`: the job's exit status (2 in set-up: nothing ran; 1 at the end)."""

    def __init__(self, message: str, missing: list[int] | None = None, status: int = 2):
        super().__init__(message)
        self.missing = missing or []
        self.status = status


def allgather_within(comm, value, *, what: str, warn: float, timeout: float, name=str) -> list:
    """Every rank's `value`, in rank order, on every rank; SetupTimeout naming
    the ranks that did not arrive within `timeout` seconds (`name(rank)`: how
    to call one)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return [value]
    if rank == 0:
        got = {0: value}

        def arrived():
            for r in range(1, size):
                if r not in got:
                    message = comm.improbe(source=r, tag=_UP)
                    if message is not None:
                        got[r] = message.recv()
            return len(got) == size

        def missing():
            return [r for r in range(size) if r not in got]

        def named():
            return "rank(s) " + ", ".join(name(r) for r in missing())

        try:
            wait_until(arrived, what=what, describe=named, warn=warn, timeout=timeout)
        except StallError:
            raise SetupTimeout(f"{what}: {named()} did not arrive within {timeout:g}s "
                               f"(stall_timeout): stuck, stopped or gone", missing()) from None
        everyone = [got[r] for r in range(size)]
        for request in [comm.isend(everyone, dest=r, tag=_DOWN) for r in range(1, size)]:
            request.wait()   # every rank arrived: each is waiting for this
        return everyone
    sent = comm.isend(value, dest=0, tag=_UP)
    answer = []

    def answered():
        message = comm.improbe(source=0, tag=_DOWN)
        if message is not None:
            answer.append(message.recv())
        return bool(answer)

    # Rank 0 names the ranks it misses first; the others speak only if rank 0 itself is stuck.
    patience = 2 * timeout + 10
    try:
        wait_until(answered, what=f"rank {rank}: {what}", describe=lambda: "rank 0", warn=patience, timeout=patience)
    except StallError:
        raise SetupTimeout(f"rank {rank}: {what}: rank 0 did not answer within {patience:g}s "
                           f"(twice the stall_timeout and 10s)") from None
    sent.wait()
    return answer[0]
