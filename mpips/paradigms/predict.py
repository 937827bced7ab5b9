"""Speed predictors for LB-BSP: next round's samples/s of one worker.

Each worker (or the server, per worker) feeds one predictor per round with the
measured speed and the worker's CPU and memory utilisation, and asks it for
next round's speed; `mpips.paradigms.balance.allocate` turns the predictions into batch
sizes. `LastValue` and `EWMA` are baselines; `NARX` is the paper's predictor.
Pure numpy (psutil only for `utilisation()`).
"""
from __future__ import annotations

import math

import numpy as np

from ..validate import ConfigError

PREDICTORS = ("ewma", "narx")   # make_predictor's names

__all__ = ["SpeedPredictor", "LastValue", "EWMA", "NARX", "make_predictor", "utilisation"]


def _clean_util(x: float) -> float:
    """Utilisation in [0, 1]; a missing reading counts as idle."""
    x = float(x)
    return min(max(x, 0.0), 1.0) if math.isfinite(x) else 0.0


class SpeedPredictor:
    """Interface. Speeds that are not finite and > 0 are ignored by `observe`
    (a failed measurement must not poison the history)."""

    name = "base"
    exogenous = False   # observe() uses cpu and mem (worth measuring them)

    def observe(self, speed: float, cpu: float = 0.0, mem: float = 0.0) -> None:
        """Record one round: measured samples/s, CPU and memory utilisation in [0, 1]."""
        raise NotImplementedError

    def predict(self) -> float:
        """Predicted samples/s of the next round; nan before any observation."""
        raise NotImplementedError

    @staticmethod
    def _valid(speed: float) -> bool:
        return math.isfinite(speed) and speed > 0


class LastValue(SpeedPredictor):
    """Next round runs as fast as the last one."""

    name = "last"

    def __init__(self):
        self.last = math.nan

    def observe(self, speed, cpu=0.0, mem=0.0):
        if self._valid(speed):
            self.last = float(speed)

    def predict(self):
        return self.last


class EWMA(SpeedPredictor):
    """Exponentially weighted moving average; the first observation starts it
    (no bias toward 0). Higher `alpha` follows changes faster."""

    name = "ewma"

    def __init__(self, alpha: float = 0.5):
        if not (0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = float(alpha)
        self.value = math.nan

    def observe(self, speed, cpu=0.0, mem=0.0):
        if not self._valid(speed):
            return
        if math.isnan(self.value):
            self.value = float(speed)
        else:
            self.value += self.alpha * (float(speed) - self.value)

    def predict(self):
        return self.value


class _Running:
    """Running mean and standard deviation per column (Welford)."""

    def __init__(self, n: int):
        self.count = 0
        self.mean = np.zeros(n)
        self._m2 = np.zeros(n)

    def add(self, x: np.ndarray) -> None:
        self.count += 1
        d = x - self.mean
        self.mean += d / self.count
        self._m2 += d * (x - self.mean)

    @property
    def std(self) -> np.ndarray:
        var = self._m2 / max(self.count - 1, 1)
        s = np.sqrt(var)
        # A constant column carries no information: scale 1 keeps it at 0
        # instead of blowing float noise up.
        return np.where(s > 1e-8 * (1.0 + np.abs(self.mean)), s, 1.0)


class NARX(SpeedPredictor):
    """Nonlinear autoregressive predictor with exogenous inputs.

    v(k+1) = f(v(k..k-d+1), u(k..k-d+1)), u = (cpu, mem), with f a
    one-hidden-layer tanh network trained online: after every observation,
    `steps` Adam steps on the last `window` (input, next speed) pairs of this
    worker's own history. Inputs and target are normalised by the running
    mean/std of speed, cpu and mem.

    f is parameterised as a correction to the last value,
    v(k+1) = v(k) + std_v * net(x), with the output layer starting at zero: an
    untrained network predicts exactly the last value, and what it learns is
    how the inputs change the speed (e.g. load coming on). Until 2d+2 points
    are seen it predicts the last value. Deterministic given `seed`.
    """

    name = "narx"
    exogenous = True

    def __init__(self, delay: int = 3, hidden: int = 8, *, window: int = 64,
                 steps: int = 3, lr: float = 0.02, weight_decay: float = 1e-4,
                 seed: int = 0):
        if delay < 1 or hidden < 1 or window < 1 or steps < 0:
            raise ValueError("NARX needs delay, hidden, window >= 1 and steps >= 0")
        self.delay = int(delay)
        self.hidden = int(hidden)
        self.window = int(window)
        self.steps = int(steps)
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.min_history = 2 * self.delay + 2
        # Rows of (speed, cpu, mem), oldest first: the last `window` samples
        # need `window + delay` rows.
        self._buf = np.zeros((self.window + self.delay, 3))
        self._len = 0
        self._stats = _Running(3)
        n_in = 3 * self.delay
        # All weights live in one flat vector (w1, b1, w2, b2 are views into
        # it) so an Adam step is a handful of numpy calls, not one per tensor.
        sizes = (n_in * self.hidden, self.hidden, self.hidden, 1)
        self._theta = np.zeros(sum(sizes))
        self._grad = np.zeros_like(self._theta)
        self.w1, self.b1, self.w2, self.b2 = self._views(self._theta, n_in)
        self._g = self._views(self._grad, n_in)
        rng = np.random.default_rng(seed)
        self.w1[:] = rng.normal(0.0, 1.0 / math.sqrt(n_in), (n_in, self.hidden))
        self._m = np.zeros_like(self._theta)
        self._v = np.zeros_like(self._theta)
        self._t = 0

    def _views(self, flat: np.ndarray, n_in: int):
        h = self.hidden
        a, b, c = n_in * h, n_in * h + h, n_in * h + 2 * h
        return flat[:a].reshape(n_in, h), flat[a:b], flat[b:c], flat[c:]

    # ------------------------------------------------------------------
    def observe(self, speed, cpu=0.0, mem=0.0):
        if not self._valid(speed):
            return
        row = np.array([float(speed), _clean_util(cpu), _clean_util(mem)])
        if self._len == len(self._buf):
            self._buf[:-1] = self._buf[1:]
            self._buf[-1] = row
        else:
            self._buf[self._len] = row
            self._len += 1
        self._stats.add(row)
        if self._len >= self.min_history:
            self._train()

    def predict(self):
        if self._len == 0:
            return math.nan
        h = self._buf[:self._len]
        last = float(h[-1, 0])
        if self._len < self.min_history:
            return last
        x = self._features(h[-self.delay:][None])[0]
        out = np.tanh(x @ self.w1 + self.b1) @ self.w2 + self.b2[0]
        pred = last + float(self._stats.std[0]) * float(out)
        # A speed is positive; a wild extrapolation must not zero a batch.
        return max(pred, 1e-3 * last)

    # ------------------------------------------------------------------
    def _features(self, lagged: np.ndarray) -> np.ndarray:
        """(n, d, 3) raw rows, oldest first -> (n, 3d) normalised inputs."""
        z = (lagged - self._stats.mean) / self._stats.std
        return z.reshape(len(z), -1)

    def _train(self) -> None:
        h = self._buf[:self._len]
        d = self.delay
        n = len(h) - d                          # samples: rows k-d+1..k -> v(k+1)
        idx = np.arange(n)[:, None] + np.arange(d)[None, :]
        x = self._features(h[idx])
        y = (h[d:, 0] - h[d - 1:-1, 0]) / self._stats.std[0]
        beta1, beta2 = 0.9, 0.999
        g_w1, g_b1, g_w2, g_b2 = self._g
        for _ in range(self.steps):
            a = np.tanh(x @ self.w1 + self.b1)
            g_out = (a @ self.w2 + self.b2 - y) / n   # gradient of the mean 0.5 * squared error
            np.dot(a.T, g_out, out=g_w2)
            g_b2[0] = g_out.sum()
            g_a = np.outer(g_out, self.w2)
            g_a *= 1.0 - a * a
            np.dot(x.T, g_a, out=g_w1)
            g_a.sum(axis=0, out=g_b1)
            g = self._grad + self.weight_decay * self._theta
            self._t += 1
            self._m += (1 - beta1) * (g - self._m)
            self._v += (1 - beta2) * (g * g - self._v)
            step = self.lr * math.sqrt(1.0 - beta2 ** self._t) / (1.0 - beta1 ** self._t)
            self._theta -= step * self._m / (np.sqrt(self._v) + 1e-8)

def make_predictor(name: str, seed: int = 0) -> SpeedPredictor:
    """The predictor named by the `predictor` setting."""
    if name == "ewma":
        return EWMA()
    if name == "narx":
        return NARX(seed=seed)
    raise ConfigError("predictor", name, "allowed: " + ", ".join(PREDICTORS))


def utilisation() -> tuple[float, float]:
    """(cpu, mem) utilisation of this machine in [0, 1], without blocking.

    Machine-wide rather than per process: what slows a worker on shared
    hardware is the load of others. CPU is the average since the previous call
    (psutil's `cpu_percent(interval=None)`), so the very first call in a
    process reads 0.0.
    """
    import psutil

    cpu = psutil.cpu_percent(interval=None) / 100.0
    mem = psutil.virtual_memory().percent / 100.0
    return _clean_util(cpu), _clean_util(mem)
