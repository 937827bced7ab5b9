"""`mpips compare --simulate --parallel 2`: two paradigms x two seeds, each run a
process of its own, two at a time, then the table (in the plan's order), its mean over seeds, the files and the figures.
Simulated runs are deterministic, so each must be the run `mpips simulate`
gives for the same settings."""
from __future__ import annotations

import csv

import matplotlib.image
import numpy as np
import pytest

from mpips.cli import main
from mpips.io.log import RunLog

JOB = ["--workers", "3", "--slowdown", "1,1,2", "--epochs", "0.5", "--eval-every", "0.25"]
RUNS = ["bsp-s0", "ssp-s0", "bsp-s1", "ssp-s1"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare")
    code = main(["compare", "--simulate", "--parallel", "2", "--paradigms", "bsp,ssp", "--seeds", "0,1", *JOB,
                 "--target", "0.3",
                 "--runs", str(base / "runs"), "--out", str(base / "out")])
    return base, code


def test_every_run_is_the_simulation_of_its_settings(compared, tmp_path):
    base, code = compared
    assert code == 0
    for name in RUNS:
        log = RunLog(str(base / "runs" / name))
        assert log.status == "finished" and (base / "runs" / f"{name}.out").exists()
        paradigm, seed = name.split("-s")
        # run.h5 holds the shared settings and the paradigm's own (BSP has no staleness)
        assert (log.config["paradigm"], log.config["seed"], log.config.get("staleness")) == \
            (paradigm, int(seed), 3 if paradigm == "ssp" else None)
    # the same settings by hand give the same run, bit for bit
    assert main(["simulate", "--paradigm", "ssp", "--seed", "1", *JOB, "--run-dir", str(tmp_path / "ssp")]) == 0
    assert np.array_equal(RunLog(str(tmp_path / "ssp")).final_params(),
                          RunLog(str(base / "runs" / "ssp-s1")).final_params())


def test_table_means_files_and_figures(compared):
    base, _ = compared
    out = base / "out"
    with open(out / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["run"] for r in rows] == RUNS
    assert [(r["paradigm"], r["layout"], r["heterogeneity"]) for r in rows] == \
        [(p, "1+0+3", "slowdown 1,1,2") for p in ("bsp", "ssp", "bsp", "ssp")]
    for r, name in zip(rows, RUNS):
        assert float(r["final_accuracy"]) == pytest.approx(RunLog(str(base / "runs" / name)).summary()["final_accuracy"])
    markdown = (out / "table.md").read_text()
    table, means = markdown.split("Mean over seeds [0, 1]:")
    assert [line.split(" | ")[0] for line in table.splitlines()[2:] if line] == [f"| {n}" for n in RUNS]
    mean_lines = [line for line in means.splitlines() if line.startswith(("| bsp", "| ssp"))]
    assert len(mean_lines) == 2
    for line, paradigm in zip(mean_lines, ("bsp", "ssp")):
        accuracy = np.mean([float(r["final_accuracy"]) for r in rows if r["paradigm"] == paradigm])
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert cells[:5] == [paradigm, "1+0+3", "mlp on digits", "slowdown 1,1,2", "2"] and f"{100 * accuracy:.1f}%" in cells
    figures = {p.name for p in out.glob("*.png")}
    # timelines of the first seed's runs only; the other seed adds to the summaries
    assert figures == {"accuracy.png", "staleness.png", "time_to_target.png",
                       "timeline-bsp-s0.png", "timeline-ssp-s0.png"}
    for name in figures:
        image = matplotlib.image.imread(out / name)
        assert image.ndim == 3 and min(image.shape[:2]) >= 100, name


def test_reuse_keeps_finished_runs_and_a_failed_run_is_left_out(compared, capsys):
    base, _ = compared
    capsys.readouterr()
    # asp has no run yet and cannot finish in 10 ms: it fails; bsp-s0 is kept, not trained again
    assert main(["compare", "--simulate", "--paradigms", "bsp,asp", *JOB, "--reuse", "--timeout", "0.01",
                 "--runs", str(base / "runs"), "--out", str(base / "again")]) == 1
    captured = capsys.readouterr()
    assert "bsp-s0: finished earlier, kept" in captured.out
    assert "mpips: run asp-s0 failed: no result within 0.01 s" in captured.err
    with open(base / "again" / "table.csv") as fh:
        assert [r["run"] for r in csv.DictReader(fh)] == ["bsp-s0"]
    assert "Mean over seeds" not in (base / "again" / "table.md").read_text()


def test_an_entry_with_settings_is_named_by_it_in_the_table_and_figures(tmp_path):
    # Local SGD in its two modes beside SSP: the runs' logs all say "localsgd" or "ssp", the
    # comparison's rows and means say the entries, and the settings column does not
    # repeat what the entries say (local_mode, dylu: each entry's runs agree on them)
    entries = ["ssp", "localsgd", "localsgd:local_mode=async:dylu=true"]
    assert main(["compare", "--simulate", "--parallel", "2", "--paradigms", ",".join(entries), "--seeds", "0",
                 *JOB, "--target", "0.3", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    names = ["ssp-s0", "localsgd-s0", "localsgd-local_modeasync-dylutrue-s0"]
    configs = [RunLog(str(tmp_path / "runs" / n)).config for n in names]
    assert [(c["paradigm"], c.get("local_mode"), c.get("dylu")) for c in configs] == \
        [("ssp", None, None), ("localsgd", "sync", False), ("localsgd", "async", True)]
    with open(tmp_path / "out" / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["run"], r["paradigm"], r["settings"]) for r in rows] == [(n, e, "") for n, e in zip(names, entries)]
    lines = (tmp_path / "out" / "table.md").read_text().splitlines()
    assert [line.split(" | ")[1] for line in lines[2:5]] == entries
    assert (tmp_path / "out" / "timeline-localsgd-local_modeasync-dylutrue-s0.png").exists()


def test_reuse_trains_a_damaged_run_again(compared, capsys):
    """A finished run whose log is damaged is not kept: it was, and its row
    counted only what could be read."""
    import h5py

    base, _ = compared
    path = base / "runs" / "ssp-s1" / "rank-1.h5"
    with h5py.File(path, "r") as f:
        block = f["iterations"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    data[block.byte_offset + 100:block.byte_offset + 108] = bytes(range(0x51, 0x59))
    path.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["compare", "--simulate", "--paradigms", "ssp", "--seeds", "1", *JOB, "--reuse",
                 "--runs", str(base / "runs"), "--out", str(base / "redone")]) == 0
    captured = capsys.readouterr()
    assert "ssp-s1: damaged run log (rank-1.h5 damaged: rows left out" in captured.err
    assert "finished earlier, kept" not in captured.out
    assert RunLog(str(base / "runs" / "ssp-s1")).problems == []
