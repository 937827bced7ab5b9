"""One table over run logs: how fast and how well each run trained.

    mpips summarize runs/*                    # a table on the terminal
    mpips summarize runs/* --target 0.95 --csv t.csv --markdown t.md
    mpips summarize runs/* --mean             # mean over seeds

A RUN is a run directory, or a directory of run directories. Everything is
read through `mpips.io.log.RunLog`. The table is a pandas DataFrame, one row per
run (`table`), or per setting, the mean over its seeds (`mean_table`); `rows` and
`mean_rows` give the same as lists of dicts (None where there is no value).
Its `settings` column names what else differs between the runs (`differing_settings`,
`settings_label`, which the figures' labels use too). Times are virtual for
simulated runs (`clock`), and the headers say so. On a terminal a table wider
than WIDTH is compacted (two-line headers, what every row shares in a line
under it, long text wrapped); the CSV keeps every column and the whole text.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap

import pandas as pd

from ..heterogeneity import format_slowdown, parse_slowdown, parse_stragglers
from ..io.log import RunLog, time_to_target
from ..paradigms import option_specs
from ..validate import number_in
from .placement import nodes_label

# (key, header, format) of the table's columns, in order; `{target}` is filled in.
COLUMNS = [
    ("run", "run", "s"),
    ("paradigm", "paradigm", "s"),
    ("layout", "S+G+W", "s"),
    ("nodes", "nodes", "s"),
    ("workload", "model on data", "s"),
    ("heterogeneity", "heterogeneity", "s"),
    ("settings", "settings", "s"),
    ("clock", "clock", "s"),
    ("runs", "runs", "d"),
    ("time_to_target", "{virtual}time to {target} (s)", ".2f"),
    ("epochs_to_target", "epochs to {target}", ".2f"),
    ("reached", "reached", "s"),
    ("final_accuracy", "final acc", "pct"),
    ("best_accuracy", "best acc", "pct"),
    ("wall_seconds", "{duration} (s)", ".2f"),
    ("updates", "updates", "d"),
    ("updates_per_second", "updates/s", ".1f"),
    ("samples_per_second", "samples/s", ".0f"),
    ("mean_wait_fraction", "wait share", "pct"),
    ("mean_staleness", "mean staleness", ".2f"),
    ("max_staleness", "max staleness", "d"),
    ("mean_tau", "mean tau", ".2f"),
    ("mean_async_factor", "mean async factor", ".3f"),
    ("bytes_sent", "bytes sent", "bytes"),
]
# Columns averaged by `mean_rows`; the others identify the group or are counted.
NUMERIC = ["time_to_target", "epochs_to_target", "final_accuracy", "best_accuracy", "wall_seconds", "updates",
           "updates_per_second", "samples_per_second", "mean_wait_fraction", "mean_staleness",
           "max_staleness", "mean_tau", "mean_async_factor", "bytes_sent"]
# A mean pools the runs alike in all of these: their settings but the seed.
GROUP_BY = ("paradigm", "layout", "nodes", "workload", "heterogeneity", "clock", "settings")
# Identify the runs rather than measure them: a compacted text table shows those
# every row shares in one line under the table.
DESCRIPTIVE = ("paradigm", "layout", "nodes", "workload", "heterogeneity", "settings", "clock")
WIDTH = 160   # characters: a terminal's width, about
CELL = 40     # characters: a longer cluster is given in a short form in titles
MIN_CELL = 12   # characters a compacted table narrows a text column to, at the most
CELL_LINES = 3   # lines of a text cell in a compacted table

# Configuration keys that are no setting: where a run went, and its seed (runs
# that differ by seed alone repeat one setting, and means pool them).
NOT_SETTINGS = ("run_dir", "seed")
# Settings that the tables and figures show apart from the others: the paradigm
# (its label), the emulated cluster (`heterogeneity`; a panel of its own in the
# figures), and what `settings` puts for the configuration's servers, workers,
# model and dataset (what the run really had).
PARADIGM_KEYS = ("paradigm", "compressor")
CLUSTER_KEYS = ("slowdown", "straggler", "random_stragglers")
OWN_COLUMNS = PARADIGM_KEYS + CLUSTER_KEYS + ("layout", "workload", "clock")


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


def run_label(log: RunLog) -> str:
    """What a run ran, as the tables and figures name it: the entry of the
    comparison that made it (`RunLog.label`), else its paradigm label."""
    return log.label or paradigm_label(log.config)


def labelled(logs: list[RunLog], labels: dict[str, str] | None) -> list[RunLog]:
    """`logs`, each labelled by `labels` (run directory -> label) where it names it."""
    for log in logs:
        log.label = (labels or {}).get(log.run_dir, log.label)
    return logs


def shown_settings(logs: list[RunLog], every: list[dict], skip=()) -> list[str]:
    """The keys of the runs' `settings` (`every`) that tell them apart
    (`differing_settings`), less, where runs are labelled, those that no
    label's runs differ in: their labels say them (localsgd:local_mode=async)."""
    keys = differing_settings(every, skip=skip)
    if not any(log.label for log in logs):
        return keys
    groups: dict[str, list[dict]] = {}
    for log, s in zip(logs, every):
        groups.setdefault(run_label(log), []).append(s)
    return [k for k in keys if any(len({repr(s.get(k)) for s in g}) > 1 for g in groups.values())]


def heterogeneity(config: dict, short: bool = False) -> str:
    """The emulated cluster in words, from the configuration; `short`: a
    title's, where the factors or stragglers would not fit in a line."""
    parts = []
    if config.get("slowdown"):
        # short whatever the user wrote: 64 workers as '1x48,2x12,4x4'
        factors = parse_slowdown(config["slowdown"])
        text = format_slowdown(factors)
        if short and len(text) > CELL:   # many distinct factors
            text = f"{len(set(factors))} factors {min(factors):g} to {max(factors):g}"
        parts.append(f"slowdown {text}")
    if config.get("straggler"):
        stragglers = parse_stragglers(config["straggler"])
        many = short and len(config["straggler"]) > CELL
        parts.append(f"{len(stragglers)} stragglers" if many else f"straggler {config['straggler']}")
    if config.get("random_stragglers"):
        parts.append(f"random stragglers {config['random_stragglers']}")
    return "; ".join(parts) or "homogeneous"


def workload(log: RunLog) -> str:
    """'model on data'; a user's data by its name only, `user` or its
    package.module:function (its shapes: `mpips info`)."""
    return f"{log.model} on {log.dataset.split(': ')[0]}"


def clock(log: RunLog) -> str:
    """'virtual': the simulator's clock (`mpips simulate`), else 'wall'."""
    return "virtual" if log.simulated else "wall"


def settings(log: RunLog) -> dict:
    """What a run ran, but its seed: the configuration, with the layout,
    workload and clock it really had in place of the configuration's
    servers, workers (0: the world size's), model and dataset (a user's own)."""
    config = {k: v for k, v in log.config.items()
              if k not in NOT_SETTINGS + ("servers", "workers", "model", "dataset")}
    return {**config, "layout": layout_label(log.layout), "workload": workload(log), "clock": clock(log)}


def differing_settings(runs: list[dict], skip=()) -> list[str]:
    """The keys of these `settings` whose values are not the same in all,
    in their order, less `skip`. A key one run lacks differs, unless it is a
    paradigm's own setting: a run of another paradigm has none of its
    settings, and it is compared among the runs that have it."""
    keys = [k for k in dict.fromkeys(k for s in runs for k in s) if k not in skip]
    owned = {name for own in option_specs().values() for name in own}
    return [k for k in keys
            if len({repr(s.get(k)) for s in runs if k in s or k not in owned}) > 1]


def settings_label(run: dict, keys: list[str]) -> str:
    """The values of `keys` in a run's `settings`, named as the command line
    names them: 'staleness 3, batch-size 32' ('' for no keys). Distinct
    values read differently, so runs with one label have one setting."""
    names = {"layout": "S+G+W ", "workload": ""}
    return ", ".join(f"{names.get(k, k.replace('_', '-') + ' ')}{_setting(run.get(k))}" for k in keys)


def _setting(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and float(f"{value:g}") == value:
        return f"{value:g}"   # 'epochs 30', not 30.0; exact, so distinct values stay distinct
    return "-" if value is None else str(value) or "none"


def run_row(log: RunLog, target: float, evaluations: int = 1) -> dict:
    """One run as a row of the table (`table` adds its `settings`); its time
    to the target: when the mean of `evaluations` evaluations reached it
    (`mpips compare`: 3, as `mpips plan`)."""
    s = log.summary()
    reached = log.time_to_accuracy(target, evaluations)
    return {
        "run": log.name,
        "paradigm": run_label(log),
        "layout": layout_label(log.layout),
        "nodes": nodes_label(log.by_node()),
        "workload": workload(log),
        "heterogeneity": heterogeneity(log.config),
        "clock": clock(log),
        "seed": log.config["seed"],
        "status": log.status,
        "damage": "; ".join(log.problems),   # rank files missing, truncated, unreadable
        "time_to_target": reached,
        "epochs_to_target": time_to_target(log.evaluations["epoch"], log.evaluations["accuracy"], target, evaluations),
        **{k: s[k] for k in NUMERIC if k not in ("time_to_target", "epochs_to_target")},
    }


def table(run_dirs: list[str], target: float, labels: dict[str, str] | None = None, evaluations: int = 1):
    """One row per run (a DataFrame; NaN where a run has no value); `settings`:
    what differs between these runs beyond the other columns and the seed.
    `labels` (run directory -> name): the `paradigm` of the runs it names."""
    logs = labelled([RunLog(d) for d in run_dirs], labels)
    frame = pd.DataFrame([run_row(log, target, evaluations) for log in logs])
    every = [settings(log) for log in logs]
    keys = shown_settings(logs, every, skip=OWN_COLUMNS)
    if logs:
        frame.insert(frame.columns.get_loc("heterogeneity") + 1, "settings",
                     [settings_label(s, keys) for s in every])
    return frame


def mean_table(runs):
    """One row per setting (GROUP_BY: all but the seed), in order of first
    appearance: the mean over its runs (seeds). Time and epochs to target are
    means over the runs that reached it, and `reached` says how many did."""
    runs = pd.DataFrame(runs)
    if runs.empty:
        return pd.DataFrame(columns=[*GROUP_BY, "runs", "reached", *NUMERIC])
    numeric = runs[NUMERIC].apply(pd.to_numeric, errors="coerce")   # None -> NaN, skipped by mean
    # (rows of older tables, a CSV of summarize's, may lack a key: grouped by those they have)
    groups = numeric.groupby([runs[k] for k in GROUP_BY if k in runs], sort=False, dropna=False)
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


def rows(run_dirs: list[str], target: float, labels: dict[str, str] | None = None,
         evaluations: int = 1) -> list[dict]:
    return records(table(run_dirs, target, labels, evaluations))


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
    """The (key, header, format) of the columns to show. The clock is a
    column only where the rows mix simulated and MPI runs: else the headers
    say which time it is. No settings column where no run has one."""
    present = set().union(*table) if table else set()
    clocks = {r.get("clock") or "wall" for r in table}   # (older rows: MPI's)
    if len(clocks) < 2:
        present.discard("clock")
    if not any(r.get("settings") for r in table):
        present.discard("settings")
    for key in ("mean_tau", "mean_async_factor"):   # runs under an async rule only
        if all(_none(r.get(key)) is None for r in table):
            present.discard(key)
    virtual = clocks == {"virtual"}
    duration = "virtual time" if virtual else "wall" if clocks == {"wall"} else "time"
    return [(k, h.format(target=f"{100 * target:g}%", virtual="virtual " if virtual else "", duration=duration), f)
            for k, h, f in COLUMNS if k in present]


def render_text(table: list[dict], target: float, width: int | None = WIDTH) -> str:
    """An aligned plain-text table (of dicts or a DataFrame). Wider than
    `width`, it is compacted: headers on two lines, the identifying columns
    that every row shares said once under the table, and the widest text
    columns (but the run's name) narrowed until it fits, to MIN_CELL, their
    text wrapped onto lines of its row."""
    table = _as_records(table)
    cols = _columns(table, target)
    lines = _aligned([[h] for _, h, _ in cols], [[[_cell(r[k], f)] for k, _, f in cols] for r in table], cols)
    if width is None or len(lines[0]) <= width:
        return "\n".join(lines)
    shared = [c for c in cols if c[0] in DESCRIPTIVE and len({r[c[0]] for r in table}) == 1]
    cols = [c for c in cols if c not in shared]
    heads = [_two_lines(h) for _, h, _ in cols]
    body = [[_cell(r[k], f) for k, _, f in cols] for r in table]
    widths = [max(len(c) for c in [*h, *column]) for h, column in zip(heads, zip(*body))]
    # a text column narrower than MIN_CELL already stays as it is: never narrowed below its own width
    shortest = [min(w, max([MIN_CELL, *map(len, h)])) if f == "s" and k != "run" else w
                for h, w, (k, _, f) in zip(heads, widths, cols)]
    while sum(widths) + 2 * (len(widths) - 1) > width and widths != shortest:
        j = max(range(len(widths)), key=lambda j: widths[j] - shortest[j])
        widths[j] -= 1
    wrapped = [[_wrap(c, w) for c, w in zip(row, widths)] for row in body]
    lines = _aligned(heads, wrapped, cols)
    note = "; ".join(f"{h} {_cell(table[0][k], f)}" for k, h, f in shared)
    if note:
        lines += textwrap.wrap(f"every row: {note}", width, subsequent_indent="  ")
    if any(cell[-1].endswith("...") for row in body for cell in row):
        lines.append("(...: cut short; the CSV, --csv, has the whole text)")
    return "\n".join(lines)


def _aligned(heads: list[list[str]], body: list[list[list[str]]], cols) -> list[str]:
    """Header lines, a rule, then the body's, each cell a list of lines
    (a header's bottom-aligned, a row's top-aligned); text left-aligned,
    numbers right-aligned."""
    height = max(map(len, heads), default=1)
    heads = [[""] * (height - len(h)) + h for h in heads]
    rows = [list(line) for line in zip(*heads)]
    for row in body:
        depth = max(map(len, row), default=1)
        rows += [list(line) for line in zip(*(cell + [""] * (depth - len(cell)) for cell in row))]
    widths = [max(len(row[j]) for row in rows) for j in range(len(cols))]
    lines = ["  ".join(c.ljust(w) if f == "s" else c.rjust(w)
                       for c, w, (_, _, f) in zip(row, widths, cols)) for row in rows]
    lines.insert(height, "  ".join("-" * w for w in widths))
    return lines


def _wrap(text: str, width: int) -> list[str]:
    """`text` in at most CELL_LINES lines of at most `width` characters,
    broken after a space or a comma where it can be ('1x180,1.5x40,2x26'),
    the last ending in '...' where that is not all."""
    lines = [""]
    for piece in re.findall(r"[^ ,]*[ ,]*", text):
        if lines[-1] and len(lines[-1] + piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
        while len(lines[-1].rstrip()) > width:
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    lines = [line.rstrip() for line in lines]
    if len(lines) > CELL_LINES:
        lines[CELL_LINES - 1:] = [lines[CELL_LINES - 1][:width - 3] + "..."]
    return lines


def _two_lines(header: str) -> list[str]:
    """A header cut at the space that makes it narrowest."""
    cuts = [[header[:i], header[i + 1:]] for i, c in enumerate(header) if c == " "]
    return min(cuts, key=lambda h: max(map(len, h)), default=[header])


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
    p.add_argument("--target", type=number_in(0, 1, low_open=True), default=0.9, help="accuracy for the time-to-target column")
    p.add_argument("--mean", action="store_true", help="one row per setting: the mean over its seeds")
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
    for path, write in ((args.csv, lambda: write_csv(table, args.csv)),
                        (args.markdown, lambda: _write_text(args.markdown, render_markdown(table, args.target)))):
        if path:
            try:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                write()
            except OSError as e:   # a directory, a read-only place, a full disk: one line
                print(f"summarize: cannot write {path}: {e.strerror or e}", file=sys.stderr)
                return 2
    return 0


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    sys.exit(main())
