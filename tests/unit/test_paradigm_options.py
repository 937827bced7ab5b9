"""A paradigm owns its settings (`Paradigm.Options`, a frozen dataclass of
`setting` fields): the flags, YAML keys, `mpips.train`/`mpips.simulate`
keywords and `mpips compare` entries are made from it, for a plugin's
paradigm as for the built-in ones, typed and checked, each bad value one line."""
from __future__ import annotations

import contextlib
import dataclasses
import textwrap

import pytest

import mpips
from mpips import cli
from mpips.config import SHARED, Config, ConfigError, load
from mpips.experiments.setups import OptionError, Setup
from mpips.paradigms import BUILT_IN, option_specs, unregister_paradigm
from mpips.plugins import load_plugins

PLUGIN = '''
"""A paradigm of one's own, with two settings of its own."""
from dataclasses import dataclass

from mpips import Options, Paradigm, register_paradigm, setting
from mpips.paradigms import Push, bounded_gate


@dataclass(frozen=True)
class DampedOptions(Options):
    bound: int = setting(2, "the staleness bound", low=0, high=1000)
    damping: float = setting(0.5, "each push's factor beyond 1/W", low=0.0, high=1.0)


class Damped(Paradigm):
    """SSP(bound), each push scaled by damping / W."""
    name = "damped"
    Options = DampedOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.told = False

    def gate(self, worker, view):
        return bounded_gate(worker, view, self.options.bound)

    def push(self, worker, view, **_):
        return Push(scale=self.options.damping / self.num_workers)

    def measured(self, worker, *, clock, batch, compute, transfer):
        if not self.told:
            self.told = True
            return {"kind": "damped", "bound": self.options.bound, "damping": self.options.damping}
        return None


register_paradigm("damped", Damped)
'''


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(PLUGIN))
    return str(path)


@contextlib.contextmanager
def registered(plugin: str):
    """The plugin loaded in this process, as `--plugin` loads it, for the while."""
    load_plugins([plugin])
    try:
        yield
    finally:
        unregister_paradigm("damped")


def _simulate(tmp_path, plugin, *flags) -> int:
    try:
        return cli.main(["simulate", "--plugin", plugin, "--paradigm", "damped", "--workers", "2",
                         "--iterations", "4", "--run-dir", str(tmp_path / "run"), *flags])
    finally:
        unregister_paradigm("damped")


def test_a_plugins_options_are_flags_yaml_keys_and_keywords(tmp_path, plugin, capsys):
    assert _simulate(tmp_path, plugin, "--bound", "3", "--damping", "0.25") == 0
    log = mpips.RunLog(str(tmp_path / "run"))
    assert (log.config["bound"], log.config["damping"]) == (3, 0.25)
    told = log.events_df.query("kind == 'damped'")
    assert set(told["bound"]) == {3} and set(told["damping"]) == {0.25}
    with registered(plugin):
        # in a YAML file, under the flags
        yaml = tmp_path / "run.yaml"
        yaml.write_text("paradigm: damped\nbound: 4\ndamping: 0.75\n")
        config = load(str(yaml), {"damping": "0.125"})
        assert (config.options.bound, config.options.damping) == (4, 0.125)
        # as keywords of mpips.simulate (mpips.train's: tests/mpi/test_api_jobs.py)
        log = mpips.simulate(paradigm="damped", bound=5, damping=1.0, workers=2, iterations=2,
                             run_dir=str(tmp_path / "api"))
        assert (log.config["bound"], log.config["damping"]) == (5, 1.0)
    # --paradigm-options stays, under the flags
    assert _simulate(tmp_path, plugin, "--paradigm-options", "bound=6,damping=0.5", "--damping", "0",
                     "--overwrite") == 0
    config = mpips.RunLog(str(tmp_path / "run")).config
    assert (config["bound"], config["damping"]) == (6, 0.0)
    # its own group in --help, typed and with its default
    with pytest.raises(SystemExit), registered(plugin):
        cli.main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "damped's own settings:" in out and "--bound BOUND" in out and "[default: 2]" in out


@pytest.mark.parametrize("flags, message", [
    (["--bound", "-1"], "invalid bound=-1: must be an integer >= 0, at most 1000"),
    (["--bound", "two"], "invalid bound='two': must be of type int"),
    (["--damping", "2"], "invalid damping=2.0: must be in [0.0, 1.0]"),
    (["--damping", "nan"], "invalid damping=nan: must be a finite number"),
    (["--paradigm-options", "speed=2"], "invalid paradigm_options='speed=2': unknown option 'speed' of paradigm "
                                        "damped; its options: bound, damping"),
])
def test_a_bad_value_of_a_plugins_option_is_one_line(tmp_path, plugin, capsys, flags, message):
    assert _simulate(tmp_path, plugin, *flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpips: error: " + message) and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_bad_value_from_yaml_or_python_is_one_line(tmp_path, plugin):
    yaml = tmp_path / "run.yaml"
    yaml.write_text("paradigm: damped\nbound: fast\n")
    with registered(plugin):
        with pytest.raises(ConfigError, match=r"^invalid bound='fast': must be of type int$"):
            load(str(yaml))
        with pytest.raises(ConfigError, match=r"^invalid damping=-1.0: must be in \[0.0, 1.0\]$"):
            mpips.simulate(paradigm="damped", damping=-1.0, workers=2, run_dir=str(tmp_path / "api"))


def test_every_built_in_option_is_a_flag_of_its_paradigm():
    parser = cli.parser()
    simulate = next(a for a in parser._actions if a.dest == "command").choices["simulate"]
    flags = {s for a in simulate._actions for s in a.option_strings}
    owned = {name for own in option_specs().values() for name in own}
    assert {"--" + name.replace("_", "-") for name in owned} <= flags
    # a paradigm's own settings are not the shared Config's
    assert not owned & set(SHARED)
    assert {p for p, own in option_specs().items() if own} == set(BUILT_IN) - {"bsp", "asp"}


def test_the_configuration_is_frozen_and_holds_the_paradigms_options():
    config = Config(paradigm="dssp", staleness_low=2, staleness_high=9)
    assert (config.options.staleness_low, config.options.staleness_high) == (2, 9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run_dir = "elsewhere"   # type: ignore[misc]
    moved = dataclasses.replace(config, run_dir="elsewhere")
    assert moved.run_dir == "elsewhere" and moved.options == config.options and config.run_dir == ""
    # run.h5's flat dict: the shared settings, then the paradigm's own (no other paradigm's)
    flat = config.to_dict()
    assert flat["staleness_high"] == 9 and "staleness" not in flat and "groups" not in flat
    assert load(None, flat) == config
    # another paradigm's option is checked by its owner's declaration, and not used
    assert Config(paradigm="bsp", staleness=2).options == Config(paradigm="bsp").options
    with pytest.raises(ConfigError, match="invalid staleness=-1"):
        Config(paradigm="bsp", staleness=-1)


def test_a_compare_entry_takes_its_paradigms_options_only():
    assert Setup.parse("dssp:staleness_high=9").settings == {"paradigm": "dssp", "staleness_high": 9}
    with pytest.raises(OptionError, match="unknown setting 'staleness_high'.*; any train setting shared by "
                                          "every paradigm, or one of ssp's own"):
        Setup.parse("ssp:staleness_high=9")
    with pytest.raises(OptionError, match="staleness_high=100000: must be an integer >= 0, at most 10000"):
        Setup.parse("dssp:staleness_high=100000")
