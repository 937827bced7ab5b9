"""One table over run logs: how fast and how well each run trained.

    mpips summarize runs/*                    # a table on the terminal
    mpips summarize runs/* --target 0.95 --csv t.csv --markdown t.md
    mpips summarize runs/* --mean             # mean over seeds

A RUN is a run directory, or a directory of run directories. Everything is
read through `mpips.io.log.RunLog`. The table is a pandas DataFrame, one row per
run (`table`), or per paradigm and cluster (`mean_table`); `rows` and
`mean_rows` give the same as lists of dicts (None where there is no value).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import pandas as pd

from ..io.log import RunLog
from ..training.emulation import format_slowdown, parse_slowdown

# (key, header, format) of the table's columns, in order; `{target}` is filled in.
COLUMNS = [
    ("run", "run", "s"),
    ("paradigm", "paradigm", "s"),
    ("layout", "S+G+W", "s"),
    ("workload", "model on data", "s"),
    ("heterogeneity", "heterogeneity", "s"),
    ("runs", "runs", "d"),
    ("time_to_target", "time to {target} (s)", ".2f"),
    ("epochs_to_target", "epochs to {target}", ".2f"),
    ("reached", "reached", "s"),
    ("final_accuracy", "final acc", "pct"),
    ("best_accuracy", "best acc", "pct"),
    ("wall_seconds", "wall (s)", ".2f"),
    ("updates", "updates", "d"),
    ("updates_per_second", "updates/s", ".1f"),
    ("samples_per_second", "samples/s", ".0f"),
    ("mean_wait_fraction", "wait share", "pct"),
    ("mean_staleness", "mean staleness", ".2f"),
    ("max_staleness", "max staleness", "d"),
    ("bytes_sent", "bytes sent", "bytes"),
]
# Columns averaged by `mean_rows`; the others identify the group or are counted.
NUMERIC = ["time_to_target", "epochs_to_target", "final_accuracy", "best_accuracy", "wall_seconds", "updates",
           "updates_per_second", "samples_per_second", "mean_wait_fraction", "mean_staleness",
           "max_staleness", "bytes_sent"]
GROUP_BY = ("paradigm", "layout", "workload", "heterogeneity")


def find_runs(paths: list[str]) -> list[str]:
    """Run directories named by `paths`: each is a run directory (has run.h5)
    or holds run directories one level down (taken in name order)."""
    runs = []
    for p in paths:
        if os.path.exists(os.path.join(p, "run.h5")):
            runs.append(p)
            continue
        inner = sorted(os.path.join(p, d) for d in os.listdir(p)) if os.path.isdir(p) else []
        inner = [d for d in inner if os.path.exists(os.path.join(d, "run.h5"))]
        if not inner:
            raise FileNotFoundError(f"{p}: not a run directory, nor a directory of them")
        runs.extend(inner)
    return runs


def layout_label(layout: dict) -> str:
    """'servers+group servers+workers', e.g. '1+0+4'."""
    return f"{layout['servers']}+{layout.get('group_servers', 0)}+{layout['workers']}"


def paradigm_label(config: dict) -> str:
    """The paradigm, with its push compressor when it uses one (gssp+gdtopk)."""
    compressor = config.get("compressor", "none")
    return config["paradigm"] + (f"+{compressor}" if compressor != "none" else "")


def heterogeneity(config: dict) -> str:
    """The emulated cluster in words, from the configuration."""
    parts = []
    if config.get("slowdown"):
        # short whatever the user wrote: 64 workers as '1x48,2x12,4x4'
        parts.append(f"slowdown {format_slowdown(parse_slowdown(config['slowdown']))}")
    if config.get("straggler"):
        parts.append(f"straggler {config['straggler']}")
    if config.get("random_stragglers"):
        parts.append(f"random stragglers {config['random_stragglers']}")
    return "; ".join(parts) or "homogeneous"


def run_row(log: RunLog, target: float) -> dict:
    """One run as a row of the table."""
    s = log.summary()
    reached = log.time_to_accuracy(target)
    return {
        "run": log.name,
        "paradigm": paradigm_label(log.config),
        "layout": layout_label(log.layout),
        # a user's data by its kind only (its shapes: `mpips info`)
        "workload": f"{log.model} on {log.dataset.split(':')[0]}",
        "heterogeneity": heterogeneity(log.config),
        "seed": log.config["seed"],
        "status": log.status,
        "damage": "; ".join(log.problems),   # rank files missing, truncated, unreadable
        "time_to_target": reached,
        "epochs_to_target": log.epochs_to_accuracy(target),
        **{k: s[k] for k in NUMERIC if k not in ("time_to_target", "epochs_to_target")},
    }


def table(run_dirs: list[str], target: float):
    """One row per run (a DataFrame; NaN where a run has no value)."""
    return pd.DataFrame([run_row(RunLog(d), target) for d in run_dirs])


def mean_table(runs):
    """One row per (paradigm, layout, heterogeneity), in order of first
    appearance: the mean over its runs (seeds). Time and epochs to target are
    means over the runs that reached it, and `reached` says how many did."""
    runs = pd.DataFrame(runs)
    if runs.empty:
        return pd.DataFrame(columns=[*GROUP_BY, "runs", "reached", *NUMERIC])
    numeric = runs[NUMERIC].apply(pd.to_numeric, errors="coerce")   # None -> NaN, skipped by mean
    # (rows of older tables, a CSV of summarize's, may lack a key: grouped by those they have)
    groups = numeric.groupby([runs[k] for k in GROUP_BY if k in runs], sort=False)
    out = groups.mean()
    out.insert(0, "runs", groups.size())
    out.insert(1, "reached", [f"{int(n)}/{int(m)}" for n, m in
                              zip(groups["time_to_target"].count(), groups.size())])
    return out.reset_index()


def records(frame) -> list[dict]:
    """A DataFrame's rows as dicts, None for missing values."""
    return [{k: _none(v) for k, v in r.items()} for r in frame.to_dict("records")]


def _none(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def rows(run_dirs: list[str], target: float) -> list[dict]:
    return records(table(run_dirs, target))


def mean_rows(table: list[dict]) -> list[dict]:
    """`mean_table` as a list of dicts."""
    return records(mean_table(table))


def _cell(value, fmt: str) -> str:
    if _none(value) is None:
        return "-"
    if fmt == "pct":
        return f"{100 * value:.1f}%"
    if fmt == "bytes":
        for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= size:
                return f"{value / size:.1f} {unit}"
        return f"{value:.0f} B"
    if fmt == "d":
        return f"{value:.0f}"
    return format(value, fmt)


def _as_records(table) -> list[dict]:
    return records(table) if isinstance(table, pd.DataFrame) else table


def _columns(table: list[dict], target: float) -> list[tuple[str, str, str]]:
    present = set().union(*table) if table else set()
    return [(k, h.format(target=f"{100 * target:g}%"), f) for k, h, f in COLUMNS if k in present]


def render_text(table: list[dict], target: float) -> str:
    """An aligned plain-text table (of dicts or a DataFrame)."""
    table = _as_records(table)
    cols = _columns(table, target)
    cells = [[h for _, h, _ in cols]] + [[_cell(r[k], f) for k, _, f in cols] for r in table]
    widths = [max(len(row[j]) for row in cells) for j in range(len(cols))]
    lines = ["  ".join(c.ljust(w) if f == "s" else c.rjust(w)
                       for c, w, (_, _, f) in zip(row, widths, cols)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(table: list[dict], target: float) -> str:
    """A GitHub Markdown table (of dicts or a DataFrame)."""
    table = _as_records(table)
    cols = _columns(table, target)
    head = "| " + " | ".join(h for _, h, _ in cols) + " |"
    rule = "|" + "|".join("---" if f == "s" else "---:" for _, _, f in cols) + "|"
    body = ["| " + " | ".join(_cell(r[k], f) for k, _, f in cols) + " |" for r in table]
    return "\n".join([head, rule, *body]) + "\n"


def write_csv(table, path: str) -> None:
    """Raw values (seconds, fractions, bytes); empty where there is none."""
    pd.DataFrame(_as_records(table)).to_csv(path, index=False)


def main(argv=None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, or a directory of them")
    p.add_argument("--target", type=float, default=0.9, help="accuracy for the time-to-target column")
    p.add_argument("--mean", action="store_true", help="one row per paradigm and cluster: mean over runs")
    p.add_argument("--columns", type=lambda s: s.split(","), metavar="KEY,...",
                   help="only these columns: " + ",".join(k for k, _, _ in COLUMNS))
    p.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    args = p.parse_args(argv)
    try:
        table = rows(find_runs(args.runs), args.target)
    except (FileNotFoundError, OSError, KeyError) as e:
        print(f"summarize: {e}", file=sys.stderr)
        return 2
    unfinished = [r["run"] for r in table if r["status"] != "finished"]
    damaged = [f"{r['run']}: {r['damage']}" for r in table if r.get("damage")]
    if args.mean:
        table = mean_rows(table)
    if args.columns:
        unknown = set(args.columns) - {k for k, _, _ in COLUMNS}
        if unknown:
            p.error(f"unknown column(s) {', '.join(sorted(unknown))}")
        table = [{k: r[k] for k in args.columns if k in r} for r in table]
    print(render_text(table, args.target))
    if unfinished:
        print(f"not finished (partial logs): {', '.join(unfinished)}")
    for line in damaged:   # their rows count only what could be read
        print(f"summarize: damaged run log {line}", file=sys.stderr)
    if args.csv:
        write_csv(table, args.csv)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(render_markdown(table, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
