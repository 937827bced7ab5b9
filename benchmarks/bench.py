"""`make bench`: run the benchmarks of `make bench` (registry.py), then say,
for every benchmark, its goals and whether its results meet them.

    python benchmarks/bench.py              # run them (minutes), then the verdicts
    python benchmarks/bench.py --verdicts   # only read the committed results (seconds)

A benchmark without goals is a study: its results are read by a person.
Exits 1 if a benchmark of `make bench` failed to run, not for a goal not met
(the numbers of a shared machine move; a verdict is information).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import operator
import os
import subprocess
import sys
from typing import Any

from registry import BENCHMARKS, Benchmark, Goal

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq}


def found(data: Any, path: tuple[str, ...]) -> list:
    """The values at `path` in `data` (registry.py's path language)."""
    here = [data]
    for step in path:
        nxt: list = []
        for node in here:
            if isinstance(node, dict):
                nxt += [v for k, v in node.items() if fnmatch.fnmatchcase(str(k), step)]
            elif isinstance(node, list) and step == "*":
                nxt += node
            if "=" in step:   # a filter: of a list's items, or of the items found so far
                key, _, value = step.partition("=")
                items = node if isinstance(node, list) else [node]
                nxt += [item for item in items if isinstance(item, dict) and str(item.get(key)) == value]
        here = nxt
    return here


def verdict(goal: Goal, results: dict) -> tuple[str, Any]:
    """('met' | 'NOT MET' | 'no value', the value compared)."""
    values = found(results, goal.path)
    if goal.per:
        values = [v / w for v, w in zip(values, found(results, goal.per)) if w]
    if not values:
        return "no value", None
    if goal.reduce == "all":
        value: Any = all(OPS[goal.op](v, goal.bound) for v in values)
        return ("met" if value else "NOT MET"), f"{sum(OPS[goal.op](v, goal.bound) for v in values)}/{len(values)}"
    value = {"min": min, "max": max}[goal.reduce](values)
    return ("met" if OPS[goal.op](value, goal.bound) else "NOT MET"), value


def results_of(bench: Benchmark) -> dict | None:
    path = os.path.join(RESULTS, f"{bench.name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def report(benchmarks=BENCHMARKS) -> list[str]:
    """A line per goal (or per study): the benchmark, the goal, its verdict."""
    lines = []
    for bench in benchmarks:
        results = results_of(bench)
        when = (results or {}).get("machine", {}).get("date", "")
        head = f"{bench.name} ({bench.script}{', ' + when if when else ''})"
        if results is None:
            lines.append(f"{head}: no results file (results/{bench.name}.json): not run yet")
            continue
        if not bench.goals:
            lines.append(f"{head}: a study, no goal: {bench.measures}")
            continue
        for goal in bench.goals:
            status, value = verdict(goal, results)
            shown = f"{value:.3g}" if isinstance(value, float) else value
            lines.append(f"{head}: {goal.says}: {status} ({shown})")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verdicts", action="store_true", help="only read the committed results and say the verdicts")
    args = p.parse_args(argv)
    failed = []
    if not args.verdicts:
        for bench in (b for b in BENCHMARKS if b.in_make_bench):
            print(f"bench: {bench.name}: {bench.measures}", flush=True)
            if subprocess.run([sys.executable, os.path.join(HERE, bench.script), *bench.args]).returncode:
                failed.append(bench.name)
    print("\n".join(report()))
    if failed:
        print(f"bench: failed to run: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
