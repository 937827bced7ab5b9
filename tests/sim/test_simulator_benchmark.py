"""benchmarks/simulator.py's attribution of samples: the stacks of a real
simulated run, taken where py-spy would sample them, go to whose work they
are (a stack taken while a module is imported, or before the scheduler
runs, is not the run's)."""
from __future__ import annotations

import collections
import os
import sys

import pytest

from mpips.cli import main

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import simulator as bench  # noqa: E402

# where a stack is taken (the function called) -> the mode its samples belong to
EXPECTED = {
    "move": "transfers",                           # the bytes of a pull or push
    "sum_slots": "server",                         # called by the transport's take_gradient
    "LocalControlTable.write": "simulator",
    "Scheduler.sleep": "simulator",
    "Worker.compute_gradient": "compute",
    "SGD.step": "server",
    "Worker._gate.<locals>.ready": "roles",        # run by the scheduler's loop (_check) when woken
    "Evaluator.evaluate": "evaluation",
}


def stack_of(frame) -> list[tuple[str, str]]:
    """(qualified name, path) of each frame, outermost first: py-spy's raw stacks."""
    stack = []
    while frame is not None:
        stack.append((frame.f_code.co_qualname, frame.f_code.co_filename))
        frame = frame.f_back
    return stack[::-1]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="co_qualname (the names py-spy writes)")
def test_samples_of_a_run_go_to_whose_work_they_are(tmp_path):
    modes = collections.defaultdict(collections.Counter)

    def profile(frame, event, arg):
        name = frame.f_code.co_qualname
        if event == "call" and "mpips" in frame.f_code.co_filename:
            modes[name][bench.mode_of(stack_of(frame))] += 1

    sys.setprofile(profile)   # (the thread's: it follows every task's greenlet)
    try:
        assert main(["simulate", "--run-dir", str(tmp_path), "--paradigm", "asp", "--workers", "2",
                     "--iterations", "20", "--evaluator", "--eval-every", "1"]) == 0
    finally:
        sys.setprofile(None)
    for name, mode in EXPECTED.items():
        assert modes[name] and set(modes[name]) == {mode}, (name, dict(modes[name]))
    # set-up and the end are not the run's: the logs are opened before it and closed after
    assert set(modes["RankLog.__init__"]) == {None} and set(modes["RankLog.close"]) == {None}


def test_a_module_imported_from_the_scheduler_is_not_the_run():
    # torch imported by scheduler.py's first line that needs it: a frame of scheduler.py, not its run
    import_stack = [("<module>", "benchmarks/simulator.py"), ("measure", "benchmarks/simulator.py"),
                    ("<module>", "mpips/runtime/transport/scheduler.py"), ("<module>", "torch/__init__.py")]
    assert bench.mode_of(import_stack) is None


def test_raw_samples_are_counted_per_mode(tmp_path):
    run = "Scheduler.run (mpips/runtime/transport/scheduler.py:153)"
    task = "Task.__init__.<locals>.run (mpips/runtime/transport/scheduler.py:61)"
    raw = tmp_path / "samples.txt"
    raw.write_text("\n".join([
        f"<module> (simulator.py:9);{run} 7",
        f"{task};Worker.iteration (mpips/runtime/roles/worker.py:131);LocalParameterStore.pull "
        f"(mpips/runtime/transport/local.py:99);move (mpips/runtime/transport/local.py:61) 3",
        f"{task};Worker.iteration (mpips/runtime/roles/worker.py:140);Worker.compute_gradient "
        f"(mpips/runtime/roles/worker.py:200);forward (torch/nn/modules/linear.py:116) 11",
        f"{task};Worker.iteration (mpips/runtime/roles/worker.py:150);TableView.c_min (mpips/runtime/state.py:280) 2",
        "<module> (simulator.py:9);simulate (mpips/runtime/job/simulate.py:80) 5",   # set-up: not the run's
    ]) + "\n")
    assert bench.sampled_modes(str(raw)) == {"simulator": 7, "roles": 2, "compute": 11, "transfers": 3,
                                             "data": 0, "server": 0, "log": 0, "evaluation": 0}
