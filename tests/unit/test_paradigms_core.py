"""BSP, ASP and SSP decisions on hand-made views (no MPI)."""
import numpy as np
import pytest

from mpips.config import Config
from mpips.paradigms import ClusterView, make_paradigm
from mpips.paradigms.bsp import round_complete


def view(clocks, applied=None, done=None):
    clocks = np.array(clocks)
    n = len(clocks)
    return ClusterView(now=1.0, clocks=clocks, applied=np.array(applied if applied is not None else clocks),
                       push_times=np.full((n, 2), np.nan), iter_times=np.full(n, np.nan),
                       done=np.array(done or [False] * n), updates=0)


@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_gate_is_exactly_the_bound(s):
    p = make_paradigm(Config(paradigm="ssp", staleness=s), 4)
    for c0 in range(0, 8):
        v = view([c0, 2, 5, 4])
        assert p.gate(0, v).ok == (c0 - 2 <= s)


def test_ssp_waits_for_its_own_push_to_be_applied():
    p = make_paradigm(Config(paradigm="ssp", staleness=3), 2)
    g = p.gate(0, view([3, 3], applied=[2, 3]))
    assert not g.ok and g.waiting_for == (0,)


def test_ssp_names_the_laggards():
    p = make_paradigm(Config(paradigm="ssp", staleness=1), 4)
    g = p.gate(0, view([5, 3, 2, 5]))
    assert not g.ok and g.waiting_for == (1, 2)


def test_done_workers_do_not_block():
    p = make_paradigm(Config(paradigm="ssp", staleness=0), 2)
    assert p.gate(0, view([7, 4], done=[False, True])).ok


def test_bsp_gate_and_rounds():
    p = make_paradigm(Config(paradigm="bsp"), 3)
    assert p.gate(0, view([1, 1, 1])).ok
    assert not p.gate(0, view([1, 1, 0])).ok
    assert not p.gate(0, view([1, 1, 1], applied=[1, 1, 0])).ok
    assert p.synchronous(view([0, 0, 0]))
    assert not round_complete(view([1, 1, 0]), np.zeros(3, int))
    assert round_complete(view([1, 1, 1]), np.zeros(3, int))


def test_asp_always_goes_and_applies_any_push():
    p = make_paradigm(Config(paradigm="asp"), 3)
    assert p.gate(0, view([100, 0, 0])).ok
    assert p.server_ready(view([1, 0, 0]), np.zeros(3, int))
    assert not p.server_ready(view([1, 0, 0]), np.array([1, 0, 0]))


def test_pushes_are_scaled_one_over_w():
    for name in ("bsp", "asp", "ssp"):
        p = make_paradigm(Config(paradigm=name), 4)
        assert p.push(0, view([0] * 4), batch_size=16, read_updates=0, read_path_length=0).scale == 0.25


def test_asynchronous_steps_are_compensated_for_asynchrony():
    from mpips.paradigms.base import compensated_momentum

    view = ClusterView(now=1.0, clocks=np.array([3, 3]), applied=np.array([3, 3]),
                       push_times=np.full((2, 2), np.nan), iter_times=np.full(2, np.nan),
                       done=np.zeros(2, bool), updates=6)
    # one worker: nothing to compensate, so ASP stays sequential SGD
    assert compensated_momentum(0.9, 1) == 0.9
    assert compensated_momentum(0.9, 8) == pytest.approx(0.2) and compensated_momentum(0.9, 16) == 0.0
    for name in ("asp", "ssp", "dssp", "vsgd"):
        lr, m = make_paradigm(Config(paradigm=name), 8).server_step(0.05, 0.9, view)
        assert m == pytest.approx(0.2) and lr / (1 - m) == pytest.approx(0.05 / (1 - 0.9))
        assert make_paradigm(Config(paradigm=name, async_momentum="as-set"), 8).server_step(0.05, 0.9, view) == (0.05, 0.9)
        assert make_paradigm(Config(paradigm=name, optimizer="adam"), 8).server_step(0.05, 0.9, view) == (0.05, 0.9)
    for name in ("bsp", "lbbsp"):   # whole rounds: as set
        assert make_paradigm(Config(paradigm=name), 8).server_step(0.05, 0.9, view) == (0.05, 0.9)


@pytest.mark.parametrize("grouped", [False, True])
def test_a_gate_over_many_workers_names_the_laggards_and_the_one_furthest_behind(grouped, monkeypatch):
    """From VECTOR_FROM workers on, bounded_gate runs in numpy: it names the
    same workers as the loop over lists, and `behind`, the one of them with
    the fewest pushes applied, then the lowest clock, then the lowest index
    (the one `mpips simulate` waits for)."""
    from mpips.paradigms import gates

    rng = np.random.default_rng(0)
    n = gates.VECTOR_FROM + 8
    for _ in range(500):
        clocks = rng.integers(0, 6, n)
        applied = clocks - rng.integers(0, 3, n).clip(max=clocks)
        v = view(clocks, applied=applied, done=list(rng.random(n) < 0.1))
        w, s = int(rng.integers(n)), int(rng.integers(0, 3))
        members = rng.random(n) < 0.5 if grouped else None
        fast = gates.bounded_gate(w, v, s, members=members)
        monkeypatch.setattr(gates, "VECTOR_FROM", n)
        slow = gates.bounded_gate(w, v, s, members=members)
        monkeypatch.undo()
        assert (fast.ok, fast.waiting_for) == (slow.ok, slow.waiting_for)
        if not fast.ok:
            assert fast.behind == min(fast.waiting_for, key=lambda j: (applied[j], clocks[j], j))
