"""The progress of a running job, for the person who started it: samples done
of the budget, throughput, the time left, the latest accuracy.

One role prints it, the one that evaluates (server 0 inline, or the
`--evaluator` rank), to stderr, so that stdout keeps one line per
evaluation. `--progress auto` (the default) draws a bar that updates in
place (tqdm) when a person watches a terminal, else writes a line every
`--progress-every` seconds (a log file, a pipe, a batch job's output).
Under mpirun the ranks' output reaches the terminal through pipes that
pass whole lines only, so a bar would show only once done: a rank that
mpirun started on this node, whose stderr is a terminal, draws the bar
on that terminal itself (and the evaluation lines above it, when mpirun's
stdout is the same terminal).
Under `mpips simulate` times are virtual: the line says so, and its time
left is the wall-clock time the simulation still needs.

Nothing here touches the job's own clock: the bar's pace is the wall
clock's, whichever transport runs the roles.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from tqdm import tqdm


def _count(n: float) -> str:
    return f"{int(n):,}"


class Progress:
    """`total`: samples the run's budget holds (0: unknown, no ETA); `virtual`:
    the job's times are the simulator's."""

    def __init__(self, total: int, *, virtual: bool, mode: str = "auto", every: float = 10.0,
                 stream: TextIO | None = None, clock=time.monotonic):
        self.stream = sys.stderr if stream is None else stream
        self.stdout_too = False   # evaluation lines go to the bar's terminal (it is stdout's too)
        self.opened: TextIO | None = None   # the launcher's terminal, opened here
        if mode != "off" and stream is None:
            terminal = launchers_terminal()
            if terminal is not None:
                self.stream, self.stdout_too = terminal
                self.opened = self.stream
        if mode == "auto":
            mode = "bar" if _is_terminal(self.stream) else "lines"
        self.mode, self.every, self.clock = mode, every, clock
        self.total, self.virtual = max(int(total), 0), virtual
        self.started = clock()
        # the pace of the time left: samples done since `since` (from the start: 0 then; a
        # resumed run's samples before it count from its first update on)
        self.since: tuple[float, float] | None = None
        self.next = self.started + (0.5 if mode == "bar" else every)
        self.accuracy: tuple[float, float] | None = None   # (accuracy, epoch) of the latest evaluation
        self.bar: tqdm | None = None
        if mode == "bar":
            self.bar = tqdm(total=self.total or None, file=self.stream, unit=" samples", unit_scale=True,
                            dynamic_ncols=True, leave=True, desc="mpips", mininterval=0.5,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} samples "
                                       "[{elapsed}<{remaining}" + (" wall" if virtual else "") + "]{postfix}")

    def due(self) -> bool:
        """Whether an update is due (cheap: the caller reads the job's state only then)."""
        return self.mode != "off" and self.clock() >= self.next

    def update(self, samples: float, job_time: float) -> None:
        """`samples` done at `job_time` (seconds of the job: virtual under simulate)."""
        if self.mode == "off":
            return
        now = self.clock()
        self.next = now + (0.5 if self.bar is not None else self.every)
        rate = samples / job_time if job_time > 0 else 0.0
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(rate, job_time), refresh=False)
            self.bar.update(max(0, int(samples) - self.bar.n))
            return
        print(self.line(samples, job_time, now), file=self.stream, flush=True)

    def line(self, samples: float, job_time: float, now: float) -> str:
        """The line written to a file or pipe."""
        wall = now - self.started
        if self.since is None:   # the first line: the pace since the start, then since this line
            self.since = (samples, now)
            base, start = 0.0, self.started
        else:
            base, start = self.since
        rate = samples / job_time if job_time > 0 else 0.0
        parts = ["mpips: progress"]
        if self.total:
            parts[0] += f" {100 * min(samples / self.total, 1):3.0f}%"
            parts.append(f"{_count(samples)}/{_count(self.total)} samples")
        else:
            parts.append(f"{_count(samples)} samples")
        done = samples - base
        left = (now - start) * (self.total - samples) / done if self.total and done > 0 else None
        eta = f"ETA {tqdm.format_interval(left)}" if left is not None else "ETA ?"
        if self.virtual:
            parts += [f"virtual time {job_time:.2f} s, {rate:,.0f} samples/s (virtual)",
                      f"wall {tqdm.format_interval(wall)}, {eta} (wall)"]
        else:
            parts += [f"{job_time:.1f} s, {rate:,.0f} samples/s", eta]
        if self.accuracy is not None:
            parts.append(f"acc {100 * self.accuracy[0]:.1f}% at epoch {self.accuracy[1]:.2f}")
        return " | ".join(parts)

    def _postfix(self, rate: float, job_time: float) -> str:
        when = f"virtual {job_time:.2f} s, {rate:,.0f} samples/s (virtual)" if self.virtual else f"{rate:,.0f} samples/s"
        acc = f", acc {100 * self.accuracy[0]:.1f}% (epoch {self.accuracy[1]:.2f})" if self.accuracy else ""
        return " " + when + acc

    def evaluated(self, accuracy: float, epoch: float) -> None:
        self.accuracy = (accuracy, epoch)

    def write(self, line: str, file: TextIO | None = None) -> None:
        """A line (an evaluation's) printed without breaking the bar."""
        file = sys.stdout if file is None else file
        if self.bar is not None and self.stdout_too:
            self.bar.write(line, file=self.stream)
        elif self.bar is not None and _same_terminal(file, self.stream):
            self.bar.write(line, file=file)
        else:
            print(line, file=file, flush=True)

    def close(self, samples: float | None = None, job_time: float = 0.0) -> None:
        if self.bar is not None:
            if samples is not None:
                self.update(samples, job_time)
            self.bar.close()
            self.bar = None
        if self.opened is not None:
            self.opened.close()
            self.opened = None


LAUNCHED = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def launchers_terminal(ppid: int | None = None) -> tuple[TextIO, bool] | None:
    """This rank's launcher's terminal, opened for writing, when a launcher
    on this node started it (mpirun) and mpirun's stderr is a terminal; and
    whether mpirun's stdout is that terminal too. None otherwise: not
    launched, stderr already a terminal, or mpirun's output redirected."""
    if _is_terminal(sys.stderr) or not any(v in os.environ for v in LAUNCHED):
        return None
    ppid = os.getppid() if ppid is None else ppid
    try:
        path = os.readlink(f"/proc/{ppid}/fd/2")
        if not path.startswith("/dev/"):
            return None
        terminal = open(path, "w")
    except OSError:
        return None
    if not terminal.isatty():
        terminal.close()
        return None
    try:
        same = os.stat(f"/proc/{ppid}/fd/1").st_rdev == os.fstat(terminal.fileno()).st_rdev
    except OSError:
        same = False
    return terminal, same


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _same_terminal(a, b) -> bool:
    return _is_terminal(a) and _is_terminal(b)
