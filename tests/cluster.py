"""A Slurm cluster of several nodes on this machine, to try mpips on it.

    make cluster-up                  # = python tests/cluster.py up --nodes 3 (root)
    . /tmp/mpips-clusters/mpips0/env # SLURM_CONF and the launch agent, as `up` prints
    sbatch -N 3 -n 5 jobs/bsp.slurm
    make cluster-down                # = python tests/cluster.py down

Each node is a network namespace with its own address and host name and a
slurmd of its own; slurmctld runs on this host (tests/netns.py,
tests/slurm_cluster.py; docs/multinode.md). `down` stops every cluster of
this prefix that `up` started (MPIPS_CLUSTER_PREFIX, default mpips),
jobs, daemons, namespaces and links; `status` lists them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import netns  # noqa: E402
from tests.slurm_cluster import SlurmCluster, install_slurm  # noqa: E402

STARTED_BY_UP = "started-by-cluster-up"


def up(nodes: int) -> int:
    install_slurm()
    net = netns.Network.create(nodes)
    try:
        cluster = SlurmCluster.on(net, die_with_parent=False)
        cluster.start()
    except BaseException:
        net.remove()
        raise
    # the cluster lives as long as its slurmctld (then the next set-up removes what is left)
    net.set_owner(cluster.procs["slurmctld"].pid)
    (net.root / STARTED_BY_UP).touch()
    env = net.root / "env"
    env.write_text(f"export SLURM_CONF={cluster.conf}\n"
                   f"export MPIPS_CLUSTER_AGENT={net.agent}\n")
    print(f"cluster {net.name}: {len(net.nodes)} nodes on {net.subnet} "
          f"({', '.join(f'{n.name} {n.address}' for n in net.nodes)}); slurmctld on {net.gateway}\n"
          f"  . {env}          # SLURM_CONF, for sbatch, squeue, sinfo\n"
          f"  sbatch -N {nodes} -n 5 jobs/bsp.slurm\n"
          f"  mpirun --prtemca plm_ssh_agent {net.agent} --host {net.nodes[0].name},{net.nodes[-1].name} ...\n"
          f"  make cluster-down")
    return 0


def down() -> int:
    pre = netns.prefix()
    stopped = []
    for name in sorted(netns.clusters(pre)):
        if (netns.STATE / name / STARTED_BY_UP).exists() or not netns.owner_alive(name):
            netns.remove_cluster(name)
            stopped.append(name)
    print(f"stopped: {', '.join(stopped)}" if stopped else f"no cluster of prefix {pre!r} to stop")
    return 0


def status() -> int:
    pre = netns.prefix()
    names = sorted(netns.clusters(pre))
    for name in names:
        alive = "running" if netns.owner_alive(name) else "left over (owner gone)"
        nodes = sorted(ns for ns in netns.namespaces(pre) if ns.startswith(f"{name}n"))
        print(f"{name}: {alive}; nodes {', '.join(nodes) or 'none'}")
    if not names:
        print(f"no cluster of prefix {pre!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a cluster")
    p_up.add_argument("--nodes", type=int, default=3)
    sub.add_parser("down", help="stop the clusters `up` started, and leftovers of this prefix")
    sub.add_parser("status", help="list this prefix's clusters")
    args = parser.parse_args(argv)
    try:
        return up(args.nodes) if args.command == "up" else down() if args.command == "down" else status()
    except (netns.NetworkError, RuntimeError) as e:
        print(f"cluster: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
