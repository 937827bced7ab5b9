"""Settings of the MPI library that a rank makes before MPI starts."""
from __future__ import annotations

import os

RDMA_DEVICES = "/sys/class/infiniband"   # InfiniBand and RoCE adapters (Linux)


def quiet_ucx(environ=os.environ, devices: str = RDMA_DEVICES) -> bool:
    """Turn off Open MPI's UCX one-sided component on a node without an RDMA
    device, unless OMPI_MCA_osc is set already; True if it did. There UCX has
    no transport to give it: its query fails and printed "Error: OSC UCX
    component priority set inside component query failed" at every window
    (25 lines a job) before Open MPI went on with osc/rdma anyway. On a node
    with InfiniBand or RoCE, UCX is the RDMA path: left alone."""
    if "OMPI_MCA_osc" in environ:
        return False
    try:
        if os.listdir(devices):
            return False
    except OSError:
        pass   # no such class: no RDMA device
    environ["OMPI_MCA_osc"] = "^ucx"
    return True
