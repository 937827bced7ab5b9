"""Every value validation accepts runs, or is refused in one line (issue #52,
classes 4 and 8): counts, exponents, factors and times have bounds; the
grammar of --slowdown is checked without building its per-worker list; YAML's
`null` is no value; a test set holds at least one sample per class."""
from __future__ import annotations

import pytest

from mpips import cli
from mpips.config import Config, ConfigError, load
from mpips.experiments import profile
from mpips.runtime.transport import wait
from mpips.training.data import load_dataset

PROFILE = {"workers": [{"device_time": {"a": 0.0, "c": 0.001, "p": 1.0}}]}


@pytest.mark.parametrize("setting, value, allowed", [
    # each took all the memory, or overflowed deep in a run (MPI_ABORT, a traceback)
    ("slowdown", "1x100000000000", "more than 100000 workers"),
    ("slowdown", "1e308,1", "factors in [1, 10000]"),
    ("straggler", "0:0:10:1e308", "factor in [1, 10000]"),
    ("straggler", "0:0:10:200,0:5:10:200", "slows an iteration 4e+04x"),     # overlapping: 200 x 200
    ("random_stragglers", "0.1:1e300:4", "mean_iters in [1, 1e+12]"),
    ("device_time", "1e300s", "a, c in [0, 3600] seconds"),
    ("device_time", "a=0,c=1ms,p=1000", "p in (0, 3]"),
    ("device_time", "a=0,c=3000s,p=3", "at most 3600 seconds at batch-size"),
    ("workers", "1000000000", "integer >= 0, at most 100000"),
    ("epochs", "1e300", "in (0.0, 1000000.0]"),
    ("iterations", str(10**12), "at most 1000000000"),
    ("sim_latency", "1e300", "in [0.0, 3600.0]"),
    ("sim_bandwidth", "1e-300", "a number >= 1"),
    ("straggler_factor", "1e300", "in (0.0, 10000.0]"),
    ("staleness_high", "1000000000", "at most 10000"),
    ("test_fraction", "0", "in (0.0, 1.0)"),     # evaluated one sample: 100%
])
def test_a_number_beyond_its_bounds_is_one_line(setting, value, allowed):
    with pytest.raises(ConfigError) as e:
        load(overrides={setting: value})
    assert e.value.field == setting and allowed in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_budget_beyond_what_the_table_counts_is_one_line():
    config = Config(workers=4, iterations=10**9, batch_size=10**9)
    from mpips.paradigms import make_paradigm

    with pytest.raises(ConfigError, match=r"^invalid iterations=1000000000: a budget of 4e\+18 samples; at most 2\*\*53"):
        config.check_epoch_size(make_paradigm(config, 4), 10**9)


@pytest.mark.parametrize("key", ["run_dir", "dataset", "paradigm", "slowdown", "staleness", "lr"])
def test_yaml_null_is_refused_naming_the_setting(tmp_path, key):
    # `run_dir: null` made a directory ./None; a null string setting read as 'None'
    path = tmp_path / "run.yaml"
    path.write_text(f"{key}: null\n")
    with pytest.raises(ConfigError, match=rf"^invalid {key}=None: must be of type \w+, not null"):
        load(str(path))
    assert not (tmp_path / "None").exists()


def test_a_test_set_of_fewer_samples_than_classes_is_refused(tmp_path, capsys):
    # digits: 1797 samples, 10 classes; 0.001 leaves 2 for evaluation
    with pytest.raises(ConfigError, match=r"^invalid test_fraction=0.001: leaves 2 of the 1797 samples of digits "
                                          r"for evaluation; at least 10 \(one per class\)"):
        load_dataset(Config(test_fraction=0.001))
    assert cli.main(["simulate", "--workers", "2", "--test-fraction", "0.999", "--iterations", "2",
                     "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpips: error: invalid test_fraction=0.999: leaves 1795") and err.count("\n") == 1
    assert len(load_dataset(Config(test_fraction=0.01)).y_test) == 18


def test_a_profile_count_beyond_the_workers_is_one_line():
    with pytest.raises(profile._Bad, match=r"count=1000000000000: an integer >= 1, at most 100000 workers in all"):
        profile.parse({"workers": [{**PROFILE["workers"][0], "count": 10**12}]})
    with pytest.raises(profile._Bad, match=r"workers\[0\].device_time.p=1000: a finite number > 0, at most 3"):
        profile.parse({"workers": [{"device_time": {"c": 0.001, "p": 1000}}]})


def test_a_large_profile_finds_its_fastest_worker_once(monkeypatch):
    # 100,000 workers took over 200 s: the fastest time was found again for every worker
    many = profile.parse({"workers": [{**PROFILE["workers"][0], "count": 100_000}]})
    calls = []

    def counted_min(*args, **kw):
        calls.append(1)
        return min(*args, **kw)

    monkeypatch.setattr(profile, "min", counted_min, raising=False)
    settings = many.settings(16)
    assert len(calls) == 1 and settings["workers"] == 100_000 and settings["slowdown"] == ""


def test_a_long_emulated_sleep_is_slept_in_pieces(monkeypatch):
    # beyond time_t, time.sleep raised OverflowError (an LB-BSP batch far above batch-size, p = 3)
    asked = []

    def fake_sleep(seconds):
        asked.append(seconds)
        raise KeyboardInterrupt

    monkeypatch.setattr(wait.time, "sleep", fake_sleep)
    with pytest.raises(KeyboardInterrupt):
        wait.WallClock.sleep(1e30)
    assert asked == [86400.0]
