"""Evaluation of the global parameters on the held-out split.

Two placements, recorded in run.h5's layout (`evaluation`):
- `--evaluator`: one extra rank after the workers reads the parameters with
  `Get` when the servers' applied pushes pass the next evaluation point,
  evaluates, logs and prints the progress line. It never blocks a server or
  a worker, so time-to-accuracy measures training alone (as the DDP baseline
  of benchmarks/vs_ddp.py, which evaluates snapshots after training). Its
  read is not synchronized with the servers' applies: with several servers
  it may mix shards of neighbouring steps, as any asynchronous reader does.
- inline (the default): server 0 evaluates between two applies, pausing
  them (and under BSP every worker) while it does.

Either way an evaluation row holds the time of the parameter read and the
steps and pushes applied as read just before it.
"""
from __future__ import annotations

import sys

import numpy as np
import torch

from ..context import Context
from ..progress import Progress
from ..state import G, S, W
from ..transport.wait import WallClock

PROGRESS_EVERY = 1.0   # s: the evaluator's wait returns this often while the servers progress


class Evaluator:
    def __init__(self, ctx: Context, flat, x_test: torch.Tensor, y_test: torch.Tensor):
        self.ctx = ctx
        self.flat = flat
        self.x, self.y = x_test, y_test
        self.best = 0.0
        self.last_pushes = -1
        self.last_loss: float | None = None   # of this process's last evaluation (assemble.judge_training)
        self.next_eval = ctx.config.eval_every   # epochs (the evaluator rank's own schedule)
        plan, config = ctx.plan, ctx.config
        self.progress = Progress(plan.total_samples or plan.iterations * plan.layout.workers * config.batch_size,
                                 virtual=not isinstance(ctx.clock, WallClock), mode=config.progress,
                                 every=config.progress_every)
        # what applied() reads: three cells of each server's row (the simulator
        # re-checks the evaluator's wait only when one changes, not at every tick)
        control = ctx.table
        self._cells = [control.server_offset(s, col) for s in range(control.servers)
                       for col in (S.STEPS, S.PUSHES, S.DONE)]

    def state(self) -> dict:
        return {"best": self.best, "last_pushes": self.last_pushes, "next_eval": self.next_eval}

    def load_state(self, state: dict) -> None:
        self.best, self.last_pushes = float(state["best"]), int(state["last_pushes"])
        self.next_eval = float(state["next_eval"])

    def applied(self) -> tuple[int, int, bool]:
        """(steps, pushes) applied by every server, and whether all are done."""
        cells = self.ctx.table.read_cells(self._cells).tolist()
        return int(min(cells[0::3])), int(min(cells[1::3])), all(d > 0 for d in cells[2::3])

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        ctx, flat = self.ctx, self.flat
        steps, pushes, _ = self.applied()
        read_at = ctx.now()
        ctx.store.observe(flat.host_params)
        flat.params_from_host()
        flat.model.eval()
        loss_sum, correct = 0.0, 0
        for lo in range(0, len(self.y), 1024):
            x = self.x[lo:lo + 1024].to(flat.device)
            y = self.y[lo:lo + 1024].to(flat.device)
            out = flat.model(x)
            if ctx.plan.loss_fn is None:
                loss_sum += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
            else:   # a user's loss: assumed a mean over the batch
                loss_sum += float(ctx.plan.loss_fn(out, y)) * len(y)
            correct += int((out.argmax(1) == y).sum())
        flat.model.train()
        loss, acc = loss_sum / len(self.y), correct / len(self.y)
        epoch = self.epoch(pushes)
        ctx.log.row("evaluations", time=read_at, epoch=epoch, steps=steps, pushes=pushes, loss=loss, accuracy=acc)
        ctx.log.flush()
        rows = ctx.table.worker_rows(ctx.table.read())
        wait_share = float(np.mean(rows[:, W.WAIT_TOTAL] / np.maximum(rows[:, W.ELAPSED], 1e-9)))
        self.progress.write(f"mpips: epoch {epoch:5.2f}  t {read_at:7.1f}s  updates {steps:6d}  loss {loss:.4f}  "
                            f"acc {100 * acc:5.1f}%  updates/s {steps / max(read_at, 1e-9):7.1f}  "
                            f"wait {100 * wait_share:4.1f}%", file=sys.stdout)
        self.progress.evaluated(acc, epoch)
        self.best = max(self.best, acc)
        self.last_pushes = pushes
        self.last_loss = loss
        return loss, acc

    def epoch(self, pushes: int) -> float:
        """Epochs trained as of `pushes`: under a global budget never more than
        the samples claimed make (a Local SGD push counts as H batches, and a
        worker's last push, or one under DyLU, has fewer: a 2-epoch run of 100
        local steps was logged at epoch 3.34)."""
        ctx, plan = self.ctx, self.ctx.plan
        epoch = ctx.epochs_of(pushes)
        if plan.total_samples:
            claimed = min(float(ctx.services.budget_table.read_cells([G.CLAIMED])[0]), plan.total_samples)
            epoch = min(epoch, claimed / plan.total_samples * plan.epochs)
        return epoch

    def report(self, snapshot: np.ndarray | None = None) -> None:
        """The progress line, when due (`snapshot`: the control table as just
        read, if the caller has one; else it is read only when due)."""
        if self.progress.due():
            self.progress.update(self._samples(snapshot), self.ctx.now())

    def _samples(self, snapshot: np.ndarray | None = None) -> float:
        table = self.ctx.table
        return float(table.worker_rows(table.read() if snapshot is None else snapshot)[:, W.SAMPLES].sum())

    def finish(self) -> None:
        """The run is over: the bar's last state, then it goes."""
        self.progress.close(self._samples(), self.ctx.now())

    # the evaluator rank ---------------------------------------------------------
    def run(self) -> None:
        """Evaluate at every evaluation point until every server is done. A
        wait returns at least every PROGRESS_EVERY s while the servers
        progress, so only servers that stop progressing hit the stall timeout."""
        ctx = self.ctx
        eval_every = ctx.config.eval_every
        while True:
            start = ctx.now()
            _, seen, _ = self.applied()
            last = {}

            def ready():
                self.report()
                _, pushes, done = last["now"] = self.applied()
                return (done or ctx.epochs_of(pushes) >= self.next_eval - 1e-9
                        or (pushes != seen and ctx.now() - start > PROGRESS_EVERY))

            def describe():
                rows = ctx.table.server_rows(ctx.table.read())
                ranks = ctx.layout.server_ranks
                return "; ".join(f"server {s} = {ctx.rank_name(ranks[s])} (pushes applied {int(rows[s, S.PUSHES])})"
                                 for s in np.flatnonzero(rows[:, S.DONE] == 0))

            ctx.checkpointer.wait(ctx, ready, what="evaluator waiting for the servers", describe=describe,
                                  stop=self.stop_for_checkpoint)
            _, pushes, done = last["now"]
            if done:
                break
            if ctx.epochs_of(pushes) >= self.next_eval - 1e-9:
                while ctx.epochs_of(pushes) >= self.next_eval - 1e-9:
                    self.next_eval += eval_every
                self.evaluate()

    def stop_for_checkpoint(self) -> None:
        """Take part in the checkpoint every rank stops for (it pushes nothing,
        so the servers do not wait for it: no acknowledgement)."""
        self.ctx.checkpointer.halt(self.ctx, self.state, ack=None)
