"""A real Slurm cluster of several nodes on this machine, for the tests in
this directory: network namespaces on a bridge, one slurmd per node,
slurmctld on this host (tests/netns.py, tests/slurm_cluster.py).

The session fixture `cluster` (3 nodes, MPIPS_TEST_NODES to change) comes
up once, in about a second, and is removed at the end, also after a
failure, Ctrl-C or SIGTERM; a run killed outright leaves what the next
set-up of the prefix removes (tests/after checks that nothing is left).
"""
from __future__ import annotations

import os
import signal

import pytest

from tests.netns import Network, NetworkError
from tests.slurm_cluster import SlurmCluster, slurm_installed


@pytest.fixture(scope="session")
def cluster():
    slurm_installed()
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    # SIGTERM (a CI runner cancelling) and SIGHUP end the session as Ctrl-C does: torn down
    previous = {s: signal.signal(s, signal.default_int_handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        net = Network.create(int(os.environ.get("MPIPS_TEST_NODES", "3")))
    except NetworkError as e:
        pytest.fail(f"could not make the nodes: {e}", pytrace=False)
    try:
        # a node lost is down (its jobs requeued) 60 s after its last answer, not 300:
        # longer than test_faults' stall timeouts, so a job names a lost node first
        slurm = SlurmCluster.on(net, slurmd_timeout=60)
        try:
            slurm.start()
        except RuntimeError as e:
            pytest.fail(f"could not start Slurm on {net.name}: {e}", pytrace=False)
        yield slurm
        slurm.stop()
    finally:
        net.remove()
        for s, handler in previous.items():
            signal.signal(s, handler)


@pytest.fixture
def shaped(cluster):
    """shaped({node: rate}): links limited (tc's token bucket, both ways);
    every link unshaped again at the end."""
    yield lambda rates: [cluster.network.shape(cluster.network.node(n), r) for n, r in rates.items()]
    for node in cluster.network.nodes:
        cluster.network.shape(node, None)
