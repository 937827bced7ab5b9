"""The paradigm registry is the one list of paradigms: registering one makes it
a choice of the configuration, with its own options; paradigms and `import
mpips` stay free of mpi4py and torch."""
from __future__ import annotations

import subprocess
import sys

import pytest

import mpips
from mpips import config
from mpips.config import Config, ConfigError, load
from mpips.paradigms import BUILT_IN, PASS, REGISTRY, Gate, Paradigm, make_paradigm


class Every(Paradigm):
    """Passes a worker only on every `period`-th poll (a trivial gate)."""

    name = "every"

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.period = self.options.period
        self.polls = 0

    def gate(self, worker, view):
        self.polls += 1
        return PASS if self.polls % self.period == 0 else Gate(False, (worker,))


@pytest.fixture
def every():
    mpips.register_paradigm("every", Every, options={"period": (2, "polls per pass"), "note": "x"})
    yield Every
    mpips.unregister_paradigm("every")


def test_configuration_choices_are_the_registry():
    assert config.PARADIGMS is REGISTRY
    assert set(BUILT_IN) == {"bsp", "asp", "ssp", "dssp", "gssp", "syncswitch", "lbbsp", "vsgd", "backup", "localsgd"}
    with pytest.raises(ConfigError, match="invalid paradigm='every': allowed: bsp, asp"):
        Config(paradigm="every")


def test_a_registered_paradigm_is_a_choice_with_its_options(every):
    cfg = load(None, {"paradigm": "every", "paradigm_options": "period=3"})
    p = make_paradigm(cfg, 4)
    assert isinstance(p, Every) and (p.options.period, p.options.note) == (3, "x")
    assert [p.gate(0, None).ok for _ in range(3)] == [False, False, True]
    assert make_paradigm(Config(paradigm="every"), 4).options.period == 2     # the default
    # a mapping (YAML, Python) is the same as the text
    assert load(None, {"paradigm": "every", "paradigm_options": {"period": 5}}).options.period == 5


def test_bad_options_are_named(every):
    with pytest.raises(ConfigError, match="unknown option 'speed' of paradigm every; its options: period, note"):
        Config(paradigm="every", paradigm_options="speed=2")
    with pytest.raises(ConfigError, match="invalid paradigm_options='period=fast': must be of type int"):
        Config(paradigm="every", paradigm_options="period=fast")
    with pytest.raises(ConfigError, match="entries key=value"):
        Config(paradigm="every", paradigm_options="period")
    with pytest.raises(ConfigError, match="unknown option 'period' of paradigm ssp; its options: staleness"):
        Config(paradigm="ssp", paradigm_options="period=2")


def test_registration_is_checked(every):
    with pytest.raises(ValueError, match="already registered"):
        mpips.register_paradigm("every", Every)
    mpips.register_paradigm("every", Every, replace=True, options={"period": 1})
    with pytest.raises(ValueError, match="already registered"):
        mpips.register_paradigm("ssp", Every, replace=True)
    with pytest.raises(TypeError, match="not a subclass"):
        mpips.register_paradigm("mine", object)
    with pytest.raises(ValueError, match="lower-case"):
        mpips.register_paradigm("My Paradigm", Every)
    with pytest.raises(TypeError, match="must be a bool, int, float or str"):
        mpips.register_paradigm("mine", Every, options={"x": [1]})
    assert "mine" not in REGISTRY


def _loaded_after(statement: str) -> list[str]:
    code = (f"import sys; {statement}; "
            "print(','.join(m for m in ('mpi4py', 'torch', 'h5py', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_paradigms_import_neither_mpi4py_nor_torch():
    loaded = _loaded_after("import mpips.paradigms; from mpips.paradigms import paradigm_class; "
                           "[paradigm_class(n) for n in ('bsp', 'asp', 'ssp', 'dssp', 'syncswitch', 'vsgd')]")
    assert "mpi4py" not in loaded and "torch" not in loaded, loaded


def test_import_mpips_imports_no_mpi4py_torch_or_h5py():
    assert _loaded_after("import mpips; mpips.register_paradigm; mpips.Config()") == []


def _code_words(source: str):
    """(line, text) of the identifiers and strings of Python code, leaving out
    comments and docstrings (which may name a paradigm as an example)."""
    import io
    import tokenize

    prev = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        docstring = tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT,
                                                             tokenize.DEDENT, tokenize.NL)
        if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and not docstring):
            yield tok.start[0], tok.string
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type


def test_no_paradigm_is_named_by_the_runtime_the_layout_or_the_job_scripts():
    """Paradigms decide through their interface (a second level of servers:
    `Paradigm.group_servers`); the code that runs a job names none of them:
    no identifier or string of mpips/runtime/ (the roles, the transports, the
    layout, the job), no line of the job's entry points or jobs/common.sh."""
    import re
    from pathlib import Path

    from mpips.paradigms import BUILT_IN

    root = Path(__file__).resolve().parents[2]
    names = re.compile(r"\b(" + "|".join(BUILT_IN) + r"|sync-switch|lb-bsp)\b", re.IGNORECASE)
    found = [f"{path.relative_to(root)}:{n}: {word}" for path in sorted((root / "mpips/runtime").rglob("*.py"))
             for n, word in _code_words(path.read_text()) if names.search(word)]
    for path in ("mpips/runtime/job/train.py", "mpips/runtime/layout.py", "mpips/runtime/job/simulate.py", "jobs/common.sh"):
        found += [f"{path}:{n}: {line.strip()}" for n, line in
                  enumerate((root / path).read_text().splitlines(), 1) if names.search(line)]
    assert len(list((root / "mpips/runtime").rglob("*.py"))) > 10   # the package is where this test looks
    assert not found, "\n".join(found)
