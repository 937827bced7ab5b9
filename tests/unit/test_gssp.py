"""GSSP without MPI: the gate on a group's view, the GDTopK ratio decision,
group speed, the group server's delta bookkeeping, and layout errors."""
import math

import numpy as np
import pytest

from mpips.config import Config, ConfigError
from mpips.io.checkpoint import decode, encode
from mpips.paradigms import ClusterView, make_paradigm
from mpips.paradigms.compress import GDTopK, Identity, TopK, ratio_schedule
from mpips.paradigms.grouping import GroupSpeed
from mpips.runtime.layout import make_layout
from mpips.runtime.roles.group_server import GroupDelta


def group_view(clocks, members, applied=None, rank=0):
    """A group's view: workers of other groups read as done with clock 0."""
    w = len(clocks)
    outside = np.array([j not in members for j in range(w)])
    clocks = np.where(outside, 0, clocks).astype(np.int64)
    return ClusterView(
        now=0.0, clocks=clocks, applied=clocks.copy() if applied is None else np.asarray(applied),
        push_times=np.full((w, 2), np.nan), iter_times=np.full(w, np.nan),
        done=outside, updates=int(clocks.sum()), slots=(rank, 0.0))


def test_gate_bounds_clocks_inside_the_group_only():
    p = make_paradigm(Config(paradigm="gssp", group_staleness=2), 4)
    # group {0, 1}: worker 0 at clock 4 may go while worker 1 is at 2 (gap 2) ...
    assert p.gate(0, group_view([4, 2, 0, 0], {0, 1})).ok
    # ... and waits for worker 1 at gap 3
    gate = p.gate(0, group_view([5, 2, 0, 0], {0, 1}))
    assert not gate.ok and gate.waiting_for == (1,)
    # workers 2 and 3 (another group) never hold it, however far behind
    assert p.gate(0, group_view([4, 3, 0, 0], {0, 1})).ok
    # its own pushes must be applied before it reads
    assert not p.gate(0, group_view([4, 3, 0, 0], {0, 1}, applied=[3, 3, 0, 0])).ok
    # c_min, the base of the logged clock gap, is the group's
    assert group_view([9, 7, 0, 0], {0, 1}).c_min() == 7


def test_compression_follows_the_group_schedule_only_for_gdtopk():
    view = group_view([0, 0, 0, 0], {0, 1}, rank=1)
    p = make_paradigm(Config(paradigm="gssp", groups=2, compressor="gdtopk"), 4)
    for epoch in (1, 2, 3, 6):
        assert p.compression(0, view, epoch=epoch) == ratio_schedule(epoch, 1, 2)
    assert p.compression(0, group_view([0] * 4, {0, 1}, rank=0), epoch=2) == (0.25, 0.008)
    assert p.compression(0, view, epoch=2) == (0.35, 0.01)
    for other in ("none", "topk"):
        p = make_paradigm(Config(paradigm="gssp", groups=2, compressor=other), 4)
        assert p.compression(0, view, epoch=2) is None


def test_group_speed_is_the_mean_of_member_epoch_time_emas():
    speed = GroupSpeed([1, 3], iterations_per_epoch=10)
    clocks = np.zeros(4, int)
    times = np.full((4, 2), np.nan)
    assert math.isnan(speed.time)
    clocks[1], times[1] = 10, (2.0, 1.8)        # seen at its epoch-ending push
    clocks[3], times[3] = 11, (4.5, 4.0)        # seen one push late: the previous ended it
    speed.observe(clocks, times)
    assert speed.time == pytest.approx((2.0 + 4.0) / 2)
    clocks[1], times[1] = 20, (3.0, 2.9)
    speed.observe(clocks, times)
    speed.observe(clocks, times)                # the same epoch is taken once
    assert speed.ema.times[1] == pytest.approx(0.3 * 2.0 + 0.7 * 1.0)
    assert speed.time == pytest.approx((0.3 * 2.0 + 0.7 * 1.0 + 4.0) / 2)
    # a checkpoint keeps it (through the checkpoint's own encoding), epochs seen included
    again = GroupSpeed([1, 3], iterations_per_epoch=10)
    again.load_state(decode(*encode(speed.state())))
    assert again.time == speed.time and again.epochs == speed.epochs and again.ends == speed.ends
    again.observe(clocks, times)
    assert again.time == speed.time


@pytest.mark.parametrize("make", [lambda s: Identity(), lambda s: TopK(0.05),
                                  lambda s: GDTopK(0.05, 0.01, seed=s)])
def test_group_deltas_reach_the_global_parameters_once(make):
    """Two groups train on their copies and exchange in any order, continuing
    from the global parameters or not: the global parameters end up as the
    start plus every group's progress, nothing lost, nothing twice."""
    rng = np.random.default_rng(0)
    n = 500
    start = rng.integers(-8, 9, n).astype(np.float32)
    glob = start.copy()
    groups = []
    for g in range(2):
        params = start.copy()
        groups.append((params, GroupDelta(params, make(g)), np.zeros(n, np.float32)))
    for step in range(60):
        params, delta, progress = groups[rng.integers(2)]
        update = rng.integers(-4, 5, n).astype(np.float32)   # integers: float32 sums are exact
        params += update
        progress += update
        if rng.random() < 0.4:
            payload = delta.take(flush=step % 20 == 19)
            holds_all = rng.random() < 0.7
            pulled = glob.copy() if holds_all else None
            glob += payload.to_dense() if hasattr(payload, "to_dense") else payload
            delta.rebase(pulled)
    for _, delta, _ in groups:
        payload = delta.take(flush=True)
        glob += payload.to_dense() if hasattr(payload, "to_dense") else payload
        delta.rebase(None)
    assert np.array_equal(glob, start + groups[0][2] + groups[1][2])


def test_rebase_continues_from_global_plus_what_it_lacks():
    params = np.zeros(8, np.float32)
    delta = GroupDelta(params, TopK(0.25))
    params += np.array([5, 1, 0, 0, 0, 0, 0, 2], np.float32)
    payload = delta.take()
    assert payload.indices.tolist() == [0, 7]
    pulled = np.full(8, 10, np.float32)               # holds other groups' work too
    delta.rebase(pulled)
    assert params.tolist() == [15, 11, 10, 10, 10, 10, 10, 12]   # + payload + residual (1 at 1)
    params += 1
    payload = delta.take()                            # the residual goes out with what is new
    assert 1 in payload.indices.tolist()
    assert payload.values.sum() + delta.compressor.residual.sum() == 1 + 8


def test_layout():
    layout = make_layout(Config(paradigm="gssp", groups=2), 7)
    assert (layout.servers, layout.group_servers, layout.workers, layout.clients) == (1, 2, 4, 2)
    assert layout.group_server_ranks == [1, 2] and layout.worker_ranks == [3, 4, 5, 6]
    assert make_layout(Config(paradigm="ssp"), 5).clients == 4


@pytest.mark.parametrize("flags,ranks,field,words", [
    ({"groups": 3}, 5, "groups", "must be <= workers (1)"),
    ({"groups": 2, "group_assignment": "0;1"}, 6, "group_assignment", "worker(s) 2 in no group"),
])
def test_bad_layouts_name_the_field(flags, ranks, field, words):
    with pytest.raises(ConfigError) as e:
        make_layout(Config(paradigm="gssp", **flags), ranks)
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)
