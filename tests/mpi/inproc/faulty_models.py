"""Users' model functions (`--model faulty_models:NAME`) that cannot train (or not alike on every rank)."""
from torch import nn


def frozen(input_shape, num_classes):
    """No trainable parameter."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def one_argument(input_shape):
    """The wrong signature: models are called with (input_shape, num_classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def five_classes(input_shape, num_classes):
    """Fewer scores than the dataset has classes."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 5))


def by_rank(input_shape, num_classes):
    """A factory that builds a wider model on rank 2 than on the others."""
    from mpi4py import MPI

    width = 24 if MPI.COMM_WORLD.Get_rank() == 2 else 16
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, num_classes))


def stuck_on_rank_2(input_shape, num_classes):
    """A factory that never returns on rank 2 (a stuck filesystem, a deadlock of the user's)."""
    import time

    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 2:
        time.sleep(3600)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))


def stops_in_a_collective_on_rank_2(input_shape, num_classes):
    """Rank 2 stops itself (SIGSTOP: a node swapping, a cgroup freeze) as it
    enters the next of MPI's own blocking collectives of the set-up (the
    split by node), where every other rank then waits for it: beyond any
    exchange of mpips' own, which names a rank that never arrives."""
    import os
    import signal

    from mpi4py import MPI

    from mpips.runtime.transport.mpi import MPITransport

    if MPI.COMM_WORLD.Get_rank() == 2:
        split = MPITransport.on_this_node

        def stop_first(self, value):
            os.kill(os.getpid(), signal.SIGSTOP)
            return split(self, value)
        MPITransport.on_this_node = stop_first
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
