"""The benchmark harness (benchmarks/registry.py, bench.py): every benchmark
that writes results is registered with its script, its goals are found in
its committed results, and `bench.py --verdicts` says each one's verdict
from the committed results alone (seconds, no run)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import bench  # noqa: E402
from registry import BENCHMARKS as REGISTERED  # noqa: E402
from registry import Goal  # noqa: E402


def test_every_benchmark_that_writes_results_is_registered_with_its_script():
    scripts = {b.script for b in REGISTERED}
    assert all((BENCHMARKS / s).is_file() for s in scripts), scripts
    writers = {str(p.relative_to(BENCHMARKS)) for p in BENCHMARKS.rglob("*.py")
               if "write_results(" in p.read_text() and p.name != "common.py"}
    assert writers == scripts
    assert len({b.name for b in REGISTERED}) == len(REGISTERED)


def test_each_goal_finds_its_numbers_in_the_committed_results():
    for b in REGISTERED:
        results = bench.results_of(b)
        for goal in b.goals:
            assert results is not None and bench.found(results, goal.path), (b.name, goal.says)


def test_a_goals_path_reduces_and_compares():
    results = {"runs": [{"kind": "a", "ratio": 0.95}, {"kind": "b", "ratio": 0.8}],
               "cells": {"x median": {"v": 1.0}, "x best": {"v": 0.1}, "y median": {"v": 2.0}}}
    assert bench.verdict(Goal("", ("runs", "kind=a", "ratio"), ">=", 0.9), results) == ("met", 0.95)
    assert bench.verdict(Goal("", ("runs", "*", "ratio"), ">=", 0.9), results) == ("NOT MET", 0.8)
    assert bench.verdict(Goal("", ("cells", "* median", "v"), "<=", 2.0, "max"), results) == ("met", 2.0)
    assert bench.verdict(Goal("", ("runs", "*", "ratio"), ">=", 0.9, "all"), results) == ("NOT MET", "1/2")
    assert bench.verdict(Goal("", ("nothing",), ">=", 0.9), results) == ("no value", None)


@pytest.mark.parametrize("args", [["--verdicts"]])
def test_the_verdicts_of_the_committed_results_are_one_line_each(args):
    p = subprocess.run([sys.executable, str(BENCHMARKS / "bench.py"), *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == sum(max(1, len(b.goals)) for b in REGISTERED)
    for b in REGISTERED:
        mine = [line for line in lines if line.startswith(f"{b.name} (")]
        assert mine and all((": met (" in line or ": NOT MET (" in line) if b.goals else ": a study, no goal: " in line
                                or "no results file" in line for line in mine), mine
