"""The progress a person watches: a bar in place on a terminal, a line every N
seconds into a file, with samples done, throughput, time left and the latest
accuracy; virtual times said to be virtual. A fake clock drives it."""
from __future__ import annotations

import io

import pytest

from mpips.runtime.progress import Progress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_into_a_file_a_line_every_n_seconds_with_the_time_left():
    clock, out = Clock(), io.StringIO()
    p = Progress(1000, virtual=False, every=10, stream=out, clock=clock)
    assert p.mode == "lines" and not p.due()
    clock.t += 10
    assert p.due()
    p.update(250, 10.0)            # 250 samples in the first 10 s: 750 left take 30 s
    p.evaluated(0.815, 1.0)
    assert not p.due()
    clock.t += 10
    p.update(400, 20.0)            # then 150 in 10 s: 600 left take 40 s
    first, second = out.getvalue().splitlines()
    assert first == "mpips: progress  25% | 250/1,000 samples | 10.0 s, 25 samples/s | ETA 00:30"
    assert second == "mpips: progress  40% | 400/1,000 samples | 20.0 s, 20 samples/s | ETA 00:40 | acc 81.5% at epoch 1.00"


def test_simulated_times_are_said_virtual_and_the_time_left_is_the_wall_clocks():
    clock, out = Clock(), io.StringIO()
    p = Progress(2000, virtual=True, every=5, stream=out, clock=clock)
    clock.t += 5
    p.update(500, 0.25)            # a quarter in 5 s of wall time, 0.25 s of virtual time
    assert out.getvalue().strip() == ("mpips: progress  25% | 500/2,000 samples | virtual time 0.25 s, "
                                      "2,000 samples/s (virtual) | wall 00:05, ETA 00:15 (wall)")


def test_on_a_terminal_a_bar_updates_in_place_and_evaluations_print_above_it():
    clock, out = Clock(), Terminal()
    p = Progress(1000, virtual=False, stream=out, clock=clock)
    assert p.mode == "bar" and p.bar is not None
    for k in range(1, 5):
        clock.t += 1
        p.update(200 * k, 2.0 * k)
    p.write("mpips: epoch  1.00  acc 80.0%", file=out)
    p.evaluated(0.8, 1.0)
    p.close(1000, 10.0)
    text = out.getvalue()
    assert text.count("\r") >= 4   # in place: carriage returns, not a line per update
    assert "1.00k/1.00k samples" in text and "acc 80.0% (epoch 1.00)" in text
    assert "mpips: epoch  1.00  acc 80.0%\n" in text


@pytest.mark.parametrize("mode", ["off"])
def test_off_prints_nothing(mode):
    clock, out = Clock(), Terminal()
    p = Progress(1000, virtual=False, mode=mode, stream=out, clock=clock)
    clock.t += 100
    assert not p.due()
    p.update(500, 1.0)
    p.close(1000, 2.0)
    assert out.getvalue() == ""
