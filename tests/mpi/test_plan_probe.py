"""`mpips plan`'s probe under mpiexec -n 5 (1 server + 4 workers) on an
emulated cluster whose device time is known (--device-time a=2ms,c=1ms,
--slowdown 1,1,2,4): the profile it writes gives every worker's device time
within 10% of the emulated one, at every batch size the probe ran. With
--random-stragglers too, the stragglers it fits from the iterations' compute
are those the emulation drew (its `straggler` events in the probe's logs)."""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import MPI_ENV, MPIEXEC, kill_job

from mpips.experiments import probe, profile
from mpips.heterogeneity import parse_random_stragglers, parse_slowdown
from mpips.io.log import RunLog

SLOWDOWN = (1, 1, 2, 4)


def emulated(worker: int, batch: int) -> float:
    return SLOWDOWN[worker] * (0.002 + 0.001 * batch)


def run_probe(job_pool, tmp_path, *flags: str) -> profile.ClusterProfile:
    code, out = job_pool.run(5, ["plan", "--probe-only", "--probe-seconds", "6", "--batch-size", "16",
                                 "--device-time", "a=2ms,c=1ms", "--slowdown", ",".join(map(str, SLOWDOWN)),
                                 "--stall-timeout", "60", "--out", str(tmp_path), *flags], timeout=120)
    assert code == 0, out[-4000:]
    found = profile.load(str(tmp_path / "cluster.yaml"))
    assert len(found.workers) == 4
    for w, worker in enumerate(found.workers):
        for batch in (8, 16, 32):
            assert worker.seconds(batch) == pytest.approx(emulated(w, batch), rel=0.10), (w, batch)
    return found


def test_the_probe_fits_the_emulated_device_times(job_pool, tmp_path):
    found = run_probe(job_pool, tmp_path)
    for worker in found.workers:
        assert worker.stragglers.rate < 0.05   # none emulated: at most a few slow iterations of a loaded machine
    # and the simulator, on it, runs each worker at that speed
    settings = found.settings(batch_size=16)
    assert parse_slowdown(settings["slowdown"]) == pytest.approx(SLOWDOWN, rel=0.10)


def test_the_probe_fits_the_stragglers_the_emulation_drew(job_pool, tmp_path):
    # the device times still within 10% (run_probe) under straggles
    found = run_probe(job_pool, tmp_path, "--random-stragglers", "0.1:3:4")
    drawn, misread, iterations = [probe.Chain() for _ in SLOWDOWN], 0, 0
    for run in sorted(glob.glob(str(tmp_path / "probe" / "*"))):
        log = RunLog(run)
        events = log.events("straggler")
        for w in range(len(SLOWDOWN)):
            iteration, slow, ratio = probe.classify(log.iterations[log.iterations["worker"] == w])
            truth = np.zeros(iteration.size, bool)
            for e in events:
                if e["worker"] == w:
                    truth |= (iteration >= e["iteration"]) & (iteration < e["iteration"] + e["iterations"])
            misread += int(np.sum(slow != truth))
            iterations += iteration.size
            drawn[w].add(iteration, truth, ratio)
    # each iteration read as the emulation slowed it, or not (a loaded machine may delay a few)
    assert misread <= 0.01 * iterations, f"{misread} of {iterations} iterations misread"
    starts = sum(c.starts for c in drawn)
    assert starts >= 20, f"{starts} straggles drawn: too few to tell anything"
    # The profile holds the fit of the straggles the emulation drew (the same
    # fit on the slowed iterations its events name): exactly, unless some
    # iterations were misread, each of which moves a start and an end
    tolerance = 1e-9 + 2 * misread / starts
    for w, (worker, expected) in enumerate(zip(found.workers, probe.fit_chains(drawn))):
        s = worker.stragglers
        assert s.rate == pytest.approx(expected.rate, rel=tolerance), w
        assert s.length == pytest.approx(expected.length, rel=tolerance), w
        assert s.factor == pytest.approx(4, rel=0.05), w
    # and the simulator draws them so
    settings = found.settings(batch_size=16)
    triples = parse_random_stragglers(settings["random_stragglers"], 4)
    assert triples == [tuple(dataclasses.astuple(w.stragglers)) for w in found.workers][:len(triples)]


def test_a_rank_stopped_after_the_probe_is_named_and_the_launch_ends(tmp_path):
    """A rank stopped after the probe left rank 0 at the plan's final barrier
    for good, the plan printed: now rank 0 names it within the stall timeout
    and ends the launch (a stopped rank cannot take part in an orderly exit)."""
    out, tag = tmp_path / "plan", f"stopped-{os.getpid()}"
    p = subprocess.Popen([MPIEXEC, "--timeout", "400", "-n", "3", sys.executable, "-m", "mpips", "plan",
                          "--probe-seconds", "3", "--candidates", "bsp", "--seeds", "0", "--target", "0.5",
                          "--epochs", "1", "--jobs", "1", "--stall-timeout", "20", "--out", str(out)],
                         env={**os.environ, **MPI_ENV, "MPIPS_TEST_TAG": tag}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
    stopped = None
    try:
        deadline = time.monotonic() + 300
        while not any("the cluster's profile:" in line for line in lines):
            assert p.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.1)
        stopped = rank_pids(tag)[2]
        os.kill(stopped, signal.SIGSTOP)
        p.wait(timeout=300)
    finally:
        if p.poll() is None:
            kill_job(p)
        if stopped is not None:
            with contextlib.suppress(OSError):
                os.kill(stopped, signal.SIGKILL)
    time.sleep(0.2)   # (the reader takes the last lines)
    output = "".join(lines).replace("\x00", "")
    assert p.returncode != 0 and "recommended: bsp" in output, output[-3000:]
    assert "the plan has ended, but rank(s) 2 of the probe did not within 20 s (stall_timeout)" in output, \
        output[-3000:]


def rank_pids(tag: str) -> dict[int, int]:
    """{world rank: pid} of the processes whose environment carries MPIPS_TEST_TAG=tag."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"MPIPS_TEST_TAG") == tag.encode() and b"OMPI_COMM_WORLD_RANK" in env:
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return found
