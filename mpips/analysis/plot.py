"""Figures over run logs (PNG, matplotlib's Agg backend), drawn from the logs'
pandas DataFrames (`evaluation_frame`, `target_frame`) and their arrays.

    mpips plot runs/* -o figures/
    mpips plot runs/ssp -o figures/ --window 2:4    # timeline of seconds 2..4

Writes into the output directory:
  accuracy.png          accuracy and loss versus time, one column per emulated
                        cluster, a line per setting: the mean over its seeds
                        with a band for their range (--per-seed: a line per
                        run); beyond 8 settings, a small panel per setting
  staleness.png         iteration-staleness histogram of every run
  time_to_target.png    seconds to the target accuracy, a bar per setting (the
                        mean of its seeds, error bars their range) and cluster,
                        fastest first
  timeline-RUN.png      per worker (per node or speed class beyond 16 workers):
                        wait, pull, compute, emulated slowdown, push; a run
                        on several nodes has its rows grouped by node
  dynamics-RUN.png      what the paradigm decided over time, where the log has
                        it: DSSP's r*, Sync-Switch's mode, LB-BSP's batch sizes,
                        VSGD's learning-rate scales, the servers' lr and
                        momentum, GSSP's groups and exchanges, other events

Runs are labelled by their paradigm (or the `mpips compare` entry that made
them) and the settings that differ between the runs plotted (summarize's
`shown_settings`), by seed where only that differs. Times of simulated runs are virtual (`mpips simulate`), and the axes
say so.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..config import PARADIGMS  # noqa: E402
from ..heterogeneity import parse_slowdown  # noqa: E402
from ..io.log import LogError, RunLog  # noqa: E402
from ..paradigms.view import MODE_ASP, MODE_BSP  # noqa: E402
from ..validate import number_in  # noqa: E402
from .summarize import (  # noqa: E402
    CLUSTER_KEYS,
    PARADIGM_KEYS,
    find_runs,
    heterogeneity,
    labelled,
    run_label,
    settings,
    settings_label,
    shown_settings,
)

DPI = 110
# One colour per paradigm where a figure draws paradigms' own decisions (dynamics).
PARADIGM_COLOURS = dict(zip(list(PARADIGMS)[:10], plt.colormaps["tab10"].colors))  # type: ignore[attr-defined]  # a ListedColormap
# One colour per entry of a comparison (a setting: its seeds share it), in the order the
# entries come: tab10, then the darker tones of tab20b/tab20c, never one twice in a figure
# of up to 20 entries (12 paradigms drew bsp and localsgd both blue-green).
ENTRY_COLOURS = (list(plt.colormaps["tab10"].colors)  # type: ignore[attr-defined]
                 + [plt.colormaps["tab20b"].colors[k] for k in (0, 4, 8, 12, 16)]  # type: ignore[attr-defined]
                 + [plt.colormaps["tab20c"].colors[k] for k in (0, 4, 8, 12, 16)])  # type: ignore[attr-defined]
SMALL_MULTIPLES = 8   # more entries than this in a panel: a panel per entry instead
# Timeline segments in the order an iteration runs them.
SEGMENTS = [("wait", "#c9c9c9", "wait (gate)"), ("pull", "#1f77b4", "pull"),
            ("work", "#2ca02c", "compute"), ("slowdown", "#98df8a", "emulated device time (sleep)"),
            ("push", "#ff7f0e", "push")]
# Events the timeline shows (stragglers) or the runtime logs in any run (checkpoints,
# segments, rejected pushes): alone they do not make a dynamics figure worth drawing.
TIMELINE_EVENTS = {"slowdown", "straggler"}
RUNTIME_EVENTS = ("rejected_push", "segment", "checkpoint")   # kinds, or prefixes of kinds
TIMELINE_ITERATIONS = 40   # default timeline window: this many iterations of the slowest worker
# More workers than this: the timeline has a row per speed class (equal slowdown
# factors), at most TIMELINE_CLASSES (ranges of factors beyond), in TIMELINE_BINS bins.
TIMELINE_WORKERS = 16
TIMELINE_CLASSES = 12
TIMELINE_BINS = 150
LINESTYLES = ["-", "--", ":", "-."]   # the runs of one setting (its seeds)


def colour(paradigm: str):
    return PARADIGM_COLOURS.get(paradigm, "black")


def _save(fig, path: str) -> str:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def time_label(logs: list[RunLog], what: str = "time") -> str:
    """An axis label for times of these runs: the simulator's are virtual."""
    simulated = {log.simulated for log in logs}
    if simulated == {True}:
        return f"virtual {what} (s)"
    return f"{what} (s; virtual for simulated runs)" if True in simulated else f"wall-clock {what} (s)"


def _title(text: str, width: int) -> str:
    """A title in lines of at most `width` characters, so none is cut."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False))


def _wrapped(label: str, width: int = 40) -> str:
    """A legend entry in lines of about `width` characters, broken after a
    ':' or a ', ' (an entry such as localsgd:local_mode=async:dylu=true has
    no spaces: one line of it squeezed the plots to make room)."""
    lines, line = [], ""
    for piece in re.split(r"(?<=:)|(?<=, )", label):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = piece
        else:
            line += piece
    return "\n".join(lines + [line])


def run_labels(logs: list[RunLog]):
    """One row per run: `cluster` (its figures' panel), `group`: what it ran
    (the paradigm and the settings that differ between these runs, the
    cluster aside), the same for its seeds; `label`: the group, with the
    seed where a cluster has runs of the group that differ by it alone (the
    run's name where not even that); `colour`: the group's own (ENTRY_COLOURS,
    in the groups' order); `ls`: a line style per run of a group."""
    if not logs:
        return pd.DataFrame(columns=["cluster", "group", "paradigm", "seed", "run", "label", "ls", "colour"])
    every = [settings(log) for log in logs]
    keys = shown_settings(logs, every, skip=PARADIGM_KEYS + CLUSTER_KEYS)
    runs = pd.DataFrame({
        "cluster": [heterogeneity(log.config) for log in logs],
        "group": [", ".join(filter(None, (run_label(log), settings_label(s, keys))))
                  for log, s in zip(logs, every)],
        "paradigm": [log.paradigm for log in logs], "seed": [log.config["seed"] for log in logs],
        "run": [log.name for log in logs]})
    same = runs.groupby(["cluster", "group"], sort=False)
    size = same["run"].transform("size")
    told_apart = np.where(same["seed"].transform("nunique") == size,
                          ", seed " + runs["seed"].astype(str), ", run " + runs["run"])
    runs["label"] = runs["group"].where(size == 1, runs["group"] + told_apart)
    runs["ls"] = [LINESTYLES[k % len(LINESTYLES)] for k in same.cumcount()]
    entries = list(dict.fromkeys(runs["group"]))
    runs["colour"] = runs["group"].map({g: ENTRY_COLOURS[k % len(ENTRY_COLOURS)] for k, g in enumerate(entries)})
    return runs


# accuracy and loss versus time ----------------------------------------------
def evaluation_frame(logs: list[RunLog]):
    """Every run's evaluations in one long DataFrame: `k` (the run's index in
    `logs`), run, cluster, name (paradigm label), paradigm, group and label
    (`run_labels`), then the evaluations' columns (time, epoch, steps,
    pushes, loss, accuracy)."""
    labels = run_labels(logs)
    parts = [log.evaluations_df.assign(k=k, run=log.name, cluster=heterogeneity(log.config),
                                       name=run_label(log), paradigm=log.paradigm,
                                       group=labels["group"][k], label=labels["label"][k])
             for k, log in enumerate(logs)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def mean_curves(evaluations, column: str = "accuracy", points: int = 200):
    """Per group (`evaluation_frame`'s, within one cluster): its runs' `column`
    against time, each interpolated on one grid from 0 to the last run's end:
    the mean over the runs that still run at each time and their spread
    (min, max). Yields (group, time, mean, low, high, runs)."""
    if not len(evaluations):
        return
    end = float(evaluations["time"].max())
    grid = np.linspace(0.0, end, points)
    for group, of_group in evaluations.groupby("group", sort=False):
        curves = []
        for _, ev in of_group.groupby("k", sort=True):
            t, y = ev["time"].to_numpy(float), ev[column].to_numpy(float)
            curves.append(np.where((grid >= t[0]) & (grid <= t[-1]), np.interp(grid, t, y), np.nan))
        stack = np.vstack(curves)
        seen = np.isfinite(stack).any(axis=0)
        with np.errstate(all="ignore"):
            mean, low, high = (np.nanmean(stack[:, seen], axis=0), np.nanmin(stack[:, seen], axis=0),
                               np.nanmax(stack[:, seen], axis=0))
        yield group, grid[seen], mean, low, high, len(curves)


def accuracy_figure(logs: list[RunLog], path: str, target: float | None = None, *, per_seed: bool = False) -> str:
    """Accuracy (top) and loss (bottom) versus time, one column per emulated
    cluster, one line per entry (a setting: `run_labels`' group) in a colour of
    its own: the mean over its seeds, with a band from the lowest to the
    highest seed. More than SMALL_MULTIPLES entries in a cluster: the accuracy
    alone, a small panel per entry (the others' means in grey behind it).
    `per_seed`: a line per run instead (its seeds in line styles of their own)."""
    evaluations, styles = evaluation_frame(logs), run_labels(logs)
    clusters = list(dict.fromkeys(styles["cluster"]))
    entries = max((styles[styles["cluster"] == c]["group"].nunique() for c in clusters), default=0)
    if entries > SMALL_MULTIPLES and not per_seed:
        return _accuracy_multiples(logs, evaluations, styles, clusters, path, target)
    short = {heterogeneity(log.config): heterogeneity(log.config, short=True) for log in logs}
    shown = len(styles) if per_seed else entries   # legend rows below each column
    fig, axes = plt.subplots(2, len(clusters), figsize=(6.5 * len(clusters), 7.5 + 0.12 * shown),
                             sharex="col", squeeze=False, layout="constrained")
    colour_of = dict(zip(styles["group"], styles["colour"]))
    for col, cluster in enumerate(clusters):
        acc, loss = axes[0, col], axes[1, col]
        here = evaluations[evaluations["cluster"] == cluster] if len(evaluations) else evaluations
        if per_seed:
            for k, ev in (here.groupby("k", sort=True) if len(here) else ()):
                style = dict(color=styles["colour"][k], ls=styles["ls"][k], lw=1.4, alpha=0.9,
                             label=_wrapped(styles["label"][k]), marker="o" if len(ev) <= 25 else None, ms=2.5)
                acc.plot(ev["time"], ev["accuracy"], **style)
                loss.plot(ev["time"], ev["loss"], **style)
        else:
            for ax, column in ((acc, "accuracy"), (loss, "loss")):
                for group, t, mean, low, high, runs in mean_curves(here, column):
                    c = colour_of[group]
                    label = _wrapped(group + (f" ({runs} seeds)" if runs > 1 else ""))
                    ax.plot(t, mean, color=c, lw=1.6, label=label)
                    if runs > 1:
                        ax.fill_between(t, low, high, color=c, alpha=0.18, lw=0)
        if target is not None:
            acc.axhline(target, color="black", ls="--", lw=0.8)
        if len(here):
            lo, hi = (min(here["accuracy"].min(), target if target is not None else 1.0),
                      max(here["accuracy"].max(), target if target is not None else 0.0))
            margin = 0.05 * (hi - lo) or 0.02
            acc.set_ylim(lo - margin, hi + margin)
        acc.set_title(_title(short[cluster] + ("" if per_seed else ": mean over seeds, band: their range"), 75),
                      fontsize=10)
        acc.set_ylabel("test accuracy")
        loss.set_ylabel("test loss")
        loss.set_yscale("log")
        loss.set_xlabel(time_label(logs))
        for ax in (acc, loss):
            ax.grid(alpha=0.3)
        if len(here):
            loss.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    return _save(fig, path)


def _accuracy_multiples(logs, evaluations, styles, clusters, path: str, target: float | None) -> str:
    """The accuracy figure as small multiples: a row of panels per cluster,
    a panel per entry (its mean and band in its colour, the other entries'
    means in grey), the same axes everywhere."""
    short = {heterogeneity(log.config): heterogeneity(log.config, short=True) for log in logs}
    groups = list(dict.fromkeys(styles["group"]))
    cols = 4
    rows_per = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows_per * len(clusters), cols, figsize=(3.4 * cols, 2.6 * rows_per * len(clusters) + 0.6),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    colour_of = dict(zip(styles["group"], styles["colour"]))
    for c, cluster in enumerate(clusters):
        here = evaluations[evaluations["cluster"] == cluster] if len(evaluations) else evaluations
        curves = {g: rest for g, *rest in mean_curves(here)}
        for j, group in enumerate(groups):
            ax = axes[c * rows_per + j // cols, j % cols]
            for other, (t, mean, *_) in curves.items():
                if other != group:
                    ax.plot(t, mean, color="0.82", lw=0.8)
            if group in curves:
                t, mean, low, high, runs = curves[group]
                ax.fill_between(t, low, high, color=colour_of[group], alpha=0.25, lw=0)
                ax.plot(t, mean, color=colour_of[group], lw=1.8)
            if target is not None:
                ax.axhline(target, color="black", ls="--", lw=0.7)
            ax.set_title(_title(group, 40), fontsize=8)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
        for j in range(len(groups), rows_per * cols):
            axes[c * rows_per + j // cols, j % cols].set_visible(False)
        axes[c * rows_per, 0].set_ylabel(_title(f"{short[cluster]}: test accuracy", 30), fontsize=8)
    fig.suptitle(f"test accuracy against {time_label(logs)}: each entry's mean over seeds (band: their range), "
                 "the other entries in grey", fontsize=9)
    return _save(fig, path)


# time to the target accuracy -------------------------------------------------
def target_frame(logs: list[RunLog], target: float):
    """One row per run: cluster, name (paradigm label), paradigm, group and
    colour (`run_labels`: its seeds share them), seconds to `target` (NaN:
    never reached), final accuracy (NaN: no evaluation)."""
    labels = run_labels(logs)
    return pd.DataFrame({
        "cluster": labels["cluster"],
        "name": [run_label(log) for log in logs],
        "paradigm": labels["paradigm"],
        "group": labels["group"],
        "colour": labels["colour"],
        "time": [log.time_to_accuracy(target) for log in logs],
        "final": [float(log.evaluations["accuracy"][-1]) if len(log.evaluations) else math.nan
                  for log in logs],
    }).astype({"time": float})


def target_order(runs) -> list[str]:
    """`target_frame`'s groups, fastest mean time to the target first; then
    those that reached it in some of their runs only (their mean is of those
    runs: not comparable), fastest first; those that never reached it last."""
    by = runs.groupby("group", sort=False)["time"]
    key = pd.DataFrame({"partly": by.count() < by.size(), "mean": by.mean()})
    return key.sort_values(["partly", "mean"], kind="stable", na_position="last").index.tolist()


def time_to_target_figure(logs: list[RunLog], path: str, target: float) -> str:
    """A bar per setting (`run_labels`' group: runs differing by seed alone):
    seconds until the test accuracy first reached the target (mean over its
    runs, error bars from the fastest to the slowest run), fastest first
    (`target_order`); one panel per emulated cluster; the text gives the
    mean final accuracy."""
    short = {heterogeneity(log.config): heterogeneity(log.config, short=True) for log in logs}
    return target_bars(target_frame(logs, target), path, target,
                       time_label(logs, f"time to {100 * target:g}% test accuracy"), short)


def target_bars(runs, path: str, target: float, xlabel: str, titles: dict[str, str]) -> str:
    """time_to_target_figure's drawing, from `target_frame`'s columns (a results
    file's rows give them too: benchmarks/regenerate_figures.py); `titles`:
    cluster -> its panel's title."""
    names = list(dict.fromkeys(runs["group"]))
    clusters = list(dict.fromkeys(runs["cluster"]))
    fig, axes = plt.subplots(1, len(clusters), figsize=(8 * len(clusters), 1.2 + 0.5 * len(names)),
                             squeeze=False, layout="constrained")
    for ax, cluster in zip(axes[0], clusters):
        here = runs[runs["cluster"] == cluster]
        longest = float(here["time"].max()) if here["time"].notna().any() else 0.0
        names = target_order(here)
        for y, name in enumerate(names):
            members = here[here["group"] == name]
            if members.empty:
                continue
            times = members["time"].dropna()
            final = members["final"].mean()
            reached = f"{len(times)}/{len(members)} runs, " if len(members) > 1 else ""
            if len(times):
                mean = float(times.mean())
                # pale: reached in some runs only (a mean of those runs: ranked after the others)
                ax.barh(y, mean, color=members["colour"].iloc[0], alpha=0.85 if len(times) == len(members) else 0.35,
                        hatch="//" if members["name"].iloc[0] != members["paradigm"].iloc[0] else None,
                        edgecolor="white")
                if len(times) > 1:
                    ax.errorbar(mean, y, xerr=[[mean - times.min()], [times.max() - mean]], color="black",
                                capsize=3, lw=1)
                ax.text(times.max() + 0.01 * longest, y, f" {mean:.2f} s ({reached}final {100 * final:.1f}%)",
                        va="center", fontsize=8)
            else:
                ax.text(0, y, f" never reached {100 * target:g}% (final {100 * final:.1f}%)", va="center",
                        fontsize=8, color="tab:red")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels([_wrapped(n, 24) for n in names], fontsize=8)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.set_xlim(0, 1.8 * longest if longest else 1)
        ax.set_xlabel(xlabel)
        ax.set_title(_title(titles.get(cluster, cluster), 75), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


# per-worker timeline ------------------------------------------------------
def _ends(rows: np.ndarray) -> np.ndarray:
    return rows["start"] + rows["wait"] + rows["pull"] + rows["compute"] + rows["push"]


def _spans(rows: np.ndarray) -> dict[str, np.ndarray]:
    """Each iteration's seconds in each of SEGMENTS, in their order."""
    return {"wait": rows["wait"], "pull": rows["pull"], "work": rows["compute"] - rows["slowdown"],
            "slowdown": rows["slowdown"], "push": rows["push"]}


def default_window(log: RunLog) -> tuple[float, float]:
    """About TIMELINE_ITERATIONS iterations of the slowest worker, short
    enough that single iterations stay visible: from just before the first
    transient straggler, or else from a third of the run (past the warm-up)."""
    it = log.iterations
    ends = _ends(it)
    per = pd.DataFrame({"worker": it["worker"], "end": ends}).groupby("worker")["end"].agg(["max", "size"])
    period = float((per["max"] / per["size"]).max())
    width = min(float(ends.max()), TIMELINE_ITERATIONS * period)
    stragglers = log.events("straggler")
    lo = stragglers[0]["time"] - 0.2 * width if stragglers else ends.max() / 3
    lo = float(np.clip(lo, 0.0, ends.max() - width))
    return lo, lo + width


def straggler_spans(log: RunLog) -> list[tuple[int, float, float, float]]:
    """(worker, start, end, factor) of each transient straggler: from its
    first slowed iteration's start to its last one's end."""
    it = log.iterations
    order = np.lexsort((it["iteration"], it["worker"]))
    key = it["worker"][order].astype(np.int64) << 40 | it["iteration"][order]
    out = []
    for s in log.events("straggler"):
        first, last = np.searchsorted(key, [s["worker"] << 40 | s["iteration"],
                                            s["worker"] << 40 | (s["iteration"] + s["iterations"])])
        covered = it[order[first:last]]
        if len(covered):
            out.append((s["worker"], float(covered["start"][0]), float(_ends(covered)[-1]), s["factor"]))
    return out


def speed_classes(log: RunLog) -> list[tuple[str, np.ndarray]]:
    """The timeline's rows beyond TIMELINE_WORKERS workers, fastest first:
    the workers of each persistent slowdown factor (`--slowdown`), as
    (label, workers); with more than TIMELINE_CLASSES factors, ranges of
    factors holding as many workers each."""
    workers = np.unique(log.iterations["worker"])
    given = parse_slowdown(log.config.get("slowdown", ""))
    factors = np.array([given[w] if w < len(given) else 1.0 for w in workers])
    values = np.unique(factors)
    if len(values) <= TIMELINE_CLASSES:
        parts = [np.flatnonzero(factors == v) for v in values]
    else:
        parts = np.array_split(np.argsort(factors, kind="stable"), TIMELINE_CLASSES)
    names = [f"x{factors[p].min():g}" + (f"-{factors[p].max():g}" if np.ptp(factors[p]) else "") for p in parts]
    return [(f"{name} ({len(p)} worker{'s' * (len(p) > 1)})", workers[np.sort(p)]) for name, p in zip(names, parts)]


def _time_before(starts: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each x: the sum over `starts` of max(x - start, 0)."""
    s = np.sort(starts)
    n = np.searchsorted(s, x, side="right")
    return n * x - np.concatenate([[0.0], np.cumsum(s)])[n]


def segment_shares(rows: np.ndarray, edges: np.ndarray) -> dict[str, np.ndarray]:
    """Per segment (SEGMENTS' keys): the share of each bin between `edges`
    that the workers of these iterations spent in it, their mean."""
    workers = len(np.unique(rows["worker"]))
    t, out = rows["start"], {}
    for key, span in _spans(rows).items():
        # seconds of [t, t + span) before x: max(x - t, 0) - max(x - t - span, 0), summed
        covered = _time_before(t, edges) - _time_before(t + span, edges)
        out[key] = np.diff(covered) / (workers * np.diff(edges))
        t = t + span
    return out


def worker_nodes(log: RunLog) -> dict[int, str]:
    """Each worker's host, where the run ran on several ({} otherwise:
    the timeline then has no node to group by)."""
    by_node = log.by_node()
    if len(by_node) < 2:
        return {}
    return {r["index"]: host for host, ranks in by_node.items() for r in ranks if r["role"] == "worker"}


def node_groups(log: RunLog) -> list[tuple[str, np.ndarray]]:
    """The timeline's rows beyond TIMELINE_WORKERS workers on several
    nodes: the workers of each node, as (label, workers), nodes in the
    order of their first rank."""
    nodes = worker_nodes(log)
    hosts = list(dict.fromkeys(nodes.values()))
    workers = [np.array(sorted(w for w, h in nodes.items() if h == host)) for host in hosts]
    return [(f"{host} ({len(ws)} worker{'s' * (len(ws) > 1)})", ws) for host, ws in zip(hosts, workers)]


def _draw_workers(ax, log: RunLog, lo: float, hi: float) -> list[str]:
    """A Gantt row per worker, grouped by node where the run had several (a
    line between nodes); returns the rows' labels."""
    it = log.iterations
    nodes = worker_nodes(log)
    hosts = list(dict.fromkeys(nodes.values()))
    workers = sorted((int(w) for w in np.unique(it["worker"])),
                     key=lambda w: (hosts.index(nodes[w]) if w in nodes else 0, w))
    row = {w: y for y, w in enumerate(workers)}
    factors = parse_slowdown(log.config.get("slowdown", ""))
    for w in workers:
        rows = it[it["worker"] == w]
        t = rows["start"].copy()
        for (_, fill, _), span in zip(SEGMENTS, _spans(rows).values()):
            keep = (t + span >= lo) & (t <= hi)
            ax.broken_barh(list(zip(t[keep], span[keep])), (row[w] - 0.35, 0.7), facecolors=fill)
            t = t + span
    for w, first, last, factor in straggler_spans(log):
        ax.add_patch(plt.Rectangle((first, row[w] - 0.5), last - first, 1.0, color="red", alpha=0.12, lw=0))
        if first < hi and last > lo:
            ax.text(max(first, lo), row[w] - 0.37, f" straggler x{factor:g}", color="red",
                    fontsize=7, va="bottom", clip_on=True)
    for above, below in zip(workers, workers[1:]):
        if nodes.get(above) != nodes.get(below):
            ax.axhline(row[below] - 0.5, color="black", lw=0.8)
    return [f"worker {w}" + (f" (x{factors[w]:g})" if w < len(factors) else "")
            + (f" @ {nodes[w]}" if w in nodes else "") for w in workers]


def _groups(log: RunLog) -> list[tuple[str, np.ndarray]]:
    """The rows of a timeline of many workers: one per node where the run
    had several, else one per speed class."""
    return node_groups(log) if worker_nodes(log) else speed_classes(log)


def _draw_classes(ax, log: RunLog, lo: float, hi: float) -> list[str]:
    """A row per node or speed class (`_groups`): the mean share of each time bin its workers
    spent in each segment, stacked (white: untimed, or finished); red
    along a row's top: a worker of the class straggling. Returns the labels."""
    it = log.iterations
    classes = _groups(log)
    edges = np.linspace(lo, hi, TIMELINE_BINS + 1)
    spans = straggler_spans(log)
    for y, (_, workers) in enumerate(classes):
        members = set(workers.tolist())
        base = np.full(TIMELINE_BINS, y + 0.4)   # the row's bottom: the y axis points down
        shares = segment_shares(it[np.isin(it["worker"], workers)], edges)
        for (_, fill, _), share in zip(SEGMENTS, shares.values()):
            ax.stairs(base - 0.8 * share, edges, baseline=base, fill=True, color=fill, lw=0)
            base = base - 0.8 * share
        mine = [(first, last) for w, first, last, _ in spans if w in members]
        if mine:
            ax.hlines([y - 0.45] * len(mine), *zip(*mine), color="red", lw=2.5)
    return [name for name, _ in classes]


def _draw_timeline(ax, log: RunLog, lo: float, hi: float, per_worker: bool) -> None:
    labels = (_draw_workers if per_worker else _draw_classes)(ax, log, lo, hi)
    for e in _mode_events(log):
        if lo <= e["time"] <= hi:
            ax.axvline(e["time"], color="purple", lw=1.2)
            ax.text(e["time"], -0.45, f" {e['mode_name']}", color="purple", fontsize=7, va="top")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(lo, hi)
    ax.set_xlabel(time_label([log]))


def timeline_figure(log: RunLog, path: str, window: tuple[float, float] | None = None) -> str:
    """Gantt chart, one row per worker, each iteration split into wait, pull,
    compute, emulated slowdown and push; transient stragglers shaded red.
    Rows grouped by node where the run had several. Beyond
    TIMELINE_WORKERS workers, a row per node or speed class instead
    (`_draw_classes`), so that a thousand workers stay readable. Top: the
    whole run; bottom: a window where single iterations show."""
    it = log.iterations
    lo, hi = window or default_window(log)
    workers = len(np.unique(it["worker"]))
    per_worker = workers <= TIMELINE_WORKERS
    rows = workers if per_worker else len(_groups(log))
    panel = min(0.65 * rows, 7.5)   # inches: at most ~1,950 px in all
    fig, (whole, zoom) = plt.subplots(2, 1, figsize=(13, 2.6 + 2 * panel), layout="constrained")
    _draw_timeline(whole, log, 0.0, float(_ends(it).max()), per_worker)
    whole.axvspan(lo, hi, color="black", alpha=0.08, lw=0)
    grouped = "node" if worker_nodes(log) else "speed class"
    rows_are = (f"worker{', by node' if grouped == 'node' else ''}" if per_worker
                else f"{grouped} (mean share of each time bin)")
    whole.set_title(_title(f"{log.name}: {run_label(log)}, {heterogeneity(log.config, short=True)}, "
                           f"{workers} workers, a row per {rows_are} (whole run; shaded: the window below)",
                           150), fontsize=10)
    _draw_timeline(zoom, log, lo, hi, per_worker)
    zoom.set_title(f"{time_label([log])}: {lo:.2f} to {hi:.2f}", fontsize=9)
    fig.legend(handles=[Patch(color=c, label=lab) for _, c, lab in SEGMENTS]
               + [Patch(facecolor="white", edgecolor="grey",
                        label="untimed (tick, logging, scheduling)" + ("" if per_worker else " or finished")),
                  Patch(color="red", alpha=0.12 if per_worker else 1.0, label="transient straggler")],
               ncol=len(SEGMENTS) + 2, fontsize=8, loc="outside lower center")
    return _save(fig, path)


# staleness histograms -------------------------------------------------------
def staleness_figure(logs: list[RunLog], path: str) -> str:
    """Per run: how many updates each push missed (iteration staleness), and
    value staleness where the paradigm measured it. The x axis stops at the
    99.5th percentile (at least 5); the text gives the maximum."""
    cols = min(4, len(logs))
    nrows = math.ceil(len(logs) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.8 * nrows), squeeze=False)
    runs = run_labels(logs)
    for k, (ax, log) in enumerate(zip(axes.flat, logs)):
        it = log.iterations
        s = it["staleness"]
        ax.set_title(_title(f"{log.name} ({runs['label'][k]})", 45), fontsize=9)
        if not len(s):
            ax.text(0.5, 0.5, "no iterations logged", transform=ax.transAxes, ha="center")
            ax.set_axis_off()
            continue
        top = max(5, int(np.ceil(np.percentile(s, 99.5))))
        bins = np.arange(top + 2) - 0.5
        ax.hist(np.minimum(s, top), bins=bins, color=runs["colour"][k], alpha=0.8, label="iteration")
        column, measure = value_staleness_column(it)
        if column:
            v = it[column][np.isfinite(it[column])]
            ax.hist(np.minimum(v, top), bins=bins, histtype="step", color="black", label=f"value ({measure})")
            ax.legend(fontsize=7, loc="center right")
        ax.set_yscale("log")
        ax.set_xlim(bins[0], bins[-1])
        ax.text(0.97, 0.95, f"mean {s.mean():.2f}\nmax {s.max()}", transform=ax.transAxes,
                ha="right", va="top", fontsize=8)
        ax.set_xlabel(f"staleness (updates; last bin: >= {top})", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(logs):]:
        ax.set_visible(False)
    fig.tight_layout()
    return _save(fig, path)


# paradigm dynamics ----------------------------------------------------------
def _is_mode(event: dict) -> bool:
    """A Sync-Switch switch: an event with a 'mode' field or a kind naming a switch."""
    return "mode" in event or "switch" in event["kind"]


def _mode_events(log: RunLog) -> list[dict]:
    """The switches, each given a printable `mode_name`."""
    out = []
    for e in filter(_is_mode, log.events()):
        mode = e.get("mode", e.get("to", e["kind"]))
        if mode in (MODE_BSP, MODE_ASP):   # the control window's numeric flag
            mode = "BSP" if mode == MODE_BSP else "ASP"
        out.append({**e, "mode_name": str(mode).upper()})
    return out


def value_staleness_column(it: np.ndarray) -> tuple[str | None, str]:
    """The iterations column holding value staleness, where measured: the
    exact distance if logged, else its cheap upper bound."""
    for column, measure in (("value_staleness", "exact"), ("value_staleness_bound", "path-length bound")):
        if np.isfinite(it[column]).any():
            return column, measure
    return None, ""


def _varies(values: np.ndarray) -> bool:
    values = values[np.isfinite(values)]
    return len(values) > 1 and float(values.min()) != float(values.max())


# Each panel builder takes (log, events) and returns the (title, draw(ax)) pairs it
# can fill from this log: none when the paradigm did not log what it plots.
def _dssp_controller(log, events):
    r_star = [e for e in events if "r_star" in e]
    if not r_star:
        return []

    def draw(ax):
        t = [e["time"] for e in r_star]
        ax.scatter(t, [e["r_star"] for e in r_star], s=8, color=colour("dssp"), label="r*")
        if all("gap" in e for e in r_star):
            ax.plot(t, [e["gap"] for e in r_star], color="grey", lw=0.8, label="clock gap at the call")
        ax.set_ylabel("iterations")
        ax.legend(fontsize=7, loc="upper right")
    return [("DSSP controller: extra iterations r* granted to the fastest worker", draw)]


def _sync_mode(log, events):
    modes = _mode_events(log)
    if not modes:
        return []
    end = float(log.iterations["start"].max()) if len(log.iterations) else modes[-1]["time"]

    def draw(ax):
        names = list(dict.fromkeys(["BSP", "ASP"] + [e["mode_name"] for e in modes]))
        t = [0.0] + [e["time"] for e in modes] + [end]
        y = [names.index("BSP")] + [names.index(e["mode_name"]) for e in modes]
        ax.step(t, y + y[-1:], where="post", color=colour("syncswitch"))
        for e in modes:
            if "reason" in e:
                ax.annotate(str(e["reason"]), (e["time"], names.index(e["mode_name"])), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
        ax.set_ylim(-0.5, len(names) - 0.5)
    return [("synchronization mode", draw)]


def _server_optimizer(log, events):
    s0 = log.applies[log.applies["server"] == 0]   # a global server (GSSP's group servers log too)
    lr_varies, momentum_varies = _varies(s0["lr"].astype(float)), _varies(s0["momentum"].astype(float))
    if not (lr_varies or momentum_varies):
        return []

    def draw(ax):
        if lr_varies:
            ax.plot(s0["time"], s0["lr"], color="black", lw=1)
            ax.set_ylabel("learning rate")
        if momentum_varies:
            twin = ax.twinx() if lr_varies else ax
            twin.plot(s0["time"], s0["momentum"], color="tab:red", lw=1)
            twin.set_ylabel("momentum", color="tab:red")
    return [("server optimizer (server 0)", draw)]


def _per_worker(log, column: str, title: str, ylabel: str, *, lines: bool = False):
    """A panel of one iterations column against time, a series per worker."""
    it = log.iterations

    def draw(ax):
        for w in sorted(int(x) for x in np.unique(it["worker"])):
            rows = it[it["worker"] == w]
            if lines:
                ax.plot(rows["start"], rows[column], lw=1, label=f"worker {w}")
            else:
                ax.scatter(rows["start"], rows[column], s=4, label=f"worker {w}")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, ncol=4, loc="best", markerscale=3)
    return [(title, draw)]


def _batch_sizes(log, events):
    it = log.iterations
    # a global budget's last claim may be cut short: that is no decision
    if not _varies(it["batch"][~_last_of_each_worker(it)].astype(float)):
        return []
    return _per_worker(log, "batch", "batch size per worker", "samples", lines=True)


def _lr_scales(log, events):
    if not _varies(log.iterations["lr_scale"].astype(float)):
        return []
    return _per_worker(log, "lr_scale", "learning-rate scale of each push", "lr scale")


def _value_staleness(log, events):
    column, measure = value_staleness_column(log.iterations)
    if not column:
        return []
    return _per_worker(log, column, f"value staleness of each push ({measure}, in average updates)",
                       "value staleness")


def _predicted_speed(log, events):
    speeds = [e for e in events if "predicted" in e and "actual" in e and "worker" in e]
    if not speeds:
        return []

    def draw(ax):
        for w in sorted({e["worker"] for e in speeds}):
            mine = [e for e in speeds if e["worker"] == w]
            line, = ax.plot([e["time"] for e in mine], [e["actual"] for e in mine], lw=1, label=f"worker {w}")
            ax.plot([e["time"] for e in mine], [e["predicted"] for e in mine], lw=1, ls="--",
                    color=line.get_color())
        ax.set_ylabel("samples/s")
        ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
    return [("speed of each worker: measured (solid) and predicted (dashed)", draw)]


def _gssp_exchanges(log, events):
    exchanges = log.exchanges
    if not len(exchanges):
        return []
    groups = [e["groups"] for e in events if "group" in e["kind"] and "groups" in e]
    members = groups[-1] if groups else []
    ids = sorted(int(x) for x in np.unique(exchanges["group"]))

    def draw_count(ax):
        for g in ids:
            rows = exchanges[exchanges["group"] == g]
            who = f" (workers {', '.join(map(str, members[g]))})" if g < len(members) else ""
            ax.plot(rows["time"], rows["exchange"], lw=1.2, color=f"C{g}", label=f"group {g}{who}")
        ax.set_ylabel("exchanges so far")
        ax.legend(fontsize=7, loc="upper left")

    def draw_ratio(ax):
        for g in ids:
            rows = exchanges[exchanges["group"] == g]
            ax.plot(rows["time"], rows["bytes_sent"] / np.maximum(rows["bytes_dense"], 1), lw=1,
                    color=f"C{g}", label=f"group {g}: bytes sent / dense")
            ax.plot(rows["time"], rows["ratio"], ls="--", lw=1.5, color=f"C{g}", label=f"group {g}: upload ratio c")
        ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=2, loc="lower left")
    panels = [("GSSP: exchanges of each group server with the global servers", draw_count)]
    if np.isfinite(exchanges["ratio"]).any():
        panels.append(("GDTopK: upload ratio and bytes of each exchange", draw_ratio))
    return panels


def _last_of_each_worker(it) -> np.ndarray:
    last = np.zeros(len(it), dtype=bool)
    for w in np.unique(it["worker"]):
        rows = np.flatnonzero(it["worker"] == w)
        last[rows[np.argmax(it["iteration"][rows])]] = True
    return last


PANELS = [_dssp_controller, _sync_mode, _server_optimizer, _batch_sizes, _lr_scales, _value_staleness,
          _predicted_speed, _gssp_exchanges]


def _other_events(events, kinds):
    def draw(ax):
        for row, kind in enumerate(kinds):
            t = [e["time"] for e in events if e["kind"] == kind]
            ax.plot(t, [row] * len(t), "|", ms=10, color="black")
        ax.set_yticks(range(len(kinds)))
        ax.set_yticklabels([f"{k} ({sum(e['kind'] == k for e in events)})" for k in kinds], fontsize=8)
        ax.set_ylim(len(kinds) - 0.5, -0.5)
    return ("other events (count)", draw)


def dynamics_panels(log: RunLog) -> list:
    """The panels this run's log can fill, as (title, draw(ax)) pairs; empty
    when the paradigm logged nothing beyond what every run has."""
    events = log.events()
    panels = [panel for build in PANELS for panel in build(log, events)]
    # the rest (GSSP's regroupings, LB-BSP's rounds, checkpoints, ...)
    kinds = list(dict.fromkeys(e["kind"] for e in events if e["kind"] not in TIMELINE_EVENTS
                               and "r_star" not in e and not _is_mode(e)))
    if kinds and (panels or any(not k.startswith(RUNTIME_EVENTS) for k in kinds)):
        panels.append(_other_events(events, kinds))
    return panels


def dynamics_figure(log: RunLog, path: str) -> str | None:
    """The paradigm's decisions over time; None (no file) when there are none."""
    panels = dynamics_panels(log)
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 0.6 + 2.2 * len(panels)), sharex=True,
                             squeeze=False)
    for ax, (title, draw) in zip(axes[:, 0], panels):
        draw(ax)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(time_label([log]))
    fig.suptitle(_title(f"{log.name}: {run_label(log)}, {heterogeneity(log.config, short=True)}", 120),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    return _save(fig, path)


# all of it ------------------------------------------------------------------
def plot_runs(run_dirs: list[str], out_dir: str, *, target: float | None = 0.9,
              window: tuple[float, float] | None = None, per_run: list[str] | None = None,
              labels: dict[str, str] | None = None, per_seed: bool = False) -> list[str]:
    """Every figure for these runs into out_dir; returns the files written.
    Timelines and dynamics only for the runs in `per_run` (default: all).
    `labels` (run directory -> name): what the runs it names are called.
    `per_seed`: the accuracy figure draws every run, not each setting's mean."""
    os.makedirs(out_dir, exist_ok=True)
    logs = labelled([RunLog(d) for d in run_dirs], labels)
    for log in logs:   # drawn from what could be read, as summarize's rows
        if log.problems:
            print(f"plot: damaged run log {log.name}: {'; '.join(log.problems)}", file=sys.stderr)
    written: list[str | None] = [accuracy_figure(logs, os.path.join(out_dir, "accuracy.png"), target,
                                                 per_seed=per_seed),
               staleness_figure(logs, os.path.join(out_dir, "staleness.png"))]
    if target is not None:
        written.append(time_to_target_figure(logs, os.path.join(out_dir, "time_to_target.png"), target))
    for log in logs:
        if per_run is not None and log.run_dir not in per_run:
            continue
        if len(log.iterations):
            written.append(timeline_figure(log, os.path.join(out_dir, f"timeline-{log.name}.png"), window))
        written.append(dynamics_figure(log, os.path.join(out_dir, f"dynamics-{log.name}.png")))
    return [p for p in written if p]


def _window(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError("START:END in seconds, e.g. 2:4") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):   # (an infinite one ended in a ValueError of matplotlib's)
        raise argparse.ArgumentTypeError("START:END in finite seconds, e.g. 2:4")
    if not hi > lo:
        raise argparse.ArgumentTypeError("END must be after START")
    return lo, hi


def main(argv=None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, or a directory of them")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="where the PNG files go")
    p.add_argument("--target", type=number_in(0, 1, low_open=True), default=0.9, help="accuracy line drawn on the accuracy plot")
    p.add_argument("--window", type=_window, metavar="START:END",
                   help="timeline window in seconds (default: the first ~40 iterations of the slowest worker)")
    p.add_argument("--per-seed", action="store_true",
                   help="accuracy.png: a line per run (seeds in line styles) instead of each setting's mean and band")
    args = p.parse_args(argv)
    try:
        runs = find_runs(args.runs)
    except FileNotFoundError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    try:
        for path in plot_runs(runs, args.out, target=args.target, window=args.window, per_seed=args.per_seed):
            print(path)
    except LogError as e:   # a run.h5 that cannot be read: one line, as info and summarize
        print(f"plot: {e}", file=sys.stderr)
        return 2
    except OSError as e:    # the output: a file where the folder should be, read-only, a full disk
        print(f"plot: cannot write into {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
