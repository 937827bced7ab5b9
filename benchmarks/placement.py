"""Pull + push across nodes by placement (`--placement`): are the servers
better spread one per node, or packed on the first ranks?

    sudo -E flock -x /tmp/mpips-measure.lock .venv/bin/python benchmarks/placement.py

A BSP job of 3 servers + 3 workers (the MLP on mnist5k, 437,544 bytes a
pull or push in three shards; `--device-time 20ms`, so the workers sleep
rather than compute) on 3 network-namespace nodes (tests/netns.py), two
ranks on each, the first node's first (Slurm's block distribution):

- packed (the launcher's order): servers 0, 1 on the first node, server 2
  beside worker 0 on the second, workers 1, 2 on the third: the first
  node's link carries two thirds of every worker's pull and push;
- spread: one server and one worker on each node: each link carries a third.

Every node's link shaped (tc tbf, both directions: `Network.shape`) to
1 Gbit/s, or left as the bridge makes it; Open MPI over TCP, the servers'
progress thread on (the default across nodes). Placements and shapes
interleaved repeat by repeat. Per run: the median pull + push of the
workers' iterations (the first 5 of each left out), and the bytes the
busiest node's link sends in one BSP round (pull: the shards its servers
send to workers on other nodes) against the rate: the limit a placement
sets. Results: results/placement.{json,md}.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

from common import table, write_results
from links import arguments, measured, tcp_rate

from mpips.analysis.placement import nodes_label
from tests.netns import Network, bits_per_second

SHAPES = (("unshaped", None), ("1 Gbit/s", "1gbit"))
PLACEMENTS = ("packed", "spread")
SERVERS = 3
JOB = ("--paradigm", "bsp", "--servers", str(SERVERS), "--workers", "3", "--dataset", "mnist5k",
       "--device-time", "20ms", "--eval-every", "100")


def _error_line(output: str) -> str:
    """mpips' one-line error in a failed run's output, or its last line."""
    lines = [line for line in output.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("mpips: error")), lines[-1] if lines else "")


def busiest_link_bytes(placement: list[dict], nbytes: int) -> int:
    """The most bytes one node's link sends in a round of pulls: each server's
    shard to every worker on another node."""
    hosts = {(p["role"], p["index"]): p["host"] for p in placement}
    workers = Counter(h for (role, _), h in hosts.items() if role == "worker")
    sent = Counter({h: 0 for h in hosts.values()})
    for (role, _), host in hosts.items():
        if role == "server":
            sent[host] += nbytes // SERVERS * (sum(workers.values()) - workers[host])
    return max(sent.values())


def shape_label(placement: list[dict]) -> str:
    """The roles on each node, as `mpips summarize` says them: '3 nodes: 2S, S+W, 2W'."""
    by_node: dict[str, list[dict]] = {}
    for p in placement:
        by_node.setdefault(p["host"], []).append(p)
    return nodes_label(by_node)


def main() -> int:
    args = arguments(__doc__, "placement", 3)
    runs = Path(args.runs)
    results: dict[tuple[str, str], list[dict]] = {(s, pl): [] for s, _ in SHAPES for pl in PLACEMENTS}
    rates: dict[str, list[float]] = {name: [] for name, _ in SHAPES}
    failed: dict[tuple[str, str], list[str]] = {key: [] for key in results}
    net = Network.create(3)
    try:
        for repeat in range(args.repeats):
            for name, rate in SHAPES:
                for node in net.nodes:
                    net.shape(node, rate)
                rates[name].append(tcp_rate(net, net.nodes[1], net.nodes[0]))
                for placement in PLACEMENTS if repeat % 2 == 0 else reversed(PLACEMENTS):
                    run_dir = runs / f"{name.split()[0]}-{placement}-{repeat}"
                    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                    try:
                        got = measured(net, args.iterations, run_dir, (*JOB, "--placement", placement), slots=2)
                    except RuntimeError as e:   # a run that hung or failed is a result too, not the end
                        failed[name, placement].append(str(e).splitlines()[0] + ": " + _error_line(str(e)))
                        print(f"{name:9} {placement:6} repeat {repeat}: FAILED {failed[name, placement][-1]}",
                              flush=True)
                        continue
                    results[name, placement].append(got)
                    print(f"{name:9} {placement:6} repeat {repeat}: pull + push {got['pull_push_ms']:.2f} ms "
                          f"(pull {got['pull_ms']:.2f}, push {got['push_ms']:.2f}); {shape_label(got['placement'])}",
                          flush=True)
    finally:
        net.remove()
    rows, data = [], []
    for name, rate in SHAPES:
        tcp = statistics.median(rates[name])
        packed_runs = [r["pull_push_ms"] for r in results[name, "packed"]]
        packed = statistics.median(packed_runs) if packed_runs else float("nan")
        for placement in PLACEMENTS:
            got = results[name, placement]
            if not got:
                continue
            nbytes = got[0]["bytes"]
            busiest = busiest_link_bytes(got[0]["placement"], nbytes)
            real = statistics.median(r["pull_push_ms"] for r in got)
            limit_ms = 2e3 * busiest / (bits_per_second(rate) / 8 if rate else tcp)
            row = {"shape": name, "placement": placement, "nodes": shape_label(got[0]["placement"]),
                   "tc_rate_bits": bits_per_second(rate) if rate else None, "tcp_rate_bytes_per_s": tcp,
                   "bytes_per_transfer": nbytes, "busiest_link_bytes_per_pull": busiest,
                   "pull_push_ms": real, "runs_pull_push_ms": [r["pull_push_ms"] for r in got],
                   "pull_ms": statistics.median(r["pull_ms"] for r in got),
                   "push_ms": statistics.median(r["push_ms"] for r in got),
                   "busiest_link_limit_ms": limit_ms, "vs_packed": real / packed,
                   "failed_runs": failed[name, placement]}
            data.append(row)
            rows.append([name, placement, row["nodes"], busiest, limit_ms, real,
                         ", ".join([f"{x:.2f}" for x in row["runs_pull_push_ms"]]
                                   + ["failed"] * len(failed[name, placement])), row["pull_ms"], row["push_ms"],
                         f"{real / packed:.2f}"])
    markdown = table(["nodes' links", "placement", "roles by node", "busiest link's bytes a pull",
                      "its limit, x 2 / rate (ms)", "pull + push (ms, median)", "runs", "pull (ms)", "push (ms)",
                      "x packed"], rows)
    markdown += (f"\n\nBSP, {SERVERS} servers + 3 workers, 2 ranks on each of 3 nodes; {args.iterations} iterations a "
                 f"worker, {args.repeats} runs a row (medians of each run's workers' iterations, then of the runs); "
                 f"TCP stream through a link: " + ", ".join(f"{n} {statistics.median(rates[n]) * 8e-9:.2f} Gbit/s"
                                                            for n, _ in SHAPES) + ".\n")
    write_results("placement", {"iterations": args.iterations, "repeats": args.repeats, "rows": data}, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
