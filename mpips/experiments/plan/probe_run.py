"""`mpips plan` under a launcher: the probe on every rank of the launch
(probe.py), then rank 0 plans while the others wait, and the launch ends
together.

The others wait for rank 0's word that the plan has ended, asleep (a plan
may take hours; rank 0 failing ends the launch under the launcher), and
leave at once on a stop signal. Rank 0 then hears from every one of them
within the stall timeout, or names those it did not hear from and ends the
launch: a rank stopped after the probe left rank 0 waiting at its final
barrier for good, the plan printed."""
from __future__ import annotations

import os
import signal
import sys
import time
import traceback

from ...config import Config, ConfigError
from ...runtime.recovery import preemption

DONE = 71    # tag: rank 0's status, the plan ended
BYE = 72     # tag: a rank heard it


class ProbeFailed(Exception):
    """The probe could not run; `rank`: this rank (0 says why)."""

    def __init__(self, message: str, rank: int):
        super().__init__(message)
        self.rank = rank


class ProbeStopped(Exception):
    """A stop signal ended the probe, on every rank (after the runs' checkpoint)."""

    def __init__(self, signum: int):
        super().__init__(f"the plan stopped on {signal.Signals(signum).name} during the probe "
                         f"(a plan probes again from the start)")
        self.signum = signum


def communicator(comm):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() < 2:
        raise ConfigError("profile", None, "give --profile FILE, or probe the cluster: start the plan with "
                                           "your launcher, mpirun -n SERVERS+WORKERS python -m mpips plan ...")
    return comm


def probe(config: Config, comm, args, out: str) -> str | None:
    """Probe the cluster on every rank (probe.py); rank 0 writes
    OUT/cluster.yaml and gets its path, the other ranks None (they then
    wait_for_plan)."""
    from ...runtime.job.train import SetupError, TrainingFailed
    from ...runtime.recovery.checkpointer import Preempted
    from .. import profile as cluster
    from ..probe import probe_settings, run_probe

    rank = comm.Get_rank()
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        runs = probe_settings(config, args.probe_seconds, os.path.join(out, "probe"))
        print(f"mpips plan: probing the cluster, {comm.Get_size()} ranks: {len(runs)} runs of "
              f"{runs[0].time_limit:g} s of training each ("
              + ", ".join(f"{c.paradigm.upper()} at batch {c.batch_size}" for c in runs) + ")", flush=True)
    try:
        found = run_probe(config, comm, seconds=args.probe_seconds, out=os.path.join(out, "probe"))
    except (ConfigError, SetupError, TrainingFailed) as e:   # the same on every rank
        raise ProbeFailed(f"the probe: {e}", rank) from None
    except Preempted as e:   # every rank stopped after the same checkpoint (which cleared the flag)
        raise ProbeStopped(signal.SIGUSR1 if e.status == preemption.PREEMPTED_EXIT else e.status - 128) from None
    except BaseException:   # noqa: BLE001 - one rank's failure must end every rank of the launch
        traceback.print_exc()
        comm.Abort(1)
    if rank != 0:
        return None
    path = os.path.join(out, "cluster.yaml")
    assert found is not None   # (rank 0's fit)
    cluster.save(found, path, comment=f"probed by: {' '.join(sys.argv)}\n{comm.Get_size()} ranks, "
                                      f"{args.probe_seconds:g} s, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"mpips plan: the cluster's profile: {path}", flush=True)
    return path


def wait_for_plan(comm) -> int:
    """A rank but 0, after the probe: asleep until rank 0's plan ends (its
    status, which this rank exits with) or a stop signal comes (128 + it);
    then rank 0 hears from it."""
    while True:
        message = comm.improbe(source=0, tag=DONE)
        if message is not None:
            status = int(message.recv())
            break
        if preemption.received():
            return 128 + preemption.which()
        time.sleep(0.1)   # (a plan takes minutes to hours: no faster poll is of use)
    comm.isend(comm.Get_rank(), dest=0, tag=BYE).wait()
    return status


def release(comm, status: int, *, timeout: float, hear: bool = True) -> None:
    """Rank 0, the plan ended with `status`: every other rank told, and (unless
    `hear` is False: a stop signal, which the launcher gave every rank) heard
    from within `timeout` seconds; the ranks not heard from are named and the
    launch ended (they cannot take part in an orderly exit)."""
    from ...runtime.transport.wait import StallError, wait_until

    others = range(1, comm.Get_size())
    for request in [comm.isend(status, dest=r, tag=DONE) for r in others]:
        request.wait()   # (a small message: sent whether or not its rank listens)
    if not hear:
        return
    heard: set[int] = set()

    def everyone() -> bool:
        for r in others:
            if r not in heard and (message := comm.improbe(source=r, tag=BYE)) is not None:
                message.recv()
                heard.add(r)
        return len(heard) == len(others)

    def missing() -> str:
        return "rank(s) " + ", ".join(str(r) for r in others if r not in heard)

    try:
        wait_until(everyone, what="the plan's end", describe=missing, warn=timeout, timeout=timeout)
    except StallError:
        print(f"mpips: error: the plan has ended, but {missing()} of the probe did not within {timeout:g} s "
              f"(stall_timeout): stuck, stopped or gone; ending the launch", file=sys.stderr, flush=True)
        comm.Abort(1)
