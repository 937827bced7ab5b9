"""benchmarks/claims.py: the claims' values per seed and their verdicts on
rows made by hand, where a run never reached the target above all (a
speed-up of a paradigm that never got there read -1.00), and the claims of a
results file recomputed from its rows."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import claims  # noqa: E402

HET = "slowdown 1x4,2.06x4; random stragglers 0.01:10:4"
HOM = "random stragglers 0.01:10:4"


def row(paradigm, seed=0, cluster="het", t=None, e=None, acc=0.95, layout="1+0+8", **more):
    return {"run": f"{cluster}-{paradigm}-s{seed}", "paradigm": paradigm, "seed": seed, "layout": layout,
            "heterogeneity": HET if cluster == "het" else HOM, "time_to_target": t, "epochs_to_target": e,
            "final_accuracy": acc, "wall_seconds": 100.0, "bytes_sent": 1e6, **more}


def claim(found, text):
    return next(c for c in found if c["claim"].startswith(text))


def check(rows):
    return claims.verdicts(rows, claims.clusters_of(rows))


def test_a_speed_up_of_a_paradigm_that_never_reached_the_target_reads_never():
    found = check([row("bsp", 0, t=50.0), row("gssp", 0, t=None), row("ssp", 0, t=60.0),
                   row("bsp", 1, t=50.0), row("gssp", 1, t=25.0), row("ssp", 1, t=None)])
    over_bsp = claim(found, "GSSP is 46% to 120% faster than BSP")
    assert over_bsp["seeds"] == [math.inf, 1.0] and over_bsp["verdict"] == "partly (1/2 seeds)"
    over_ssp = claim(found, "GSSP is 46% to 120% faster than SSP")
    # seed 1: SSP never reached it, GSSP did: the claim holds there, and says why
    assert over_ssp["seeds"] == [math.inf, "SSP never"] and over_ssp["verdict"] == "partly (1/2 seeds)"
    table = claims.render_markdown(found)
    line = next(x for x in table.splitlines() if "faster than BSP" in x)
    assert "| never, 1.00 | 1.00 | 1.00 .. never | partly (1/2 seeds) |" in line and "-1.00" not in table
    assert "| never, SSP never | never | never .. never |" in next(x for x in table.splitlines()
                                                                 if "faster than SSP" in x)


def test_a_ratio_with_a_run_that_never_reached_it():
    found = check([row("dssp", 0, t=None), row("bsp", 0, t=50.0), row("dssp", 1, t=40.0), row("bsp", 1, t=None)])
    sooner = claim(found, "DSSP reaches the target sooner than BSP")
    assert sooner["seeds"] == [math.inf, 0.0] and sooner["verdict"] == "partly (1/2 seeds)"


def test_the_modern_baselines_claims():
    sync, async_ = "localsgd", claims.async_local_sgd(8)
    rows = [row("bsp", 0, "hom", t=40.0, e=10.0, acc=0.960), row("backup", 0, "hom", t=30.0, e=10.0, acc=0.955),
            row(sync, 0, "hom", t=45.0, e=13.0, acc=0.950),
            row("bsp", 0, "het", t=60.0, e=10.0, acc=0.960), row(sync, 0, "het", t=None, e=None, acc=0.90),
            row(async_, 0, "het", t=30.0, e=11.0, acc=0.945),
            # the same entry at 32 workers is another setup: its DN is not the 32-worker one
            row(claims.async_local_sgd(32), 0, "hom", t=1.0, e=1.0)]
    found = check(rows)
    pushes = [c for c in found if c["quantity"] == "pushes to target, BSP / DiLoCo"]
    assert [(c["cluster"], c["seeds"], c["verdict"]) for c in pushes] == \
        [("heterogeneous", [math.inf], "no"), ("homogeneous", [8 * 10.0 / 13.0], "no")]   # under H / 1.25 = 6.4
    assert claim(found, "DiLoCo ends at BSP's accuracy")["seeds"] == [pytest.approx(-6.0)]
    faster = claim(found, "Asynchronous Local SGD")
    assert (faster["paradigm"], faster["cluster"], faster["seeds"], faster["verdict"]) == \
        (claims.ASYNC_LOCAL, "heterogeneous", [0.0], "yes")   # sync never reached it
    assert claim(found, "... at about the same accuracy")["seeds"] == [pytest.approx(4.5)]
    assert claim(found, "Backup workers reach the target sooner")["seeds"] == [0.75]
    same = claim(found, "Backup workers have BSP's accuracy")
    assert same["seeds"] == [pytest.approx(-0.5)] and same["verdict"] == "yes"
    rows[2]["epochs_to_target"] = 12.5   # 8 x 10 / 12.5 = 6.4: the bound itself
    assert [c["verdict"] for c in check(rows) if c["quantity"] == "pushes to target, BSP / DiLoCo"] == ["no", "yes"]


def test_asynchronous_local_sgd_is_named_so_with_or_without_its_outer_momentum():
    """Results made while 0.9 was every mode's outer momentum name the entry
    without it; their rows are still the claims' asynchronous Local SGD."""
    now = claims.async_local_sgd(8)
    assert now.endswith(":outer_momentum=0.9")
    before = now.removesuffix(":outer_momentum=0.9")
    rows = [row("bsp", 0, t=60.0), row("localsgd", 0, t=None), row(before, 0, t=30.0)]
    for entry in (now, before):
        rows[2] = row(entry, 0, t=30.0)
        assert claim(check(rows), "Asynchronous Local SGD")["verdict"] == "yes"


def test_a_results_file_gets_its_claims_again_from_its_rows(tmp_path):
    rows = [row("bsp", 0, t=50.0), row("gssp", 0, t=None)]
    stale = [{"paradigm": "gssp", "cluster": "heterogeneous", "claim": "GSSP is 46% to 120% faster than BSP to the "
              "same accuracy", "quantity": "speed-up over BSP to target", "seeds": [-1.0], "mean": -1.0, "min": -1.0,
              "max": -1.0, "verdict": "no"}]
    (tmp_path / "cmp.json").write_text(json.dumps({"settings": {"x": 1}, "claims": stale, "rows": rows}))
    before = "# cmp\n\nheader\n\n## The seed papers' claims\n\n"
    after = "\n## Every run\n\n| run |\n|---|\n| het-bsp-s0 |\n"
    (tmp_path / "cmp.md").write_text(before + claims.render_markdown(stale) + after)
    found = claims.refresh("cmp", str(tmp_path))
    assert (tmp_path / "cmp.md").read_text() == before + claims.render_markdown(found) + after
    data = json.loads((tmp_path / "cmp.json").read_text())
    assert data["settings"] == {"x": 1} and data["rows"] == rows
    assert [c["seeds"] for c in data["claims"]] == [[math.inf], [0.0]]   # speed-up, accuracy and "never" in (tmp_path / "cmp.md").read_text()
