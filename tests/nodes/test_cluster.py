"""The test cluster itself (conftest.py): nodes with host names of their
own, one slurmd each, reachable from each other, and the two launchers
that start ranks across them: Slurm's, and mpirun's without Slurm."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mpips.experiments.launch import MPI_ENV, MPIEXEC
from tests import netns

REPO = Path(__file__).resolve().parents[2]
# a process that makes a cluster of two nodes, says its name, and waits to be killed
CRASHING = "from tests.netns import Network; print(Network.create(2).name, flush=True); import time; time.sleep(600)"

RANKS = ("from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; "
         "print(f'rank {c.Get_rank()} of {c.Get_size()} on {socket.gethostname()} sum {c.allreduce(c.Get_rank())}', flush=True)")


def test_one_slurmd_per_node_each_its_own_host(cluster):
    r = cluster.run("srun", "-N", str(len(cluster.nodes)), "--ntasks-per-node=1", "hostname", timeout=60)
    assert sorted(r.stdout.split()) == sorted(n.name for n in cluster.nodes), r


def test_mpirun_across_nodes_without_slurm(cluster, tmp_path):
    """Open MPI's mpirun on this host, its daemons started on the nodes by the
    cluster's ssh stand-in (netns.Network.agent): a rank on every node, and a
    collective across them over TCP."""
    net = cluster.network
    env = {**os.environ, **MPI_ENV, "OMPI_MCA_btl": "self,sm,tcp"}
    r = subprocess.run([MPIEXEC, "--prtemca", "plm_ssh_agent", str(net.agent), "--host",
                        ",".join(n.name for n in net.nodes), "--map-by", "node", "-n", str(len(net.nodes)),
                        sys.executable, "-c", RANKS], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(net.nodes)
    lines = sorted(re.findall(r"^rank (\d+) of (\d+) on (\S+) sum (\d+)$", r.stdout, re.M))
    assert [int(x[0]) for x in lines] == list(range(n)), r.stdout
    assert {x[2] for x in lines} == {node.name for node in net.nodes}, r.stdout
    assert {int(x[3]) for x in lines} == {n * (n - 1) // 2}, r.stdout


def test_a_crashed_runs_leftovers_are_removed_and_nothing_else(cluster):
    """Namespaces and links outlive the process that made them: a cluster
    whose owner was killed outright is removed by the next set-up of its
    prefix, while a live cluster of the prefix (this session's) and a
    crashed one of another prefix are left alone."""
    def crashed(prefix: str) -> str:
        p = subprocess.Popen([sys.executable, "-c", CRASHING], stdout=subprocess.PIPE, text=True, cwd=REPO,
                             env={**os.environ, netns.PREFIX_ENV: prefix})
        name = p.stdout.readline().strip()
        p.kill()
        p.wait()
        return name

    ours, theirs = netns.prefix(), "mpipsoth"
    mine, other = crashed(ours), crashed(theirs)
    try:
        assert mine in netns.leftovers(ours)["clusters"]
        assert len(netns.leftovers(ours)["namespaces"]) == 2
        fresh = netns.Network.create(1)
        fresh.remove()
        assert not any(netns.leftovers(ours).values()), netns.leftovers(ours)
        assert {n.name for n in cluster.network.nodes} <= netns.namespaces(ours)   # alive: untouched
        assert other in netns.leftovers(theirs)["clusters"]                          # not our prefix
        assert len(netns.leftovers(theirs)["namespaces"]) == 2
    finally:
        netns.remove_leftovers(theirs)
        netns.remove_leftovers(ours)
