"""Whether a run in a folder was made with these settings (compare --reuse):
where it is kept does not count, nor a setting newer than the run at its
default (a new setting defaults to what runs did before it existed)."""
from __future__ import annotations

import json

import h5py

from mpips.config import Config
from mpips.io.rundir import other_settings


def older_run(path, drop=()):
    """A run.h5 whose configuration lacks `drop` (made before they existed)."""
    path.mkdir()
    config = {k: v for k, v in Config(paradigm="asp", lr=0.1).to_dict().items() if k not in drop}
    with h5py.File(path / "run.h5", "w") as f:
        f.attrs["config"] = json.dumps({**config, "run_dir": str(path)})
    return path


def test_a_setting_newer_than_the_run_counts_only_away_from_its_default(tmp_path):
    run = older_run(tmp_path / "run", drop=("dc_clip",))
    same = {**Config(paradigm="asp", lr=0.1).to_dict(), "run_dir": str(tmp_path / "moved")}
    assert other_settings(str(run), same) == []
    assert other_settings(str(run), {**same, "dc_clip": 1.0}) == ["dc_clip None, not 1.0"]
    assert other_settings(str(run), {**same, "lr": 0.2}) == ["lr 0.1, not 0.2"]
