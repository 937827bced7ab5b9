"""`mpips plan`'s probe across the nodes of the test cluster (conftest.py),
started as a user would under `sbatch -N 3`: the profile it writes has a
link per node (mpips/experiments/probe.py's fit_links), and the node whose
link is shaped to a tenth of the others' has the slowest."""
from __future__ import annotations

from pathlib import Path

from mpips.experiments import profile
from mpips.io.log import RunLog

REPO = Path(__file__).resolve().parents[2]


def test_the_probe_fits_each_node_s_link_and_a_slower_link_is_the_slowest(cluster, tmp_path, shaped):
    nodes = [n.name for n in cluster.nodes]
    slow = nodes[-1]   # Slurm fills the first node first: the server's is nodes[0]
    shaped({**{n: "100mbit" for n in nodes}, slow: "10mbit"})
    out = tmp_path / "plan"
    script = tmp_path / "probe.slurm"
    script.write_text(f"#!/bin/bash\nsource {REPO}/jobs/common.sh\n"
                      f'mpips_launch "$SLURM_NTASKS" "$MPIPS_PYTHON" -m mpips plan --probe-only --probe-seconds 60 '
                      f"--stall-timeout 300 --out {out}\n")
    job = cluster.submit(script, args=["-N", "3", "-n", "5", "--output", str(tmp_path / "probe.out")],
                         cwd=tmp_path)
    state = cluster.wait(job, timeout=600)
    said = (tmp_path / "probe.out").read_text(errors="replace")
    assert state == "COMPLETED", cluster.describe(job) + said[-3000:]
    assert "fewer than" not in said and "one network" not in said, said[-3000:]
    found = profile.load(str(out / "cluster.yaml"))
    first = sorted(p for p in (out / "probe").iterdir() if p.is_dir())[0]
    hosts = list(RunLog(str(first)).by_node())
    assert sorted(hosts) == sorted(nodes) and len(found.nodes) == 3, (hosts, found.nodes)
    bandwidth = {host: node.bandwidth for host, node in zip(hosts, found.nodes)}
    assert min(bandwidth, key=bandwidth.get) == slow, bandwidth
