"""Update rules for pushes applied one at a time (docs/paradigms.md, "Update
rules"): what a server does to one push before it sums it into its step, under
every paradigm that applies pushes asynchronously (not within a synchronous
round, where every push was computed on the parameters it lands on).

A push computed on parameters read tau updates ago lands on parameters it
never saw. tau = the pushes this server applied between the worker's read and
this push's step (the worker sends the version it read with its push).

- staleness (Zhang, Gupta, Lian, Liu, IJCAI 2016): the push times 1 / max(1, tau);
- delay-adaptive (Mishchenko, Bach, Even, Woodworth, NeurIPS 2022; their code's
  lr x W / max(W, tau)): no damping while tau stays under the W clients;
- dc, dc-adaptive (DC-ASGD, Zheng et al., ICML 2017): the gradient g of the push
  plus lambda g * g * (w_now - w_read), elementwise, a first-order correction
  for the parameters' move since the read; lambda constant (MXNet's 0.04), or
  lambda0 / sqrt(MS + eps) with MS an EMA of g * g (Multiverso's DC-ASGD-a:
  lambda0 2, decay 0.95, eps 1e-7); with dc_clip > 0 each element's
  correction bounded by dc_clip x |g| there (ours, not the papers': an
  unbounded correction fed itself until GSSP diverged,
  benchmarks/async_scale_notes.md).

A push arrives scaled by its paradigm (1/W, VSGD's damping, ...): the factor
multiplies it, and DC's correction, written for the gradient g = push / scale,
is added in the push's own scale, so every rule composes with the paradigm's.
With one worker tau is 0 and w_now = w_read (read-your-writes): every rule
is then the plain one, bit for bit (the factor is 1; DC adds zeros).

Pure numpy, one object per server shard (DC-ASGD-a's MS is per shard).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ASYNC_RULES = ("none", "staleness", "delay-adaptive", "dc", "dc-adaptive")
READING = ("dc", "dc-adaptive")   # the rules that need what each push was computed on
DC_EPS = 1e-7


@dataclass(frozen=True)
class Ruled:
    """What a rule did to one push: its staleness, the factor it was
    multiplied by, and the norms of its gradient and of DC's correction
    (gradient units; nan where the rule has no correction)."""

    tau: int
    factor: float
    gradient: float
    compensation: float


class AsyncRule:
    """The configured rule on one server's shard. `clients`: the rows that
    push into this server (workers; a GSSP level's group members or groups),
    W of the delay-adaptive step."""

    def __init__(self, kind: str, clients: int, *, dc_lambda: float = 0.04, dc_lambda0: float = 2.0,
                 dc_decay: float = 0.95, dc_clip: float = 0.0):
        if kind not in ASYNC_RULES:
            raise ValueError(f"async rule {kind!r}; allowed: {', '.join(ASYNC_RULES)}")
        self.kind, self.clients = kind, clients
        self.dc_lambda, self.dc_lambda0, self.dc_decay, self.dc_clip = dc_lambda, dc_lambda0, dc_decay, dc_clip
        self.mean_square: np.ndarray | None = None   # dc-adaptive: EMA of g * g, per element
        self._bufs: list[np.ndarray] | None = None

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @property
    def reads(self) -> bool:
        """Whether the rule needs the parameters each push was computed on."""
        return self.kind in READING

    def factor(self, tau: int) -> float:
        if self.kind == "staleness":
            return 1.0 / max(1, tau)
        if self.kind == "delay-adaptive":
            return self.clients / max(self.clients, tau)
        return 1.0

    def apply(self, push: np.ndarray, *, tau: int, scale: float, now: np.ndarray,
              read: np.ndarray | None) -> tuple[np.ndarray, Ruled]:
        """The push as it goes into the step (a buffer of this object's, or
        `push` itself where the rule leaves it alone), and what was done.
        `now`: the shard as the step finds it; `read`: the shard the push was
        computed on (the DC rules)."""
        gradient = _norm(push) / abs(scale) if scale else 0.0
        if not self.reads:
            factor = self.factor(tau)
            if factor == 1.0:
                return push, Ruled(tau, factor, gradient, float("nan"))
            out = self._buffers(push.size)[0]
            np.multiply(push, np.float32(factor), out=out)
            return out, Ruled(tau, factor, gradient, float("nan"))
        if read is None:
            raise ValueError(f"async rule {self.kind} needs the parameters each push was read at")
        out, g, correction = self._buffers(push.size)
        if scale:
            np.divide(push, np.float32(scale), out=g)
        else:
            g[:] = 0   # a push scaled to nothing carries no gradient to correct
        lam = self._adaptive_lambda(g) if self.kind == "dc-adaptive" else np.float32(self.dc_lambda)
        np.subtract(now, read, out=correction)
        correction *= g
        correction *= g
        correction *= lam
        if self.dc_clip:   # within +-dc_clip x |g| (out: scratch until the copy below)
            np.abs(g, out=out)
            out *= np.float32(self.dc_clip)
            np.minimum(correction, out, out=correction)
            np.negative(out, out=out)
            np.maximum(correction, out, out=correction)
        compensation = _norm(correction)
        correction *= np.float32(scale)
        # push + correction, the push itself wherever the correction is zero
        # (a zero of either sign added to -0.0 is not always -0.0): with one
        # worker, or lambda 0, the plain rule bit for bit
        np.copyto(out, push)
        np.add(out, correction, out=out, where=correction != 0)
        return out, Ruled(tau, 1.0, gradient, compensation)

    def _adaptive_lambda(self, g: np.ndarray) -> np.ndarray:
        """lambda0 / sqrt(MS + eps), MS updated with this push's g * g first."""
        d = np.float32(self.dc_decay)
        if self.mean_square is None:
            self.mean_square = np.zeros_like(g)
        ms = self.mean_square
        ms *= d
        ms += (1 - d) * g * g
        lam = np.sqrt(ms + np.float32(DC_EPS))
        np.divide(np.float32(self.dc_lambda0), lam, out=lam)
        return lam

    def _buffers(self, n: int) -> list[np.ndarray]:
        """The rule's output and scratch arrays, made once per shard size."""
        if self._bufs is None or self._bufs[0].size != n:
            self._bufs = [np.empty(n, np.float32) for _ in range(3 if self.reads else 1)]
        return self._bufs

    def state(self) -> dict:
        return {"mean_square": None if self.mean_square is None else self.mean_square.copy()}

    def load_state(self, state: dict) -> None:
        ms = state.get("mean_square")
        self.mean_square = None if ms is None else np.asarray(ms, dtype=np.float32).copy()


def _norm(x: np.ndarray) -> float:
    return float(np.linalg.norm(x))
