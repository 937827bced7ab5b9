"""The one statistic `mpips compare` and `mpips plan` rank by, and the verdict
each prints with its reasons.

- A run's time to the target: the first evaluation at which the mean
  accuracy of it and the TARGET_EVALUATIONS - 1 before reached it
  (io/log.time_to_target). The first single evaluation at the target is the
  chance of one point of an asynchronous run's oscillating accuracy; compare
  counted it where plan used the mean of 3, and the two disagreed.
- An entry's (a candidate's) rank: by the mean of its seeds' times plus the
  mean's standard error, those that every seed brought to the target first;
  without a target, by the mean accuracy. Only entries every seed of which
  ran are ranked: a failed run is not an answer (plan recommended a
  candidate whose every run had failed).
- The verdict: the first entry, why (its time, wait share, staleness and
  accuracy beside the runner-up's), and whether the gap to the runner-up
  exceeds the seeds' noise (twice the standard error of the difference of
  the two means) or not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

TARGET_EVALUATIONS = 3
STOP_AFTER = 3.0   # plan: a run this many times slower to the target than the best known is hopeless
EVALUATIONS_PER_RUN = 40   # the default --eval-every: epochs / this (a time to the target is not one interval)


def eval_every(epochs: float) -> float:
    """The evaluation interval, in epochs, that compare and plan default to:
    fine enough that the time to the target is not quantized by it (at
    compare's old default of one epoch every run reached 85% at its first
    evaluation, and at 0.2 SSP and LB-BSP swapped places)."""
    return epochs / EVALUATIONS_PER_RUN


@dataclass
class Run:
    """One run of an entry (candidate) and seed: what the ranking, the verdict
    and plan's figure need."""
    candidate: str
    seed: int
    run_dir: str
    time_to_target: float | None
    final_accuracy: float           # at the end of the run, or where it was stopped (stopped_at)
    seconds: float                  # (virtual) seconds of the whole run: to its budget, or stopped
    bytes_sent: int
    stopped_at: float = 0.0         # the time limit that cut it as hopeless (0: ran its budget)
    curve: list = field(default_factory=list)   # (seconds, accuracy) of its evaluations
    job_seconds: float = 0.0        # wall seconds the simulation took
    failed: str = ""                # why it failed (diverged, a paradigm's error): not ranked
    wait_share: float = 0.0         # the workers' mean share of time spent waiting
    staleness: float = 0.0          # the mean staleness of its pushes

    @property
    def outcome(self) -> str:
        """reached, stopped (cut as hopeless), not reached (ran its budget), or failed."""
        if self.failed:
            return "failed"
        if self.time_to_target is not None:
            return "reached"
        return "stopped" if self.stopped_at else "not reached"

    @classmethod
    def from_log(cls, candidate: str, run_dir: str, target: float | None, *, evaluations: int = TARGET_EVALUATIONS,
                 stopped_at: float = 0.0, job_seconds: float = 0.0) -> "Run":
        from ..io.log import RunLog

        log = RunLog(run_dir)
        s, ev = log.summary(), log.evaluations
        return cls(candidate, int(log.config["seed"]), run_dir,
                   log.time_to_accuracy(target, evaluations) if target else None,
                   float(s["final_accuracy"] or 0.0), float(s["wall_seconds"]), int(s["bytes_sent"]),
                   stopped_at, [(float(t), float(a)) for t, a in zip(ev["time"], ev["accuracy"])], job_seconds,
                   wait_share=float(s["mean_wait_fraction"]), staleness=float(s["mean_staleness"]))


def failures(runs: list[Run]) -> dict[str, str]:
    """{entry: 'seed S: why'} of each entry a run of which failed (not ranked)."""
    out: dict[str, str] = {}
    for r in runs:
        if r.failed and r.candidate not in out:
            out[r.candidate] = f"seed {r.seed}: {r.failed}"
    return out


def rank(runs: list[Run], target: float | None):
    """One row per entry every run of which ran, best first (a pandas
    DataFrame). With a target: those every seed brought to it, by the mean
    time plus its standard error (of two predicted as fast, the one whose
    seeds agree is the safer choice: seen in a validation, ASP predicted
    3.75 s over seeds 2.99-4.67, asynchronous Local SGD 3.77 s, 3.45-4.17;
    ASP measured 18% slower), then the others by final accuracy; without,
    by the mean accuracy."""
    import numpy as np
    import pandas as pd

    failed = failures(runs)
    ran = [r for r in runs if r.candidate not in failed]
    columns = ["candidate", "seeds", "reached", "time_to_target", "time_error", "time_upper", "time_spread",
               "final_accuracy", "accuracy_error", "accuracy_spread", "seconds", "bytes_sent_mb", "stopped",
               "ran_out", "wait_share", "staleness"]
    rows = []
    for name in dict.fromkeys(r.candidate for r in ran):
        g = [r for r in ran if r.candidate == name]
        times = np.array([np.nan if r.time_to_target is None else r.time_to_target for r in g])
        accuracy = np.array([r.final_accuracy for r in g])
        every = bool(np.isfinite(times).all())
        rows.append({"candidate": name, "seeds": len(g), "_hits": int(np.isfinite(times).sum()),
                     "reached": f"{int(np.isfinite(times).sum())}/{len(g)}" if target else "",
                     "time_to_target": float(times.mean()) if every else np.nan,
                     "time_error": _error(times) if every else np.nan,
                     "time_upper": float(times.mean()) + _error(times) if every else np.nan,
                     "time_spread": f"{times.min():.2f}-{times.max():.2f}" if every else "",
                     "final_accuracy": float(accuracy.mean()), "accuracy_error": _error(accuracy),
                     "accuracy_spread": f"{100 * accuracy.min():.1f}-{100 * accuracy.max():.1f}",
                     "seconds": float(np.mean([r.seconds for r in g])),
                     "bytes_sent_mb": float(np.mean([r.bytes_sent for r in g]) / 1e6),
                     "stopped": sum(r.outcome == "stopped" for r in g),
                     "ran_out": sum(r.outcome == "not reached" for r in g),
                     "wait_share": float(np.mean([r.wait_share for r in g])),
                     "staleness": float(np.mean([r.staleness for r in g]))})
    table = pd.DataFrame(rows, columns=["_hits", *columns])
    if target:
        table = table.sort_values(["_hits", "time_upper", "final_accuracy"], ascending=[False, True, False],
                                  kind="stable")
    else:
        table = table.sort_values("final_accuracy", ascending=False, kind="stable")
    table = table.drop(columns="_hits")
    table.insert(0, "rank", range(1, len(table) + 1))
    return table.reset_index(drop=True)


def _error(values) -> float:
    """The standard error of the mean (0 for one value)."""
    import numpy as np

    values = np.asarray(values, float)
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def render(table, target: float | None, time_limit: float = 0.0, evaluations: int = TARGET_EVALUATIONS) -> str:
    """The ranking as text (Markdown), times in (predicted) seconds. A
    candidate whose runs did not all reach the target says how each ended
    (stopped as hopeless, or its budget spent), and its accuracy where a run
    was stopped is not called final."""
    t = table.copy()
    heads = {"rank": "rank", "candidate": "candidate", "seeds": "seeds", "final_accuracy": "final accuracy %",
             "accuracy_spread": "accuracy range %", "seconds": "run s", "bytes_sent_mb": "bytes sent MB",
             "wait_share": "wait %", "staleness": "staleness"}
    t["final_accuracy"] = [f"{100 * a:.1f}" + (" (at stop)" if stopped else "")
                           for a, stopped in zip(t["final_accuracy"], t["stopped"])]
    t["seconds"] = t["seconds"].map("{:.2f}".format)
    t["bytes_sent_mb"] = t["bytes_sent_mb"].map("{:.1f}".format)
    t["wait_share"] = (100 * t["wait_share"]).map("{:.1f}".format)
    t["staleness"] = t["staleness"].map("{:.2f}".format)
    if target:
        t["time_to_target"] = [f"{v:.2f}" if v == v else _unreached(stopped, ran_out)
                               for v, stopped, ran_out in zip(t["time_to_target"], t["stopped"], t["ran_out"])]
        t["time_upper"] = t["time_upper"].map(lambda v: "" if v != v else f"{v:.2f}")
        mean = f" (mean of {evaluations} evaluations)" if evaluations > 1 else ""
        heads = {**heads, "reached": "reached", "time_to_target": f"time to {100 * target:g}%{mean} s",
                 "time_spread": "time range s", "time_upper": "mean + its standard error s (ranked by)"}
        order = ["rank", "candidate", "time_to_target", "time_spread", "time_upper", "reached", "final_accuracy",
                 "accuracy_spread", "wait_share", "staleness", "seconds", "bytes_sent_mb"]
    else:
        heads["final_accuracy"] = f"accuracy at {time_limit:g} s %"
        order = ["rank", "candidate", "final_accuracy", "accuracy_spread", "wait_share", "staleness", "seconds",
                 "bytes_sent_mb"]
    t = t[order].rename(columns=heads).astype(str)
    # (pandas' to_markdown needs tabulate, which mpips does not depend on)
    lines = ["| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in t.itertuples(index=False)]) + "\n"


def _unreached(stopped: int, ran_out: int) -> str:
    """How the runs short of the target ended: stopped as hopeless, or their budget spent."""
    parts = ([f"{stopped} stopped at {STOP_AFTER:g}x the best"] if stopped else []) + \
            ([f"{ran_out} ran out"] if ran_out else [])
    return "not reached" + (f" ({', '.join(parts)})" if parts else "")


def verdict(table, target: float | None, failed: dict[str, str] | None = None) -> str:
    """The first entry of the ranking and why, in a few lines: its time (or
    accuracy) with the seeds' range, its wait share, staleness and accuracy
    beside the runner-up's, and whether the gap exceeds the seeds' noise."""
    if table.empty:
        return ""
    best = table.iloc[0]
    lines = [f"winner: {best['candidate']}"]
    if target and best["time_to_target"] == best["time_to_target"]:
        lines.append(f"  {100 * target:g}% in {best['time_to_target']:.2f} s"
                     + _over_seeds(best, "time_spread", " s") + f"; {_traits(best)}")
    else:
        what = f"no entry brought every seed to {100 * target:g}%; by accuracy: " if target else ""
        lines.append(f"  {what}{100 * best['final_accuracy']:.1f}%" + _over_seeds(best, "accuracy_spread", "%")
                     + f"; {_traits(best, accuracy=False)}")
    if len(table) > 1:
        lines.append("  " + _against(best, table.iloc[1], target))
    if failed:
        lines.append("  not ranked (a run failed): " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return "\n".join(lines) + "\n"


def _over_seeds(row, spread: str, unit: str) -> str:
    return f" (mean of {row['seeds']} seeds, {row[spread]}{unit})" if row["seeds"] > 1 else " (one seed)"


def _traits(row, accuracy: bool = True) -> str:
    return (f"wait share {100 * row['wait_share']:.1f}%, mean staleness {row['staleness']:.2f}"
            + (f", final accuracy {100 * row['final_accuracy']:.1f}%" if accuracy else ""))


def _against(best, second, target: float | None) -> str:
    """The runner-up, the gap to it, and whether the seeds' noise covers it."""
    by_time = bool(target) and best["time_to_target"] == best["time_to_target"] \
        and second["time_to_target"] == second["time_to_target"]
    if by_time:
        gap = second["time_to_target"] - best["time_to_target"]
        noise = 2 * math.hypot(best["time_error"], second["time_error"])
        size = f"{second['time_to_target']:.2f} s, {100 * gap / best['time_to_target']:.0f}% slower"
    elif target and best["time_to_target"] == best["time_to_target"]:
        return (f"runner-up: {second['candidate']}, which did not bring every seed to {100 * target:g}% "
                f"({second['reached']}; {_traits(second)})")
    else:
        gap = best["final_accuracy"] - second["final_accuracy"]
        noise = 2 * math.hypot(best["accuracy_error"], second["accuracy_error"])
        size = f"{100 * second['final_accuracy']:.1f}%, {100 * gap:.1f} points less"
        gap, noise = 100 * gap, 100 * noise   # (points, as said)
    if min(best["seeds"], second["seeds"]) < 2:
        sure = "one seed: the seeds' noise is not known (more --seeds)"
    elif gap > noise:
        sure = f"the gap exceeds the seeds' noise ({noise:.2f} {'s' if by_time else 'points'}, 2 standard errors)"
    else:
        sure = (f"within the seeds' noise ({noise:.2f} {'s' if by_time else 'points'}, 2 standard errors): "
                f"no sure winner over it")
    return f"runner-up: {second['candidate']}, {size} ({_traits(second, accuracy=by_time)}); {sure}"
