"""A run that cannot train, or not as the user thinks, says so: `mpips train`
without a launcher points at mpirun and `mpips simulate`; ranks taken by group
servers or an evaluator are counted aloud; a round beyond the training set is a
warning with the numbers."""
from __future__ import annotations

import pytest

from mpips.config import ConfigError, load
from mpips.io.rundir import RunDir
from mpips.paradigms import make_paradigm
from mpips.runtime.job.assemble import make_plan, too_short
from mpips.runtime.layout import make_layout, roles_note


def test_one_process_is_told_to_use_a_launcher_or_the_simulator():
    with pytest.raises(ConfigError) as e:
        make_layout(load(), 1)
    message = str(e.value)
    assert "mpirun -n $(mpips ranks --workers N ...) mpips train" in message and "mpips simulate" in message
    assert "\n" not in message


@pytest.mark.parametrize("settings, ranks, told", [
    ({"paradigm": "gssp", "groups": 2}, 5, "the 5 ranks started are 1 server(s) + 2 group server(s) + 2 worker(s)"),
    ({"evaluator": True}, 5, "the 5 ranks started are 1 server(s) + 3 worker(s) + 1 evaluator"),
    ({}, 5, ""),                                                  # servers and workers only: as expected
    ({"paradigm": "gssp", "groups": 2, "workers": 2}, 5, ""),     # the count was given, and checked
])
def test_ranks_taken_by_other_roles_are_counted_aloud(settings, ranks, told):
    config = load(overrides=settings)
    note = roles_note(make_layout(config, ranks), derived=not config.workers)
    assert note.startswith("mpips: " + told) if told else note == ""


def _plan(**settings):
    config = load(overrides=settings)
    layout = make_layout(config, config.servers + config.workers)
    paradigm = make_paradigm(config, layout.workers)
    return make_plan(config, layout, RunDir("run"), paradigm, 1438, 1.0, 100)


def test_a_round_beyond_the_training_set_is_a_warning_with_the_numbers():
    said = too_short(_plan(workers=256, epochs=5.0))
    assert said.startswith("a round of the 256 workers' batches (4,096 samples) is more than the 1,438 "
                           "training samples: 5 epoch(s) are 7,190 samples, 2 round(s) of updates"), said
    assert too_short(_plan(workers=4, epochs=5.0)) == ""
    assert too_short(_plan(workers=256, epochs=5.0, budget="per-worker", batch_size=4)) == ""


def test_ucx_one_sided_is_turned_off_only_on_a_node_without_rdma_devices(tmp_path):
    from mpips.runtime.transport.mpienv import quiet_ucx

    env: dict[str, str] = {}
    assert quiet_ucx(env, str(tmp_path / "none")) and env == {"OMPI_MCA_osc": "^ucx"}   # no such class
    env = {}
    assert quiet_ucx(env, str(tmp_path)) and env["OMPI_MCA_osc"] == "^ucx"               # no device in it
    (tmp_path / "mlx5_0").mkdir()
    env = {}
    assert not quiet_ucx(env, str(tmp_path)) and env == {}                                # InfiniBand: UCX stays
    env = {"OMPI_MCA_osc": "ucx"}
    assert not quiet_ucx(env, str(tmp_path / "none")) and env == {"OMPI_MCA_osc": "ucx"}  # the user's choice
