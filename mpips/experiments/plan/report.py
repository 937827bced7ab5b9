"""What `mpips plan` shows: the figure (OUT/plan.png) and the files
(OUT/plan.md, OUT/plan.json); the table and the verdict are ranking.py's,
shared with `mpips compare`."""
from __future__ import annotations

import json
import os

from ...io.log import writing
from ..ranking import Run


def figure(runs: list[Run], table, path: str, target: float | None) -> str:
    """Accuracy against predicted time per candidate (every seed), and the
    ranking's predicted time to the target (or accuracy) with its range: a
    bar for each candidate every seed of which reached the target (with a
    target), the others named without one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table["candidate"])
    colours = dict(zip(names, plt.colormaps["tab10" if len(names) <= 10 else "tab20"].colors))  # type: ignore[attr-defined]  # a ListedColormap
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), dpi=110)
    for r in runs:
        if r.curve and r.candidate in colours:
            t, a = zip(*r.curve)
            left.plot(t, [100 * x for x in a], color=colours[r.candidate], alpha=0.8, lw=1.2,
                      label=r.candidate if r.seed == runs[0].seed else None)
    if target:
        left.axhline(100 * target, color="grey", ls="--", lw=0.8)
    left.set(xlabel="predicted seconds (simulated)", ylabel="test accuracy %", title="every run")
    left.legend(fontsize=7, ncol=2)
    by = {name: [r for r in runs if r.candidate == name] for name in names}
    if target:
        times = [[r.time_to_target for r in by[n]] for n in names]
        values = [[float(v) for v in vs if v is not None] if None not in vs else [] for vs in times]
        right.set(xlabel=f"predicted seconds to {100 * target:g}% (mean, range over seeds)")
        right.set_title(f"ranking (no bar: a seed short of {100 * target:g}%)")
    else:
        values = [[100 * r.final_accuracy for r in by[n]] for n in names]
        right.set(xlabel="predicted final accuracy % (mean, range over seeds)")
        right.set_title("ranking")
    y = range(len(names))[::-1]
    for k, (name, v) in enumerate(zip(names, values)):
        if v:
            mean = sum(v) / len(v)
            right.barh(y[k], mean, color=colours[name], xerr=[[mean - min(v)], [max(v) - mean]], capsize=3)
    right.set_yticks(list(y), [f"{k + 1}. {n}" for k, n in enumerate(names)], fontsize=8)
    fig.tight_layout()
    with writing(path):
        fig.savefig(path)
    plt.close(fig)
    return path


def write(out: str, record: dict, text: str) -> None:
    """OUT/plan.json and OUT/plan.md (a full disk: DiskFull, one line)."""
    for name, write_to in (("plan.json", lambda fh: json.dump(record, fh, indent=1, default=float)),
                           ("plan.md", lambda fh: fh.write(text))):
        path = os.path.join(out, name)
        with writing(path), open(path, "w") as fh:
            write_to(fh)
