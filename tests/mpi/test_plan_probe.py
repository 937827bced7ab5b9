"""`mpips plan`'s probe under mpiexec -n 5 (1 server + 4 workers) on an
emulated cluster whose device time is known (--device-time a=2ms,c=1ms,
--slowdown 1,1,2,4): the profile it writes gives every worker's device time
within 10% of the emulated one, at every batch size the probe ran."""
from __future__ import annotations

import pytest

from mpips.experiments import profile
from mpips.training.emulation import parse_slowdown

SLOWDOWN = (1, 1, 2, 4)


def emulated(worker: int, batch: int) -> float:
    return SLOWDOWN[worker] * (0.002 + 0.001 * batch)


def test_the_probe_fits_the_emulated_device_times(job_pool, tmp_path):
    code, out = job_pool.run(5, ["plan", "--probe-only", "--probe-seconds", "6", "--batch-size", "16",
                                 "--device-time", "a=2ms,c=1ms", "--slowdown", ",".join(map(str, SLOWDOWN)),
                                 "--stall-timeout", "60", "--out", str(tmp_path)], timeout=120)
    assert code == 0, out[-4000:]
    found = profile.load(str(tmp_path / "cluster.yaml"))
    assert len(found.workers) == 4
    for w, worker in enumerate(found.workers):
        for batch in (8, 16, 32):
            assert worker.seconds(batch) == pytest.approx(emulated(w, batch), rel=0.10), (w, batch)
        assert worker.stragglers.rate < 0.05   # none emulated: at most a few slow iterations of a loaded machine
    # and the simulator, on it, runs each worker at that speed
    settings = found.settings(batch_size=16)
    assert parse_slowdown(settings["slowdown"]) == pytest.approx(SLOWDOWN, rel=0.10)
