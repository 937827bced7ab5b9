"""mpips plan's default candidates: what it tries at a worker count, each one
a command `mpips train` accepts on that many workers."""
from __future__ import annotations

import shlex

import pytest

from mpips.cli import parser
from mpips.experiments.plan import Candidate, commands, default_candidates

DC = "async_rule=dc-adaptive:dc_clip=1"


def test_from_32_workers_the_plan_also_tries_asp_and_gssp_under_the_bounded_delay_compensation():
    # measured best of the per-push rules from 32 workers on, and not the default (it costs ASP at 8)
    assert not [c for c in default_candidates(8) if "async_rule" in c]
    assert [c for c in default_candidates(32) if "async_rule" in c] == [f"asp:{DC}", f"gssp:{DC}"]


@pytest.mark.parametrize("workers", [8, 32])
def test_every_default_candidate_is_a_command_mpips_train_accepts(workers):
    for text in default_candidates(workers):
        candidate = Candidate.parse(text)
        command = commands(candidate, {"dataset": "mnist1d", "model": "cnn1d"}, None, workers)["mpirun"]
        argv = shlex.split(command)
        args = parser().parse_args(argv[argv.index("mpips") + 1:])
        assert args.paradigm == candidate.settings["paradigm"], text
        if "async_rule" in candidate.settings:
            assert (args.async_rule, float(args.dc_clip)) == ("dc-adaptive", 1.0), text
