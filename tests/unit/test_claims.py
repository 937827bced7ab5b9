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
