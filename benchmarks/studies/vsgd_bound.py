"""VSGD: how close is the cheap path-length bound to the exact value staleness?

    python benchmarks/vsgd_bound.py              # 4 settings x 2 seeds, 2-10 min
    python benchmarks/vsgd_bound.py --seeds 0    # one seed each

Trains VSGD with `--value-measure exact`, so every push logs both measures
(the exact ||w_now - w_read|| / C, and the path-length bound / C), under ASP
gating with a heavy straggler, SSP gating, ASP with two servers (where the
bound sums shard norms and loosens by up to sqrt(2)), and ASP without
momentum (whose successive updates are less aligned). For the pushes that
missed something (exact > 0) it reports the ratio bound / exact, and what
matters for training: the learning-rate scale the bound would have given
beside the one the exact value gave.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: common.py
from common import mpiexec, table, write_results  # noqa: E402

SETTINGS = {
    "asp, 1,1,1,6": ["--gate", "asp", "--slowdown", "1,1,1,6"],
    "ssp s=3, 1,1,2,4": ["--gate", "ssp", "--staleness", "3", "--slowdown", "1,1,2,4"],
    "asp, 1,1,1,6, 2 servers": ["--gate", "asp", "--slowdown", "1,1,1,6", "--servers", "2"],
    "asp, 1,1,1,6, momentum 0": ["--gate", "asp", "--slowdown", "1,1,1,6", "--momentum", "0"],
}
COMMON = ["--paradigm", "vsgd", "--value-measure", "exact", "--epochs", "10",
          "--eval-every", "5"]


def compare(it: np.ndarray, rule: str, lam: float) -> dict:
    """Bound against exact over the pushes of one run's iterations table."""
    from mpips.paradigms.value_staleness import lr_scale

    exact = it["value_staleness"].astype(np.float64)
    bound = it["value_staleness_bound"].astype(np.float64)
    both = np.isfinite(exact) & np.isfinite(bound)
    moved = both & (exact > 0)
    ratio = bound[moved] / exact[moved]
    lr_exact = np.array([lr_scale(v, rule, lam) for v in exact[moved]])
    lr_bound = np.array([lr_scale(v, rule, lam) for v in bound[moved]])
    rel = np.abs(lr_bound - lr_exact) / lr_exact
    q = [0, 10, 50, 90, 99, 100]
    stale = it["staleness"][moved]
    by_staleness = {}
    for name, lo, hi in [("1", 1, 1), ("2-4", 2, 4), ("5-15", 5, 15), (">15", 16, 1 << 62)]:
        sel = (stale >= lo) & (stale <= hi)
        if sel.any():
            by_staleness[name] = {"n": int(sel.sum()), "median_ratio": float(np.median(ratio[sel]))}
    return {
        "pushes": int(len(it)),
        "both_logged": int(both.sum()),
        "moved": int(moved.sum()),
        "violations": int((both & (bound < exact * (1 - 1e-4) - 1e-6)).sum()),
        "ratio_quantiles": dict(zip(map(str, q), np.percentile(ratio, q).tolist())) if ratio.size else {},
        "ratio_within_1.1": float((ratio <= 1.1).mean()) if ratio.size else None,
        "lr_rel_diff_median": float(np.median(rel)) if rel.size else None,
        "lr_rel_diff_p90": float(np.percentile(rel, 90)) if rel.size else None,
        "lr_within_10pct": float((rel <= 0.1).mean()) if rel.size else None,
        "by_staleness": by_staleness,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    args = p.parse_args()
    from mpips.io.log import RunLog

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for name, flags in SETTINGS.items():
                run_dir = os.path.join(tmp, f"{len(runs)}")
                servers = int(flags[flags.index("--servers") + 1]) if "--servers" in flags else 1
                mpiexec(servers + 4, ["-m", "mpips", "train", *COMMON, *flags, "--seed", str(seed),
                                      "--run-dir", run_dir])
                log = RunLog(run_dir)
                r = compare(log.iterations, log.config["vsgd_rule"], log.config["vsgd_lambda"])
                r.update(setting=name, seed=seed, final_accuracy=log.summary()["final_accuracy"])
                runs.append(r)
                print(name, seed, r, file=sys.stderr, flush=True)

    rows = []
    for r in runs:
        rq = r["ratio_quantiles"]
        rows.append([r["setting"], r["seed"], r["moved"], r["violations"], rq.get("0"), rq.get("50"),
                     rq.get("90"), rq.get("100"), r["ratio_within_1.1"], r["lr_within_10pct"],
                     r["lr_rel_diff_p90"], r["final_accuracy"]])
    md = ("Ratio bound / exact value staleness over the pushes that missed something "
          "(exact > 0), and the learning-rate scale each would give (rule max).\n\n")
    md += table(["setting", "seed", "pushes", "bound < exact", "ratio min", "median", "p90", "max",
                 "ratio <= 1.1", "lr within 10%", "lr rel. diff p90", "accuracy"], rows)
    md += "\n\nMedian ratio by iteration staleness:\n\n"
    md += table(["setting", "seed", *["staleness " + k for k in ("1", "2-4", "5-15", ">15")]],
                [[r["setting"], r["seed"], *[r["by_staleness"].get(k, {}).get("median_ratio")
                                             for k in ("1", "2-4", "5-15", ">15")]] for r in runs])
    write_results("vsgd_bound", {"settings": SETTINGS, "common": COMMON, "runs": runs}, md)


if __name__ == "__main__":
    main()
