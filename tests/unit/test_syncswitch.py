"""Sync-Switch without MPI: decisions on hand-made views, and the whole switching
protocol driven by a small discrete-event simulation of workers and servers
(random delays everywhere, server 0 sometimes descheduled between reading the
table and writing its decision), checked push by push."""
import heapq
import math

import numpy as np
import pytest

from mpips.config import Config
from mpips.experiments.syncswitch_search import Probe, ProbeRunner, bisect, search
from mpips.paradigms import MODE_ASP, MODE_BSP, ClusterView, make_paradigm
from mpips.paradigms.syncswitch import DECIDING, StragglerDetector, momentum_after_switch, round_ready
from mpips.paradigms.view import SLOT_MODE, SLOT_MODE_CLOCK


def view(clocks, applied=None, done=None, mode=MODE_BSP, mode_clock=0, iter_times=None, now=1.0):
    clocks = np.array(clocks)
    n = len(clocks)
    return ClusterView(now=now, clocks=clocks,
                       applied=np.array(applied if applied is not None else clocks),
                       push_times=np.full((n, 2), np.nan),
                       iter_times=np.array(iter_times if iter_times is not None else [np.nan] * n, float),
                       done=np.array(done or [False] * n),
                       updates=0, mode=mode, mode_clock=mode_clock)


def paradigm(workers=4, iterations=100, **kw):
    p = make_paradigm(Config(paradigm="syncswitch", **kw), workers)
    p.set_iterations(iterations)
    return p


# --- single decisions ------------------------------------------------------------

def test_gate_before_any_switch_is_bsp():
    p = paradigm()
    assert p.gate(0, view([3, 3, 3, 3])).ok
    assert not p.gate(0, view([3, 3, 3, 3], applied=[3, 3, 2, 3])).ok


def test_gate_around_a_switch_to_asp():
    p = paradigm()
    # BSP before K = 5: round 4 still synchronous
    assert not p.gate(0, view([4, 4, 4, 3], mode=MODE_ASP, mode_clock=5)).ok
    # at K every push before K must be applied first ...
    g = p.gate(0, view([5, 5, 5, 4], mode=MODE_ASP, mode_clock=5))
    assert not g.ok and g.waiting_for == (3,)
    # ... then no gate at all
    assert p.gate(0, view([9, 5, 5, 5], mode=MODE_ASP, mode_clock=5)).ok


def test_gate_around_a_switch_to_bsp_lets_laggards_catch_up():
    p = paradigm()
    v = view([12, 7, 12, 12], mode=MODE_BSP, mode_clock=12)
    assert p.gate(1, v).ok                        # a laggard runs its ASP iterations
    g = p.gate(0, v)
    assert not g.ok and g.waiting_for == (1,)     # BSP round 12 waits for it
    assert p.gate(0, view([12, 12, 12, 12], mode=MODE_BSP, mode_clock=12)).ok


def test_deciding_gates_as_bsp_and_servers_hold():
    p = paradigm()
    v = view([9, 5, 5, 5], mode=MODE_BSP, mode_clock=DECIDING)
    assert not p.gate(0, v).ok
    assert not p.server_ready(v, np.array([5, 5, 5, 5]))


def test_server_applies_only_whole_rounds_before_a_switch_to_asp():
    p = paradigm()
    v = view([5, 5, 4, 5], mode=MODE_ASP, mode_clock=5)
    assert not p.server_ready(v, np.array([4, 4, 4, 4]))            # round 4 is partial
    assert p.server_ready(view([5, 5, 5, 5], mode=MODE_ASP, mode_clock=5), np.array([4, 4, 4, 4]))
    assert p.server_ready(view([6, 5, 5, 5], mode=MODE_ASP, mode_clock=5), np.array([5, 5, 5, 5]))


def test_server_applies_asp_pushes_then_whole_rounds_after_a_switch_to_bsp():
    p = paradigm()
    consumed = np.array([10, 7, 10, 10])
    assert p.server_ready(view([10, 8, 10, 10], mode=MODE_BSP, mode_clock=10), consumed)
    consumed = np.array([10, 8, 10, 10])
    assert not p.server_ready(view([11, 8, 11, 10], mode=MODE_BSP, mode_clock=10), consumed)
    consumed = np.array([10, 10, 10, 10])
    assert not p.server_ready(view([11, 10, 11, 11], mode=MODE_BSP, mode_clock=10), consumed)
    assert p.server_ready(view([11, 11, 11, 11], mode=MODE_BSP, mode_clock=10), consumed)


def test_round_ready_skips_finished_workers():
    v = view([6, 6, 5], done=[False, False, True])
    assert round_ready(v, np.array([5, 5, 5]))
    assert not round_ready(view([6, 5, 5], done=[False, False, True]), np.array([5, 5, 5]))


def test_momentum_ramp():
    assert momentum_after_switch(0.9, 4, 0, 100) == pytest.approx(0.225)
    assert momentum_after_switch(0.9, 4, 50, 100) == pytest.approx(0.5625)
    assert momentum_after_switch(0.9, 4, 100, 100) == pytest.approx(0.9)
    assert momentum_after_switch(0.9, 4, 500, 100) == pytest.approx(0.9)
    assert momentum_after_switch(0.9, 4, 0, 0) == pytest.approx(0.9)


def test_server_momentum_and_lr_follow_the_step_mode():
    # the authors' rule: m/W, ramped back to m at the same lr
    p = paradigm(momentum=0.8, momentum_ramp=10, async_momentum="as-set")
    assert p.server_step(0.05, 0.8, view([5, 5, 5, 5], mode=MODE_ASP, mode_clock=5))[1] == 0.8   # BSP round 4
    first = view([6, 5, 5, 5], applied=[5, 5, 5, 5], mode=MODE_ASP, mode_clock=5)
    assert p.server_step(0.05, 0.8, first)[1] == pytest.approx(0.2)
    later = view([9, 8, 7, 7], applied=[9, 7, 6, 6], mode=MODE_ASP, mode_clock=5)   # 8 ASP pushes in
    assert p.server_step(0.05, 0.8, later)[1] == pytest.approx(0.2 + 0.6 * 0.8)
    # ASP pushes before a switch back to BSP keep ramping from where ASP began
    tail = view([12, 11, 12, 12], applied=[12, 10, 12, 12], mode=MODE_BSP, mode_clock=12)
    assert p.server_step(0.05, 0.8, tail)[1] == pytest.approx(0.8)     # 25 pushes > ramp
    assert p.server_step(0.05, 0.8, later)[0] == 0.05                  # the 1/W is in the push
    assert p.push(0, later, batch_size=16, read_updates=0, read_path_length=0.0).scale == 0.25


def test_compensated_ramp_ends_at_asps_momentum_with_bsps_long_run_step():
    p = paradigm(momentum=0.9, momentum_ramp=10)    # async_momentum: compensated (the default)
    bsp = view([5, 5, 5, 5], mode=MODE_ASP, mode_clock=5)
    assert p.server_step(0.05, 0.9, bsp) == (0.05, 0.9)                # BSP rounds as set
    first = view([6, 5, 5, 5], applied=[5, 5, 5, 5], mode=MODE_ASP, mode_clock=5)
    later = view([9, 8, 7, 7], applied=[9, 7, 6, 6], mode=MODE_ASP, mode_clock=5)   # 8 of 10
    done = view([20, 20, 20, 20], applied=[20, 20, 20, 20], mode=MODE_ASP, mode_clock=5)
    target = 1 - 4 * (1 - 0.9)                                          # 0.6: W = 4
    for v, m in ((first, 0.9 / 4), (later, 0.9 / 4 + (target - 0.9 / 4) * 0.8), (done, target)):
        lr, got = p.server_step(0.05, 0.9, v)
        assert got == pytest.approx(m)
        assert lr / (1 - got) == pytest.approx(0.05 / (1 - 0.9))        # the same long-run step


def test_detector_counts_each_iteration_once():
    d = StragglerDetector(1.5, 4)
    for c in range(1, 4):
        v = view([c] * 4, iter_times=[1.0, 1.1, 0.9, 4.0])
        d.observe(v)
        d.observe(v)            # no new iteration: not counted again
    assert d.slow_for(3) == [3] and d.slow_for(4) == []
    for c in range(4, 6):
        d.observe(view([c] * 4, iter_times=[1.0, 1.1, 0.9, 1.0]))
    assert not d.cleared([3], 3)
    d.observe(view([6] * 4, iter_times=[1.0, 1.1, 0.9, 1.0]))
    assert d.cleared([3], 3) and d.slow_for(1) == []


def test_offline_switch_is_announced_at_the_round_of_f():
    p = paradigm(iterations=50, switch_at=0.1)          # 5 BSP rounds
    assert p.server_control(view([3, 3, 3, 3])) == []
    out = p.server_control(view([4, 4, 4, 4]))
    assert [(s, v) for s, v, _ in out] == [(SLOT_MODE_CLOCK, DECIDING), (SLOT_MODE, MODE_ASP),
                                           (SLOT_MODE_CLOCK, 5)]
    event = out[-1][2]
    assert event["to"] == "asp" and event["clock"] == 5 and event["samples"] == 5 * 4 * 16
    assert event["momentum"] == pytest.approx(0.9 / 4) and "budget" in event["reason"]


def test_conservative_waits_longer_than_greedy():
    slow = [1.0, 1.0, 1.0, 3.0]
    greedy = paradigm(online_policy="greedy", switch_at=0.9, straggler_rounds=2, conservative_window=5)
    careful = paradigm(online_policy="conservative", switch_at=0.9, straggler_rounds=2,
                       conservative_window=5)
    first = {}
    for c in range(1, 8):
        for name, p in (("greedy", greedy), ("conservative", careful)):
            if p.server_control(view([c] * 4, iter_times=slow)) and name not in first:
                first[name] = c
    assert first == {"greedy": 2, "conservative": 5}


def test_switch_back_is_two_phase_and_waits_for_the_last_switch_to_settle():
    p = paradigm(online_policy="greedy", switch_at=0.9, straggler_rounds=1)
    out = p.server_control(view([5] * 4, iter_times=[1, 1, 1, 4]))
    assert out[-1][:2] == (SLOT_MODE_CLOCK, 6)
    normal = [1, 1, 1, 1]
    # the straggler is back to normal, but no push of clock >= 6 is applied everywhere yet
    asp = dict(mode=MODE_ASP, mode_clock=6, iter_times=normal)
    assert p.server_control(view([9, 9, 9, 7], applied=[6, 6, 6, 6], **asp)) == []
    out = p.server_control(view([10, 9, 9, 7], applied=[7, 6, 6, 6], **asp))
    assert out == [(SLOT_MODE_CLOCK, DECIDING, None), (SLOT_MODE, MODE_BSP, None)]
    # K comes from the clocks read after MODE_CLOCK = -1 was written
    out = p.server_control(view([12, 9, 9, 7], applied=[7, 6, 6, 6], mode=MODE_BSP,
                                mode_clock=DECIDING, iter_times=normal))
    assert out[0][:2] == (SLOT_MODE_CLOCK, 13) and out[0][2]["to"] == "bsp"
    assert "cleared" in out[0][2]["reason"]


def test_state_keeps_the_decisions_across_a_checkpoint():
    from mpips.io.checkpoint import decode, encode

    p = paradigm(iterations=50, switch_at=0.1)
    assert p.server_control(view([4, 4, 4, 4]))                 # switched to ASP at 5
    resumed = paradigm(iterations=50, switch_at=0.1)
    resumed.load_state(decode(*encode(p.state())))
    later = view([9, 8, 8, 8], applied=[8, 8, 8, 8], mode=MODE_ASP, mode_clock=5)
    assert resumed.server_control(later) == []                 # not a second offline switch
    assert resumed.state()["bsp_rounds"] == 5 and resumed.mode == MODE_ASP


def test_search_bisects_to_the_smallest_f_within_tolerance():
    probed = []

    def within(f):
        probed.append(f)
        return f >= 0.3

    assert bisect(within, 0.0, 1.0, 4) == pytest.approx(0.3125)
    assert probed == [0.0, 0.5, 0.25, 0.375, 0.3125]
    assert bisect(lambda f: True, 0.0, 1.0, 4) == 0.0
    assert bisect(lambda f: False, 0.0, 0.5, 4) is None       # not even the top of the range


def curve(points: dict, reference: list[float]):
    """A search's runs as a table: f -> the seeds' final accuracies."""
    def run(name, f):
        return Probe(f, list(reference if f is None else points[f]))
    return run


def test_a_curve_that_falls_as_f_grows_is_said_not_answered():
    """`syncswitch-search -n 5 -- --epochs 5` answered f = 1.0 (pure BSP) after
    measuring these on one seed: a bisection of a curve that goes up and down."""
    issue = {0.0: [0.942], 0.5: [0.844], 0.75: [0.928], 0.875: [0.928], 0.9375: [0.780]}
    record = search(curve(issue, [0.953]), low=0.0, high=1.0, tolerance=0.5, steps=4, report=lambda r, p: None)
    assert record["bisection"] == 1.0 and record["chosen"] is None and record["monotone"] is False
    assert record["falls"] == ["f = 0.0000: 94.2%", "f = 0.9375: 78.0%"]
    # over seeds whose spread covers the same fall, it is noise: the bisection's answer stands
    noisy = {f: [a - 0.15, a + 0.15] for f, (a,) in issue.items()}
    record = search(curve(noisy, [0.803, 1.103]), low=0.0, high=1.0, tolerance=0.5, steps=4, report=lambda r, p: None)
    assert record["monotone"] is True and record["chosen"] == record["bisection"]


def test_a_rising_curve_is_answered():
    rising = {0.0: [0.80, 0.82], 0.5: [0.951, 0.953], 0.25: [0.86, 0.87], 0.375: [0.951, 0.949]}
    seen = []
    record = search(curve(rising, [0.95, 0.954]), low=0.0, high=1.0, tolerance=0.5, steps=3,
                    report=lambda r, p: seen.append(p and p.f))
    assert record["chosen"] == 0.375 and record["monotone"] is True
    assert seen == [None, 0.0, 0.5, 0.25, 0.375, None]
    assert record["probes"][3]["final_accuracy"] == pytest.approx(0.95)


def test_search_runs_train_with_its_flags_last(srun_on_path):
    r = ProbeRunner(ranks=3, launcher="srun --mpi=pmix", flags=["--epochs", "1", "--switch-at", "0.9"],
                    out="/o", timeout=None, launches=None)
    cmd = r.command("/o/p", 0.25, seed=2)
    assert cmd[:4] == ["srun", "--mpi=pmix", "-n", "3"]
    assert cmd[cmd.index("train") + 1:] == ["--epochs", "1", "--switch-at", "0.9", "--paradigm",
                                            "syncswitch", "--switch-at", "0.25", "--seed", "2", "--run-dir",
                                            "/o/p", "--overwrite"]
    assert "bsp" in r.command("/o/r", None)


def test_search_refuses_a_launcher_that_cannot_start_it(tmp_path, capsys):
    # (an empty one ran `-n`: FileNotFoundError, a traceback, after the folder was made)
    from mpips import cli

    assert cli.main(["syncswitch-search", "-n", "3", "--launcher", "", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpips: error: invalid --launcher '': empty") and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()


# --- the protocol, simulated -------------------------------------------------------

class Simulation:
    """W workers and S servers on a shared table, each with its own paradigm
    object, as in a run: worker gate -> (read) -> compute -> push into every
    server's window -> tick; server poll: read the table, (server 0) write its
    control triples one by one, decide on the read, take its whole window,
    step, publish. Every delay is random, and server 0 writes each decision
    late (as if descheduled between reading the table and writing)."""

    def __init__(self, seed, *, workers=4, servers=2, iterations=60, straggler=None, **cfg):
        self.rng = np.random.default_rng(seed)
        self.W, self.S, self.N = workers, servers, iterations
        self.straggler = straggler                      # (worker, first, count, factor)
        self.cfg = dict(paradigm="syncswitch", momentum=0.9, momentum_ramp=20, **cfg)
        self.clocks = np.zeros(workers, int)
        self.iter_times = np.full(workers, np.nan)
        self.done = np.zeros(workers, bool)
        self.published = np.zeros((servers, workers), int)
        self.slots = {SLOT_MODE: MODE_BSP, SLOT_MODE_CLOCK: 0}
        self.window = [[] for _ in range(servers)]
        self.applied = [set() for _ in range(servers)]
        self.steps = [[] for _ in range(servers)]        # (pushes, momentum)
        self.reads = {}                                 # (worker, clock) -> what each server had applied
        self.events = []
        self.queue, self.seq, self.finished = [], 0, set()

    def make(self):
        p = make_paradigm(Config(**self.cfg), self.W)
        p.set_iterations(self.N)
        return p

    def view(self, now):
        return ClusterView(now=now, clocks=self.clocks.copy(), applied=self.published.min(axis=0),
                           push_times=np.full((self.W, 2), np.nan), iter_times=self.iter_times.copy(),
                           done=self.done.copy(),
                           updates=int(self.published.sum(axis=1).min()),
                           mode=int(self.slots[SLOT_MODE]), mode_clock=int(self.slots[SLOT_MODE_CLOCK]))

    def at(self, t, fn):
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, fn))

    def compute_time(self, j, c):
        t = self.rng.uniform(0.6, 1.4)
        s = self.straggler
        if s and j == s[0] and s[1] <= c < s[1] + s[2]:
            t *= s[3]
        return t

    # workers
    def worker(self, j, p):
        def gate(t):
            if p.gate(j, self.view(t)).ok:
                c = int(self.clocks[j])
                self.reads[(j, c)] = [frozenset(a) for a in self.applied]
                busy = self.compute_time(j, c)
                self.at(t + busy, lambda t2: push(t2, c, busy))
            else:
                self.at(t + self.rng.uniform(0.02, 0.3), gate)

        def push(t, c, busy):
            for w in self.window:
                w.append((j, c))
            self.at(t + self.rng.uniform(0, 0.3), lambda t2: tick(t2, busy))

        def tick(t, busy):
            self.clocks[j] += 1
            self.iter_times[j] = busy
            if self.clocks[j] == self.N:
                self.done[j] = True
            else:
                self.at(t + self.rng.uniform(0, 0.05), gate)
        return gate

    # servers
    def server(self, s, p):
        consumed = np.zeros(self.W, int)

        def poll(t):
            v = self.view(t)
            writes = p.server_control(v) if s == 0 else []
            # a decision is written up to 3 iterations after the read it rests on
            self.at(t + self.rng.uniform(0, 3.0 if writes else 0.05), lambda t2: write(t2, v, writes))

        def write(t, v, writes):
            if writes:
                slot, value, event = writes[0]
                self.slots[slot] = value
                if event:
                    self.events.append(dict(event, time=t))
                self.at(t + self.rng.uniform(0, 1.0), lambda t2: write(t2, v, writes[1:]))
            elif p.server_ready(v, consumed):
                self.at(t + self.rng.uniform(0, 0.6), lambda t2: step(t2, v))
            elif v.done.all() and (v.clocks == consumed).all():
                self.finished.add(s)
            else:
                self.at(t + self.rng.uniform(0.02, 0.3), poll)

        def step(t, v):
            pushes, self.window[s] = self.window[s], []
            momentum = p.server_step(0.05, 0.9, v)[1]
            self.applied[s].update(pushes)
            self.steps[s].append((sorted(pushes), momentum))
            consumed[:] = v.clocks
            self.at(t + self.rng.uniform(0, 0.05), publish)

        def publish(t):
            self.published[s] = consumed
            poll(t)
        return poll

    def run(self, limit=200_000):
        for j in range(self.W):
            self.at(0.0, self.worker(j, self.make()))
        for s in range(self.S):
            self.at(0.0, self.server(s, self.make()))
        for _ in range(limit):
            if not self.queue:
                break
            t, _, fn = heapq.heappop(self.queue)
            fn(t)
        assert len(self.finished) == self.S and self.done.all(), "deadlock: nothing left to do"
        return self

    def phase(self, c):
        """Mode of the pushes of clock c, from server 0's logged decisions."""
        mode = "bsp"
        for e in self.events:
            if c >= e["clock"]:
                mode = e["to"]
        return mode

    def check(self):
        everything = {(j, c) for j in range(self.W) for c in range(self.N)}
        for s in range(self.S):
            taken = [q for pushes, _ in self.steps[s] for q in pushes]
            assert sorted(taken) == sorted(everything), "a push lost or applied twice"
            for pushes, momentum in self.steps[s]:
                if not pushes:
                    continue    # its pushes were taken, un-ticked, by the step before (ASP)
                modes = {self.phase(c) for _, c in pushes}
                assert len(modes) == 1, f"server {s} mixed phases in one step: {pushes}"
                if modes == {"bsp"}:
                    rounds = {c for _, c in pushes}
                    assert len(rounds) == 1 and len(pushes) == self.W, f"partial BSP round: {pushes}"
                    assert momentum == pytest.approx(0.9)
        for (j, c), seen in self.reads.items():
            if self.phase(c) == "bsp":     # the BSP oracle: everyone reads exactly rounds < c
                before = {(i, k) for i in range(self.W) for k in range(c)}
                assert all(a == before for a in seen), f"worker {j} read round {c} off-sync"
        for e in self.events:
            assert {"time", "clock", "reason", "to"} <= set(e)
        return self


@pytest.mark.parametrize("seed", range(6))
def test_offline_switch_simulated(seed):
    sim = Simulation(seed, switch_at=0.25).run().check()
    assert [(e["to"], e["clock"]) for e in sim.events] == [("asp", math.ceil(0.25 * sim.N))]
    for s in range(sim.S):       # the first ASP step of every server: momentum m/W
        first = next(m for pushes, m in sim.steps[s] if sim.phase(pushes[0][1]) == "asp")
        assert first == pytest.approx(0.9 / sim.W)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["greedy", "conservative"])
def test_transient_straggler_simulated(seed, policy):
    sim = Simulation(seed, iterations=100, straggler=(3, 10, 12, 4.0), switch_at=0.6,
                     online_policy=policy, straggler_rounds=3, conservative_window=6).run().check()
    to = [e["to"] for e in sim.events]
    assert to[:2] == ["asp", "bsp"] and "worker 3" in sim.events[0]["reason"]
    assert 10 + (3 if policy == "greedy" else 6) <= sim.events[0]["clock"] <= 22
    # BSP rounds total f of the budget (to within the round the last switch waits for)
    bsp = sum(1 for c in range(sim.N) if sim.phase(c) == "bsp")
    target = math.ceil(0.6 * sim.N)
    assert bsp <= target + 2 and (to[-1] == "bsp" or bsp >= target)


@pytest.mark.parametrize("seed", range(4))
def test_no_switch_at_f_one_is_bsp(seed):
    sim = Simulation(seed, switch_at=1.0, servers=1, iterations=20).run().check()
    assert sim.events == []
