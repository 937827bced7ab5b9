import random

import pytest

from mpips.cli import main
from mpips.config import Config, ConfigError, load
from mpips.runtime.layout import make_layout


def test_defaults_validate():
    c = Config()
    assert c.paradigm == "ssp" and c.options.staleness == 3


@pytest.mark.parametrize("overrides, field, allowed", [
    ({"paradigm": "bogus"}, "paradigm", "allowed: bsp, asp, ssp, dssp"),
    ({"staleness": -1}, "staleness", "integer >= 0"),
    ({"servers": 0}, "servers", "integer >= 1"),
    ({"staleness_low": 5, "staleness_high": 2}, "staleness_high", ">= staleness_low"),
    ({"lr": 0}, "lr", "> 0"),
    ({"momentum": 1.0}, "momentum", "[0.0, 1.0)"),
    ({"optimizer": "rmsprop"}, "optimizer", "allowed: sgd, adam"),
    ({"slowdown": "1,0.5"}, "slowdown", ">= 1"),
    ({"dataset": "mnist"}, "data_dir", "needs --data-dir"),
    ({"batch_size": "16.5"}, "batch_size", "int"),
    ({"no_such_setting": 1}, "no_such_setting", "unknown setting"),
    # issue 16: accepted before, or found only later by a worker
    ({"weight_decay": "nan"}, "weight_decay", "finite"),
    ({"vsgd_lambda": "nan"}, "vsgd_lambda", "finite"),
    ({"seed": str(2**64)}, "seed", "[-2**63, 2**64)"),
    ({"stall_timeout": "1e-6"}, "stall_timeout", ">= 1"),
    ({"synthetic_samples": 10**9}, "synthetic_samples", "10000000"),
    ({"dataset": "imagenet"}, "dataset", "allowed: digits, mnist, cifar10, synthetic, mnist1d, mnist5k, or "
                                         "package.module:function"),
    ({"dataset": "pkg.mod:"}, "dataset", "package.module:function"),
    ({"dataset": "a:b:c"}, "dataset", "package.module:function"),
    ({"mnist1d_samples": 5005}, "mnist1d_samples", "a multiple of 10"),
    ({"mnist1d_samples": 10**7}, "mnist1d_samples", "up to 1000000"),
    ({"mnist1d_samples": -10}, "mnist1d_samples", "integer >= 0"),
    ({"batch_size": True}, "batch_size", "not a boolean"),
    ({"straggler": "1:2"}, "straggler", "worker:start_iter:iters:factor"),
    ({"straggler": "1:2:3:inf"}, "straggler", "finite"),
    ({"random_stragglers": "0.1:20"}, "random_stragglers", "rate:mean_iters:factor"),
    ({"nan_at": "x"}, "nan_at", "worker:iteration"),
    ({"fail_at": "1:-1"}, "fail_at", "iteration >= 0"),
    ({"async_rule": "lr/tau"}, "async_rule", "allowed: none, staleness, delay-adaptive, dc, dc-adaptive"),
    ({"dc_lambda": -0.1}, "dc_lambda", ">= 0"),
    ({"dc_lambda0": "inf"}, "dc_lambda0", "finite"),
    ({"dc_decay": 1.0}, "dc_decay", "[0.0, 1.0)"),
])
def test_bad_values_name_the_field_and_what_is_allowed(overrides, field, allowed):
    with pytest.raises(ConfigError) as e:
        load(overrides=overrides)
    msg = str(e.value)
    assert e.value.field == field and field in msg and allowed in msg
    assert "\n" not in msg


def test_yaml_then_flags(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("paradigm: bsp\nbatch-size: 32\nlr: 0.2\nnesterov: true\n")
    c = load(str(p), {"lr": "0.3"})
    assert (c.paradigm, c.batch_size, c.lr, c.nesterov) == ("bsp", 32, 0.3, True)


@pytest.mark.parametrize("text, why", [("[1, 2]", "mapping"), ("a: [", "not valid YAML")])
def test_bad_yaml_is_one_line(tmp_path, text, why):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=why):
        load(str(p))


@pytest.mark.parametrize("content, why", [
    (b"\x80\x81 garbage \xfe", "not YAML text (invalid start byte at position 0)"),
    (b"workers: 2\n\x00\x01", "not YAML text (special characters are not allowed at position 11)"),
    (bytes(random.Random(0).randrange(256) for _ in range(4000)), "not YAML text"),
    (b"[" * 100_000, "not valid YAML (nested too deeply)"),
])
def test_a_binary_yaml_file_is_one_line(tmp_path, capsys, content, why):
    # (UnicodeDecodeError and RecursionError were tracebacks)
    p = tmp_path / "run.yaml"
    p.write_bytes(content)
    assert main(["ranks", "--config", str(p), "--workers", "2"]) == 2
    assert capsys.readouterr().err.startswith(f"mpips: error: invalid config='{p}': {why}")
    with pytest.raises(ConfigError) as e:
        load(str(p))
    assert e.value.field == "config" and "\n" not in str(e.value)


def test_missing_yaml_file():
    with pytest.raises(ConfigError, match="cannot read"):
        load("/nonexistent/run.yaml")


def test_layout_from_world_size():
    lay = make_layout(Config(servers=2), 6)
    assert (lay.servers, lay.workers, lay.server_ranks, lay.worker_ranks) == (2, 4, [0, 1], [2, 3, 4, 5])
    assert lay.role(1) == ("server", 1) and lay.role(3) == ("worker", 1)


@pytest.mark.parametrize("cfg, size, field", [
    (dict(servers=5), 5, "servers"),
    (dict(workers=3), 5, "workers"),
    (dict(paradigm="gssp", groups=3), 5, "groups"),
    (dict(paradigm="gssp", groups=9), 5, "groups"),   # was "invalid workers=-5"
])
def test_impossible_layouts(cfg, size, field):
    with pytest.raises(ConfigError) as e:
        make_layout(Config(**cfg), size)
    assert e.value.field == field


def test_yaml_boolean_for_a_number_is_refused(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("batch_size: true\n")
    with pytest.raises(ConfigError, match="batch_size=True: must be of type int, not a boolean"):
        load(str(p))


def test_worker_settings_checked_against_the_number_of_workers():
    c = Config(slowdown="1,2", straggler="1:0:5:2", nan_at="1:3")
    c.check_workers(2)
    for bad, field in ((dict(slowdown="1,2,3"), "slowdown"), (dict(straggler="2:0:5:2"), "straggler"),
                       (dict(nan_at="2:3"), "nan_at"), (dict(fail_at="5:1"), "fail_at")):
        with pytest.raises(ConfigError) as e:
            Config(**bad).check_workers(2)
        assert e.value.field == field


def test_a_round_beyond_the_training_set_under_a_per_worker_budget_is_one_line():
    """LB-BSP's round is its global batch: under a per-worker budget a round
    of more samples than the training set is refused naming global_batch
    (this line raised NameError once: no test reached it)."""
    from mpips.paradigms import make_paradigm

    config = Config(paradigm="lbbsp", budget="per-worker", global_batch=2000, workers=4)
    with pytest.raises(ConfigError, match=r"^invalid global_batch=2000: a round of 2000 samples exceeds "
                                          r"the 1438 training samples"):
        config.check_epoch_size(make_paradigm(config, 4), 1438)
