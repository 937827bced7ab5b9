"""Fingerprints of what the runtime computes, to show that a refactoring of
mpips/runtime changed no result (issue #37).

Every paradigm (and GSSP with GDTopK) simulated on one heterogeneous
8-worker job with an evaluator and 2 servers: a sha256 of the final parameters
and of each of the iterations, applies, evaluations and exchanges tables (in virtual time every column is deterministic). Plus one
MPI BSP job with 2 servers, whose final parameters are bit-reproducible (a
round is summed in a fixed order). Writes results/runtime_fingerprints.{json,md};
`--check` compares a new run with the committed json instead and exits 1 on
any difference.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

from common import MPI_ENV, MPIEXEC, RESULTS, table, write_results

from mpips.io.log import RunLog
from mpips.paradigms import available

NAME = "runtime_fingerprints"
MIX = ["--slowdown", "1,1,1,1,2,2,4,4", "--straggler", "1:10:10:4", "--evaluator", "--seed", "1"]
SIMULATED = [[p] for p in available()] + [["gssp", "--compressor", "gdtopk"]]
MPI_WORKERS = 4
TABLES = ("iterations", "applies", "evaluations", "exchanges")   # exchanges: GSSP's


def _sha(array) -> str:
    return hashlib.sha256(array.tobytes()).hexdigest()[:16]


def fingerprint(run_dir: str) -> dict:
    log = RunLog(run_dir)
    out = {"final_params": _sha(log.final_params())}
    for name in TABLES:
        out[name] = f"{_sha(getattr(log, name))} ({len(getattr(log, name))} rows)"
    return out


def _run(cmd: list[str], env: dict | None = None) -> None:
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                       env={**os.environ, **(env or {})})
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")


def simulated(paradigm: list[str], tmp: str, iterations: int) -> dict:
    run_dir = os.path.join(tmp, "-".join(paradigm))
    _run([sys.executable, "-m", "mpips", "simulate", "--paradigm", *paradigm, "--workers", "8", "--sim-gradients", "exact",
          "--servers", "2", "--iterations", str(iterations), *MIX, "--run-dir", run_dir])
    return fingerprint(run_dir)


def mpi_bsp(tmp: str, iterations: int) -> dict:
    run_dir = os.path.join(tmp, "mpi-bsp")
    _run([MPIEXEC, "--timeout", "300", "-n", str(1 + 2 + MPI_WORKERS), sys.executable, "-m", "mpips", "train",
          "--paradigm", "bsp", "--servers", "2", "--evaluator", "--iterations", str(iterations),
          "--seed", "1", "--run-dir", run_dir], MPI_ENV)
    return {"final_params": fingerprint(run_dir)["final_params"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=200, help="per worker")
    p.add_argument("--check", action="store_true", help="compare with the committed results instead")
    args = p.parse_args()
    if args.check:
        with open(os.path.join(RESULTS, f"{NAME}.json")) as fh:
            committed = json.load(fh)
        args.iterations = committed["iterations"]
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for paradigm in SIMULATED:
            found[" ".join(paradigm)] = simulated(paradigm, tmp, args.iterations)
        found[f"mpi bsp ({MPI_WORKERS} workers)"] = mpi_bsp(tmp, args.iterations // 4)
    rows = [[name, *(f.get(k, "") for k in ("final_params", *TABLES))]
            for name, f in found.items()]
    markdown = (f"8 workers, 2 servers, `{' '.join(MIX)}`, {args.iterations} iterations each, simulated; the MPI job "
                f"{args.iterations // 4} iterations. sha256 (first 16 hex digits).\n\n"
                + table(["run", "final parameters", *TABLES], rows))
    if not args.check:
        write_results(NAME, {"iterations": args.iterations, "fingerprints": found}, markdown)
        return 0
    print(markdown)
    differ = [name for name in committed["fingerprints"] if committed["fingerprints"][name] != found.get(name)]
    print(f"\n{'identical to' if not differ else 'DIFFERENT from'} the committed fingerprints"
          f"{': ' + ', '.join(differ) if differ else ''}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
