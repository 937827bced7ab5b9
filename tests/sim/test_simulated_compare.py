"""`mpips compare --simulate --parallel 2`: two paradigms x two seeds, each run a
process of its own, two at a time, then the table (in the plan's order), its mean over seeds, the files and the figures.
Simulated runs are deterministic, so each must be the run `mpips simulate`
gives for the same settings."""
from __future__ import annotations

import csv
import os
import shutil

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
    markdown = (out / "table.md").read_text()
    table, rest = markdown.split("Mean over seeds [0, 1]:")
    means, ranked = rest.split("Ranked by the time to 30%")
    # the ranking's order: its winner's seeds first (each a simulation: the same order every time)
    order = [line.split(" | ")[1] for line in ranked.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert sorted(order) == ["bsp", "ssp"] and f"winner: {order[0]}" in ranked
    runs = [f"{p}-s{s}" for p in order for s in (0, 1)]
    assert [r["run"] for r in rows] == runs
    assert [(r["paradigm"], r["layout"], r["heterogeneity"]) for r in rows] == \
        [(n.split("-")[0], "1+0+3", "slowdown 1,1,2") for n in runs]
    for r, name in zip(rows, runs):
        assert float(r["final_accuracy"]) == pytest.approx(RunLog(str(base / "runs" / name)).summary()["final_accuracy"])
    assert [line.split(" | ")[0] for line in table.splitlines()[2:] if line] == [f"| {n}" for n in runs]
    mean_lines = [line for line in means.splitlines() if line.startswith(("| bsp", "| ssp"))]
    assert len(mean_lines) == 2
    for line, paradigm in zip(mean_lines, order):
        accuracy = np.mean([float(r["final_accuracy"]) for r in rows if r["paradigm"] == paradigm])
        cells = [c.strip() for c in line.split("|")[1:-1]]
        # nodes '-': a simulation has no hosts
        assert cells[:6] == [paradigm, "1+0+3", "-", "mlp on digits", "slowdown 1,1,2", "2"] and \
            f"{100 * accuracy:.1f}%" in cells
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


# --- what a comparison owns (#52: it deleted what it did not) ----------------------

SHORT = ["--simulate", "--workers", "2", "--epochs", "0.2", "--eval-every", "0.1"]


def test_a_comparison_refuses_runs_in_use(tmp_path, capsys):
    """A second comparison on one --runs, or a job running in a run directory:
    refused before any run (the second deleted the first's live run directory)."""
    from mpips.io.rundir import RunDirLock

    runs = tmp_path / "runs"
    (runs / "bsp-s0").mkdir(parents=True)
    for held, name in ((runs, "runs"), (runs / "bsp-s0", "bsp-s0")):
        lock = RunDirLock(str(held), option="runs")
        try:
            assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", str(runs)]) == 2
        finally:
            lock.release()
        err = capsys.readouterr().err
        assert f"invalid --runs '{runs}': " in err and "in use by the job started" in err, err
        assert len(err.strip().splitlines()) == 1
        assert (runs / "bsp-s0").is_dir() and not (runs / "bsp-s0" / "run.h5").exists(), name


def test_a_comparison_keeps_what_is_not_its_own(tmp_path, capsys):
    """A user's file in a run directory stays (mpips simulate keeps it too); an
    entry's value cannot make a run name outside --runs; a finished run there
    is not replaced without --overwrite, which removes its run files only."""
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    (runs / "bsp-s0").mkdir(parents=True)
    (runs / "bsp-s0" / "notes.txt").write_text("mine")
    (runs / "bsp-data_dirx").mkdir()   # so that x/.. resolves
    (outside / "keep-s0").mkdir(parents=True)
    (outside / "keep-s0" / "data.txt").write_text("precious")
    entries = ["bsp", "bsp:data_dir=x/../../outside/keep", f"bsp:data_dir={outside}"]
    assert main(["compare", *SHORT, "--paradigms", ",".join(entries), "--runs", str(runs)]) == 0
    assert (runs / "bsp-s0" / "notes.txt").read_text() == "mine"
    assert (outside / "keep-s0" / "data.txt").read_text() == "precious"
    assert sorted(p.name for p in outside.rglob("*")) == ["data.txt", "keep-s0"]
    made = sorted(p.name for p in runs.iterdir() if p.is_dir() and p.name.startswith("bsp-data_dir"))
    assert len(made) == 3 and all(os.sep not in n and ".." not in n for n in made), made   # (x: the folder made above)
    capsys.readouterr()
    # again without --reuse or --overwrite: the finished runs are refused, not deleted
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", str(runs)]) == 2
    assert "bsp-s0 holds a run (bsp, seed 0, finished)" in capsys.readouterr().err
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", str(runs), "--overwrite"]) == 0
    assert (runs / "bsp-s0" / "notes.txt").read_text() == "mine"
    assert RunLog(str(runs / "bsp-s0")).status == "finished"


def test_reuse_keeps_a_run_only_with_these_settings(tmp_path, capsys):
    """--reuse with other settings said "finished earlier, kept" and showed the old table."""
    runs = str(tmp_path / "runs")
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", runs]) == 0
    capsys.readouterr()
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", runs, "--reuse", "--epochs", "0.3",
                 "--lr", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "bsp-s0: finished earlier with other settings (epochs 0.2, not 0.3; lr 0.05, not 0.2): trained again" \
        in out, out
    assert (RunLog(os.path.join(runs, "bsp-s0")).config["epochs"], RunLog(os.path.join(runs, "bsp-s0")).config["lr"]) \
        == (0.3, 0.2)
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", runs, "--reuse", "--epochs", "0.3",
                 "--lr", "0.2"]) == 0
    assert "bsp-s0: finished earlier, kept" in capsys.readouterr().out
    # runs copied to another folder: the same settings but where they are kept
    moved = str(tmp_path / "moved")
    shutil.copytree(runs, moved)
    assert main(["compare", *SHORT, "--paradigms", "bsp", "--runs", moved, "--reuse", "--epochs", "0.3",
                 "--lr", "0.2"]) == 0
    assert "bsp-s0: finished earlier, kept" in capsys.readouterr().out
