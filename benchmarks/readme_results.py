"""The result tables of docs/results.md, generated from the results files, never edited by hand.

    python benchmarks/readme_results.py            # rewrite the generated blocks of docs/results.md
    python benchmarks/readme_results.py --check    # exit 1 if docs/results.md differs (tests/unit/test_docs.py)

A generated block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->`:
`claims` (the seed papers' claims per seed, benchmarks/claims.py) and `means` (per
paradigm and cluster: the mean over seeds, with the range where seeds differ) of the
comparison in results/paradigms-8.json (`make compare`); `claims-KEY` and `means-KEY`
of the other comparisons of `make study` (COMPARISONS), and `scale` (results/scale.json:
final accuracy and time to target per paradigm and worker count, means over seeds). The prose around
them is written by hand from them.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
from claims import render_markdown as render_claims

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/results.md"   # (the README's Results section until it became this page)
RESULTS = ROOT / "benchmarks" / "results"
# block-name suffix -> the comparison's results file (`make compare`, `make study`)
COMPARISONS = {"": "paradigms-8", "-mnist1d-32": "paradigms-mnist1d-32", "-mnist5k-8": "paradigms-mnist5k-8",
               "-mnist5k-32": "paradigms-mnist5k-32"}


def mean_table(rows: list[dict], target: float) -> str:
    """One row per paradigm and cluster: means over its seeds (a time to target over the
    seeds that reached it, with how many did), the range of the final accuracy."""
    df = pd.DataFrame(rows)
    df["cluster"] = df["run"].str.split("-").str[0].map({"het": "heterogeneous", "hom": "homogeneous"})
    lines = [f"| paradigm | cluster | S+G+W | seeds | time to {100 * target:.0f}% (s) | reached | "
             "final accuracy | range | updates/s | wait share | mean staleness | bytes sent (MB) |",
             "|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    order = list(dict.fromkeys(df["paradigm"]))
    for (cluster, paradigm), g in sorted(df.groupby(["cluster", "paradigm"]),
                                         key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        reached = g["time_to_target"].dropna()
        time = f"{reached.mean():.2f}" if len(reached) else "-"
        acc = 100 * g["final_accuracy"]
        lines.append(f"| {paradigm} | {cluster} | {g['layout'].iloc[0]} | {len(g)} | {time} | "
                     f"{len(reached)}/{len(g)} | {acc.mean():.1f}% | {acc.min():.1f}-{acc.max():.1f}% | "
                     f"{g['updates_per_second'].mean():.1f} | {100 * g['mean_wait_fraction'].mean():.1f}% | "
                     f"{g['mean_staleness'].mean():.2f} | {g['bytes_sent'].mean() / 1e6:.1f} |")
    return "\n".join(lines) + "\n"


def scale_table(data: dict) -> str:
    """Per paradigm and worker count: the mean final accuracy over its seeds and the mean
    virtual time to each target over the seeds that reached it (how many, when not all),
    as the study's own table has them (scale.over_seeds)."""
    from scale import over_seeds

    by = over_seeds(data["results"])
    workers = data["settings"]["workers"]
    targets = [int(100 * t) for t in data["settings"]["targets"]]
    lines = ["| paradigm | " + " | ".join(f"final, W={w}" for w in workers) + " | "
             + " | ".join(f"to {t}% (s), W={w}" for t in targets for w in workers) + " |",
             "|---|" + "---:|" * (len(workers) * (1 + len(targets)))]

    def time_to(r: dict, t: int) -> str:
        reached, n = r[f"reached_{t}"], r["seeds"] - r["failed_seeds"]
        return "-" if not reached else f"{r[f'time_to_{t}']:.1f}" + (f" ({reached}/{n})" if reached < n else "")

    for paradigm in dict.fromkeys(r["paradigm"] for r in data["results"]):
        ok = {w: r for w in workers if (r := by.get((paradigm, w))) and "failed" not in r}
        if not ok:
            continue
        final = [f"{100 * ok[w]['final_accuracy']:.1f}%" if w in ok else "failed" for w in workers]
        times = [time_to(ok[w], t) if w in ok else "-" for t in targets for w in workers]
        lines.append(f"| {paradigm} | " + " | ".join(final + times) + " |")
    return "\n".join(lines) + "\n"


def blocks() -> dict[str, str]:
    out = {}
    for suffix, name in COMPARISONS.items():
        data = json.loads((RESULTS / f"{name}.json").read_text())
        target = float(data["settings"]["target"])
        out["claims" + suffix] = render_claims(data["claims"])
        out["means" + suffix] = mean_table(data["rows"], target)
    out["scale"] = scale_table(json.loads((RESULTS / "scale.json").read_text()))
    return out


def render(readme: str) -> str:
    for name, text in blocks().items():
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
        if not pattern.search(readme):
            raise SystemExit(f"{PAGE} has no block `<!-- generated: {name} -->` ... `<!-- end: {name} -->`")
        readme = pattern.sub(lambda m: m.group(1) + "\n" + text + "\n" + m.group(2), readme)
    return readme


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} is not what the results give")
    args = ap.parse_args()
    path = ROOT / PAGE
    old = path.read_text()
    new = render(old)
    if args.check:
        if new != old:
            print(f"{PAGE}'s tables differ from benchmarks/results: run python benchmarks/readme_results.py",
                  file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
