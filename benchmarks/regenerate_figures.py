"""The comparison figures that the kept results files can still give, redrawn in
the current style (the runs themselves are not kept: their curves are gone).

    python benchmarks/regenerate_figures.py      # every results/paradigms-*.json with a figures folder

From each comparison's rows (one per run: entry, cluster, seed, time to the
target, final accuracy) it redraws `time_to_target.png`: a bar per entry, the
mean over its seeds with error bars for their range, fastest first. The
accuracy curves (`accuracy.png`), the timelines and the staleness histograms
need the run logs: `make compare` / `make study` draw them anew.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mpips.analysis.plot import ENTRY_COLOURS, target_bars  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CLUSTERS = {"het": "heterogeneous", "hom": "homogeneous"}


def target_rows(data: dict) -> pd.DataFrame:
    """A results file's rows as plot.target_frame's columns."""
    rows = pd.DataFrame(data["rows"])
    rows = rows[rows["status"] == "finished"] if "status" in rows else rows
    entries = list(dict.fromkeys(rows["paradigm"]))
    return pd.DataFrame({
        "cluster": [f"{CLUSTERS.get(run.split('-')[0], run.split('-')[0])}: {h}"
                    for run, h in zip(rows["run"], rows["heterogeneity"])],
        "name": rows["paradigm"], "paradigm": rows["paradigm"].str.split(r"[+:]").str[0],
        "group": rows["paradigm"],
        "colour": [ENTRY_COLOURS[entries.index(p) % len(ENTRY_COLOURS)] for p in rows["paradigm"]],
        "time": rows["time_to_target"].astype(float), "final": rows["final_accuracy"].astype(float)})


def main() -> int:
    for path in sorted(RESULTS.glob("paradigms-*.json")):
        folder = RESULTS / path.stem
        if not folder.is_dir():
            continue
        data = json.loads(path.read_text())
        target = float(data["settings"]["target"])
        clock = "virtual " if data["settings"].get("simulate") else "wall-clock "
        print(target_bars(target_rows(data), str(folder / "time_to_target.png"), target,
                          f"{clock}time to {100 * target:g}% test accuracy (s)", {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
