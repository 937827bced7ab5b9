"""The update rules for pushes applied one at a time (`--async-rule`) in
`mpips simulate`: with one worker each is plain SGD bit for bit; tau is the
count of pushes a server applied between a worker's pull and the step that
applies its push; a run of DC with lambda 0, and one of the staleness rule,
are the one-process replays of their logged steps bit for bit (each push's
gradient on the parameters of the version it read)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mpips.config import Config
from mpips.paradigms.base import compensated_momentum, compensated_step
from mpips.runtime.roles.server import Server
from mpips.runtime.roles.worker import Worker
from mpips.runtime.transport.local import LocalParameterStore
from mpips.training.data import GlobalStream, load_dataset
from mpips.training.flatmodel import FlatModel
from mpips.training.models import build_model
from mpips.training.optim import server_rule
from tests.sim.test_simulator import simulate

RULES = ("staleness", "delay-adaptive", "dc", "dc-adaptive")


@pytest.mark.parametrize("paradigm", [
    ("--paradigm", "asp"),
    ("--paradigm", "gssp", "--groups", "1"),    # both levels
    ("--paradigm", "syncswitch", "--switch-at", "0.5"),
    ("--paradigm", "localsgd", "--local-mode", "async", "--local-steps", "2"),
], ids=lambda f: f[1])
def test_one_worker_every_rule_is_the_plain_rule_bit_for_bit(tmp_path, paradigm):
    """One worker reads its own writes: tau is 0 and w_now = w_read at every
    apply, so no rule changes a push (the plain rule: test_simulator's
    one-worker oracle, sequential SGD). GSSP's group server, at an exchange,
    continues from the global parameters plus its delta, its own copy up to
    rounding (pulled + (params - base), pulled = base): a worker that pulled
    just before sees that rounding move, which DC corrects for, so there DC
    is the plain rule within float rounding."""
    flags = ("--workers", "1", *paradigm, "--iterations", "12", "--lr", "0.1", "--seed", "3")
    plain = simulate(tmp_path / "none", *flags).final_params()
    for rule in RULES:
        log = simulate(tmp_path / rule, *flags, "--async-rule", rule)
        pushes, it = log.pushes, log.iterations
        assert len(pushes) and (pushes["tau"] == 0).all() and (pushes["factor"] == 1).all(), rule
        # DC's pushes carry the parameters they were read at: twice the bytes
        assert (it["bytes_sent"] == (2 if rule.startswith("dc") else 1) * it["bytes_dense"]).all()
        if paradigm[1] == "gssp" and rule.startswith("dc"):
            assert (pushes["compensation"] <= 1e-6 * pushes["gradient"]).all()
            assert np.abs(log.final_params() - plain).max() < 1e-6
            continue
        assert log.final_params().tobytes() == plain.tobytes(), rule
        if rule.startswith("dc"):
            assert (pushes["compensation"] == 0).all()


def test_tau_counts_the_applies_between_a_pull_and_its_apply(tmp_path, monkeypatch):
    """Counted from outside the rule: every worker pull and every server step
    in the order they happen (the steps of each of two servers apart); a
    push's tau on a server is the pushes that server applied after the pull
    its gradient was computed on and before the step that applied it."""
    events = []
    pull, apply = Worker._pull, Server.apply

    def spy_pull(self, view):
        out = pull(self, view)
        events.append(("pull", self.i, self.clock + 1))   # the number of the push it computes
        return out

    def spy_apply(self, view, waited):
        before = self.consumed.copy()
        apply(self, view, waited)   # returns once the step is published
        events.append(("apply", self.ctx.rank, before, self.consumed.copy()))

    monkeypatch.setattr(Worker, "_pull", spy_pull)
    monkeypatch.setattr(Server, "apply", spy_apply)
    log = simulate(tmp_path / "run", "--paradigm", "asp", "--workers", "4", "--servers", "2", "--slowdown",
                   "1,1,2,4", "--iterations", "12", "--async-rule", "staleness")
    pulled = {(e[1], e[2]): k for k, e in enumerate(events) if e[0] == "pull"}
    expected = {}
    for server in (0, 1):
        steps = [(k, e[2], e[3]) for k, e in enumerate(events) if e[0] == "apply" and e[1] == server]
        for k, before, after in steps:
            for worker in np.flatnonzero(after > before):
                for number in range(before[worker] + 1, after[worker] + 1):
                    read = pulled[(worker, number)]
                    expected[(server, worker, number)] = sum(
                        int((a - b).sum()) for j, b, a in steps if read < j < k)
    rows = log.pushes
    logged = {(int(r["server"]), int(r["worker"]), int(r["clock"])): int(r["tau"]) for r in rows}
    assert len(rows) == len(logged) == len(expected) == 2 * 4 * 12
    assert logged == expected
    assert max(logged.values()) >= 4   # the 4x slow worker's pushes miss several
    factors = {(int(r["server"]), int(r["worker"]), int(r["clock"])): float(r["factor"]) for r in rows}
    assert all(factors[k] == np.float32(1 / max(1, t)) for k, t in expected.items())


def replayed_async_run(log, rule) -> np.ndarray:
    """An ASP run of one server recomputed in one process from its log: each
    step's pushes (its `pushes` rows), each push's gradient on its batch at
    the parameters of the version it read (the step boundary where the
    server had applied that many pushes: a wrong version has none, or
    another), scaled as its worker scaled it, then as `rule(push, tau)` makes
    it, summed in the server's order, and applied with the server's
    compensated SGD. Bit for bit what the run computed, if every version is
    the one the worker read."""
    config = Config(**log.config)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = load_dataset(config)
        torch.manual_seed(config.seed)
        flat = FlatModel(build_model(config.model, data.input_shape, data.num_classes))
        stream = GlobalStream(data.x_train, data.y_train, config.seed)
        w = flat.flat_copy()
        opt = server_rule(config, w)
        lr, momentum = compensated_step(config.lr, config.momentum,
                                        compensated_momentum(config.momentum, config.workers))
        opt.set_momentum(momentum)
        batches = {(int(r["worker"]), int(r["clock"]) + 1): (int(r["sample"]), int(r["batch"]), float(r["scale"]))
                   for r in log.iterations}
        history, applied, total = {0: w.copy()}, 0, np.empty_like(w)
        pushes = log.pushes
        for step in np.unique(pushes["step"]):
            grads = []
            for r in pushes[pushes["step"] == step]:
                start, b, scale = batches[(int(r["worker"]), int(r["clock"]))]
                flat.host_params[:] = history[applied - int(r["tau"])]
                flat.zero_grad()
                x, y = stream.batch(start, b)
                torch.nn.CrossEntropyLoss()(flat.model(x), y).backward()
                grad = flat.host_grads.copy()
                grad *= scale
                grads.append(((start, int(r["worker"])), rule(grad, int(r["tau"]))))
            for k, (_, grad) in enumerate(sorted(grads, key=lambda g: g[0])):
                if k == 0:
                    np.copyto(total, grad)
                else:
                    total += grad
            opt.step(total, lr)
            applied += len(grads)
            history[applied] = w.copy()
        return w
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("rule, flags, transform", [
    ("dc", ("--dc-lambda", "0"), lambda push, tau: push),
    ("staleness", (), lambda push, tau: push if tau <= 1 else push * np.float32(1 / tau)),
], ids=["dc-lambda-0", "staleness"])
def test_an_async_run_is_the_replay_of_its_logged_steps(tmp_path, rule, flags, transform):
    """DC with lambda 0 is the plain rule (`transform` leaves every push
    alone) bit for bit on a run where pushes are stale; the staleness rule
    is each push times 1/max(1, tau). The replay computes every push's
    gradient from the version the log says its worker read."""
    log = simulate(tmp_path / "run", "--paradigm", "asp", "--workers", "4", "--slowdown", "1,1,2,4",
                   "--iterations", "10", "--async-rule", rule, *flags)
    assert log.pushes["tau"].max() >= 3 and len(log.pushes) == 40
    assert log.final_params().tobytes() == replayed_async_run(log, transform).tobytes()


def test_a_sparse_push_sends_dcs_read_at_its_indices_only_and_applies_as_a_dense_read(tmp_path, monkeypatch):
    """DC's correction lambda g*g*(w_now - w_read) is zero wherever a top-k
    push is, so the read parameters go at the push's indices only: the run is
    bit for bit the one whose sparse pushes send the whole read (the read slot's
    other cells then differ, stale from earlier pushes, and count for nothing),
    and a sparse push's bytes are its indices and values plus 4 per index."""
    flags = ("--paradigm", "asp", "--workers", "4", "--slowdown", "1,1,2,4", "--iterations", "12",
             "--compressor", "topk", "--async-rule", "dc-adaptive")
    log = simulate(tmp_path / "sparse", *flags)
    it = log.iterations
    sparse = it["bytes_sent"] < it["bytes_dense"]
    assert sparse.sum() >= 30 and (it["bytes_sent"][sparse] % 12 == 0).all()   # 4 + 4 + 4 per index

    sparse_read = LocalParameterStore.push_sparse

    def whole_read(self, indices, values, *, row, read=None, **slot):
        sparse_read(self, indices, values, row=row, read=read, **slot)   # the same virtual time
        k = self.slot(row)   # then the whole read into the slot, before any other task runs
        for reads, (lo, hi) in zip(self._shared.reads, self.bounds):
            reads[k] = read[lo:hi]
    monkeypatch.setattr(LocalParameterStore, "push_sparse", whole_read)
    whole = simulate(tmp_path / "whole", *flags)
    assert whole.iterations.tobytes() == it.tobytes()
    assert log.final_params().tobytes() == whole.final_params().tobytes()
    assert np.isfinite(log.pushes["compensation"]).all() and (log.pushes["compensation"] > 0).any()
