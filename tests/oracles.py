"""Exact checks of a run that more than one suite makes (tests/mpi, tests/nodes)."""
from __future__ import annotations

import numpy as np


def assert_each_sample_once(log) -> None:
    """Under a global budget the logged claims cover the run's sample stream
    exactly: every position 0 .. total-1 once, none twice, none missed (so
    each training sample is used once per epoch: position k is sample
    perm_e[k mod N] of epoch e = k div N)."""
    it = log.iterations
    assert (it["sample"] >= 0).all(), "a batch without a claim"
    positions = np.sort(np.concatenate([np.arange(s, s + b) for s, b in zip(it["sample"], it["batch"])]))
    total = log.layout["total_samples"]
    assert len(positions) == total, f"{len(positions)} samples used, the budget is {total}"
    assert np.array_equal(positions, np.arange(total)), "a sample position claimed twice or missed"
