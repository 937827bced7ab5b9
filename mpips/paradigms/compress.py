"""Gradient compressors on the push path, usable by any paradigm.

A compressor turns one flat float32 gradient into what is actually sent:
a dense array (`Identity`) or a `SparseGrad` (`TopK`, `GDTopK`). Sparse
compressors keep error feedback inside the object: what they do not send stays
in a residual that is added to the next gradient, and `flush()` hands the whole
residual over once (GSSP sends it at every epoch end), so no gradient mass is
ever lost.

A sparse push of k entries costs 8k bytes (int32 indices, float32 values)
instead of 4n (`payload_nbytes`).

GDTopK's ratio schedule by a group's speed rank (`GDTopKSchedule`,
`ratio_schedule`, `speed_ranks`) lives here as well, see docs/paradigms.md, GSSP.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..validate import ConfigError

COMPRESSORS = ("none", "topk", "gdtopk")   # make_compressor's names


# ---------------------------------------------------------------------------
# payloads
# ---------------------------------------------------------------------------
class SparseGrad:
    """Entries `values` at `indices` of a length-`n` vector (all others zero)."""

    __slots__ = ("indices", "values", "n")

    def __init__(self, indices, values, n: int):
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.values = np.ascontiguousarray(values, dtype=np.float32)
        self.n = int(n)
        if self.indices.shape != self.values.shape or self.indices.ndim != 1:
            raise ValueError("indices and values must be 1-D and of equal length")

    def __len__(self) -> int:
        return int(self.indices.size)

    def __repr__(self) -> str:
        return f"SparseGrad(n={self.n}, count={len(self)})"

    @property
    def count(self) -> int:
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Bytes of payload actually sent: indices plus values."""
        return int(self.indices.nbytes + self.values.nbytes)

    def to_dense(self, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.zeros(self.n, dtype=np.float32)
        else:
            out[...] = 0
        out[self.indices] = self.values
        return out

    def add_to(self, out: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """`out += scale * self` in place (indices are unique)."""
        if scale == 1.0:
            out[self.indices] += self.values
        else:
            out[self.indices] += np.float32(scale) * self.values
        return out

def payload_nbytes(payload: "SparseGrad | np.ndarray") -> int:
    """Bytes a payload costs on the wire, header excluded."""
    if isinstance(payload, SparseGrad):
        return payload.nbytes
    return int(np.asarray(payload).size) * 4


def dense_of(payload: "SparseGrad | np.ndarray") -> np.ndarray:
    return payload.to_dense() if isinstance(payload, SparseGrad) else payload


# ---------------------------------------------------------------------------
# compressors
# ---------------------------------------------------------------------------
Segments = Sequence[tuple[int, int]]


class Compressor:
    """Base class: dense, lossless. Subclasses override `_select`.

    `compress` never modifies its input. `last_nbytes` is the payload size of
    the last result (`payload_nbytes(out)`).
    """

    name = "none"
    sparse = False

    def __init__(self, *, segments: Segments | None = None):
        self.segments: list[tuple[int, int]] | None = (None if segments is None
                                                       else [(int(a), int(b)) for a, b in segments])
        self._residual: np.ndarray | None = None
        self.n: int | None = None
        self.last_nbytes = 0
        self.last_k = 0          # entries meant to be sent (sum over segments)
        self.last_selected = 0   # entries over the threshold, before truncation
        self.last_nonfinite = False

    # -- interface -------------------------------------------------------
    def compress(self, grad) -> "SparseGrad | np.ndarray":
        g = self._flat(grad)
        out = g.copy()
        self.last_k = self.last_selected = g.size
        self.last_nonfinite = not bool(np.isfinite(g).all())
        self.last_nbytes = payload_nbytes(out)
        return out

    def flush(self) -> np.ndarray:
        """The whole residual (dense), which is then zero. Sent once per epoch end."""
        if self._residual is None:
            return np.zeros(self.n or 0, dtype=np.float32)
        out = self._residual.copy()
        self._residual[...] = 0
        return out

    @property
    def residual(self) -> np.ndarray:
        """A copy of what has not been sent yet."""
        if self._residual is None:
            return np.zeros(self.n or 0, dtype=np.float32)
        return self._residual.copy()

    def set_ratio(self, ratio: float, rho: float | None = None) -> None:
        """Change the upload ratio (GDTopK: and sample fraction); no-op here."""

    def state(self) -> dict:
        """What a checkpoint keeps: the residual not sent yet."""
        return {"residual": None if self._residual is None else self._residual.copy()}

    def load_state(self, state: dict) -> None:
        r = state["residual"]
        self._residual = None if r is None else np.asarray(r, dtype=np.float32).copy()

    # -- helpers ---------------------------------------------------------
    def _flat(self, grad) -> np.ndarray:
        if hasattr(grad, "detach"):  # torch tensor
            grad = grad.detach().cpu().numpy()
        g = np.asarray(grad, dtype=np.float32).reshape(-1)
        if self.n is None:
            self.n = g.size
            self._check_segments(g.size)
        elif g.size != self.n:
            raise ValueError(f"gradient has {g.size} entries, this compressor saw {self.n}")
        return g

    def _check_segments(self, n: int) -> None:
        if self.segments is None:
            self.segments = [(0, n)]
            return
        pos = 0
        for a, b in self.segments:
            if a != pos or b < a:
                raise ValueError(f"segments must tile [0, {n}) in order; got {self.segments}")
            pos = b
        if pos != n:
            raise ValueError(f"segments cover [0, {pos}), the gradient has {n} entries")


class Identity(Compressor):
    """Send everything, dense. No residual: the default, a null object."""

    name = "none"

    def compress(self, grad) -> np.ndarray:
        g = self._flat(grad)   # not copied: a push only reads it
        self.last_k = self.last_selected = g.size
        self.last_nbytes = payload_nbytes(g)
        return g


class _Sparsifier(Compressor):
    """Top-k family: per segment, send some entries; keep the rest as residual."""

    sparse = True

    def __init__(self, ratio: float, *, segments: Segments | None = None):
        super().__init__(segments=segments)
        self.ratio = _check_ratio("ratio", ratio)

    def set_ratio(self, ratio: float, rho: float | None = None) -> None:
        self.ratio = _check_ratio("ratio", ratio)

    def compress(self, grad) -> "SparseGrad | np.ndarray":
        g = self._flat(grad)
        if not np.isfinite(g).all():
            # A NaN/inf gradient is passed through dense, untouched, so the
            # receiver sees and rejects it; the residual must not be poisoned.
            self.last_nonfinite = True
            self.last_k = self.last_selected = g.size
            self.last_nbytes = payload_nbytes(g)
            return g.copy()
        self.last_nonfinite = False
        if self._residual is None:
            self._residual = np.zeros(g.size, dtype=np.float32)
        acc = self._residual
        acc += g                       # acc = gradient + residual, in place
        picks, k_total, sel_total = [], 0, 0
        for a, b in self.segments or ():   # (set by the first gradient's check)
            if b == a:
                continue
            k = min(b - a, math.ceil((b - a) * self.ratio))
            idx, selected = self._select(acc[a:b], k)
            picks.append(idx + a)
            k_total += k
            sel_total += selected
        idx = np.sort(np.concatenate(picks)) if picks else np.zeros(0, np.int64)
        vals = acc[idx].copy()
        acc[idx] = 0                   # what is sent leaves the residual exactly
        self.last_k, self.last_selected = k_total, sel_total
        out = SparseGrad(idx, vals, g.size)
        self.last_nbytes = out.nbytes
        return out

    def _select(self, x: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        raise NotImplementedError


def _top_k(absx: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest entries of `absx` (any order)."""
    n = absx.size
    if k >= n:
        return np.arange(n)
    return np.argpartition(absx, n - k)[n - k:]


class TopK(_Sparsifier):
    """Exact top-k by |g| per segment, k = ceil(n * ratio), with error feedback."""

    name = "topk"

    def _select(self, x, k):
        return _top_k(np.abs(x), k), k


class GDTopK(_Sparsifier):
    """GDTopK (GSSP, IEEE TCC 2022): sampled threshold, then fix-up to ~k.

    Per segment of n entries: k = ceil(n*c); sample ceil(n*rho) entries without
    replacement; theta = the ceil(n_s*c)-th largest |g| of the sample; select
    |g| >= theta. More than 1.3k selected: exact top-k of the selection. Fewer
    than 0.8k: theta *= 0.8 and select again, at most `max_retries` times (then
    what is selected is sent). `last_selected` is the count before truncation.
    """

    name = "gdtopk"
    HIGH = 1.3
    LOW = 0.8

    def __init__(self, ratio: float = 0.35, rho: float = 0.009, *,
                 segments: Segments | None = None, seed=0, max_retries: int = 10):
        super().__init__(ratio, segments=segments)
        self.rho = _check_ratio("rho", rho)
        self.max_retries = int(max_retries)
        self.rng = np.random.default_rng(seed)
        self.last_retries = 0
        self.last_theta = 0.0

    def set_ratio(self, ratio: float, rho: float | None = None) -> None:
        self.ratio = _check_ratio("ratio", ratio)
        if rho is not None:
            self.rho = _check_ratio("rho", rho)

    def state(self) -> dict:
        return {**super().state(), "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.rng.bit_generator.state = state["rng"]

    def _select(self, x, k):
        n = x.size
        absx = np.abs(x)
        n_s = min(n, max(1, math.ceil(n * self.rho)))
        m = min(n_s, max(1, math.ceil(n_s * self.ratio)))
        sample = absx[self.rng.choice(n, n_s, replace=False)]
        theta = float(np.partition(sample, n_s - m)[n_s - m])
        retries = 0
        while True:
            # theta is some |g| of the segment, so at least one entry is selected
            idx = np.flatnonzero(absx >= theta)
            if idx.size >= self.LOW * k or retries >= self.max_retries:
                break
            theta *= 0.8
            retries += 1
        self.last_retries, self.last_theta = retries, theta
        selected = int(idx.size)
        if selected > self.HIGH * k:
            idx = idx[_top_k(absx[idx], k)]
        return idx, selected


def _check_ratio(name: str, v: float) -> float:
    v = float(v)
    if not (0.0 < v <= 1.0):
        raise ConfigError(name, v, "must be in (0, 1]")
    return v


# ---------------------------------------------------------------------------
# GDTopK schedule and group speed
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GDTopKSchedule:
    """Upload ratio c and sample fraction rho per epoch and group speed rank.

    Each tuple is anchored evenly from the fastest group (first entry) to the
    slowest (last); with G groups, group rank r sits at position r/(G-1) and
    takes the piecewise-linear interpolation between anchors (G=1: position
    0.5, the middle). Epoch 1 (1-based): `first_ratio` for all; epochs 2 ..
    floor_epoch-1: max(r0^(epoch-1), floor); from `floor_epoch` on: `floor`
    (the table's rounded r0^4, e.g. 0.015 for 0.35^4 = 0.01500625).
    Defaults are docs/paradigms.md's table.
    """

    r0: tuple[float, ...] = (0.25, 0.3, 0.35)
    rho: tuple[float, ...] = (0.008, 0.009, 0.01)
    floor: tuple[float, ...] = (0.004, 0.0081, 0.015)
    first_ratio: float = 0.35
    floor_epoch: int = 5

    def __post_init__(self):
        for name in ("r0", "rho", "floor"):
            vals = tuple(float(v) for v in getattr(self, name))
            if not vals or any(not (0.0 < v <= 1.0) for v in vals):
                raise ConfigError(f"gdtopk_{name}", vals, "one or more values in (0, 1]")
            object.__setattr__(self, name, vals)
        _check_ratio("gdtopk_first_ratio", self.first_ratio)
        if not isinstance(self.floor_epoch, int) or self.floor_epoch < 2:
            raise ConfigError("gdtopk_floor_epoch", self.floor_epoch, "must be an integer >= 2")

    @staticmethod
    def position(rank: int, groups: int) -> float:
        """0.0 = fastest group, 1.0 = slowest."""
        if groups < 1 or not 0 <= rank < groups:
            raise ValueError(f"rank {rank} not in 0..{groups - 1}")
        return 0.5 if groups == 1 else rank / (groups - 1)

    def ratio(self, epoch: int, position: float) -> float:
        if epoch < 1:
            raise ValueError(f"epochs are numbered from 1, got {epoch}")
        if epoch == 1:
            return self.first_ratio
        floor = _interp(self.floor, position)
        if epoch >= self.floor_epoch:
            return floor
        return max(_interp(self.r0, position) ** (epoch - 1), floor)

    def rho_at(self, position: float) -> float:
        return _interp(self.rho, position)


def _interp(anchors: tuple[float, ...], position: float) -> float:
    if len(anchors) == 1:
        return anchors[0]
    xs = np.linspace(0.0, 1.0, len(anchors))
    return float(np.interp(position, xs, anchors))


DEFAULT_SCHEDULE = GDTopKSchedule()


def ratio_schedule(epoch: int, rank: int, groups: int = 3,
                   schedule: GDTopKSchedule | None = None) -> tuple[float, float]:
    """(c, rho) for the group of speed rank `rank` (0 = fastest) of `groups`."""
    s = schedule or DEFAULT_SCHEDULE
    pos = s.position(rank, groups)
    return s.ratio(epoch, pos), s.rho_at(pos)


def speed_ranks(group_times: Sequence[float] | np.ndarray) -> list[int]:
    """Speed rank of each group (0 = fastest = smallest time; ties by index;
    unknown (nan) times rank slowest)."""
    t = np.asarray(group_times, dtype=float)
    key = np.where(np.isnan(t), np.inf, t)
    order = np.argsort(key, kind="stable")
    ranks = np.empty(len(t), dtype=int)
    ranks[order] = np.arange(len(t))
    return [int(r) for r in ranks]


# ---------------------------------------------------------------------------
def make_compressor(cfg, *, segments: Segments | None = None, seed=None,
                    stream: int = 0, schedule: GDTopKSchedule | None = None,
                    rank: int | None = None, groups: int | None = None) -> Compressor:
    """The compressor named by `cfg.compressor`.

    `stream` (e.g. the worker index) decorrelates GDTopK's sampling between
    ranks; the seed defaults to `cfg.seed`. For gdtopk, (`rank`, `groups`)
    pick the epoch-1 rho of that group's speed rank (default: the middle);
    the runtime calls `set_ratio(*ratio_schedule(...))` at each epoch start.
    """
    name = cfg.compressor
    if name == "none":
        return Identity(segments=segments)
    if name == "topk":
        return TopK(cfg.topk_ratio, segments=segments)
    if name == "gdtopk":
        s = schedule or DEFAULT_SCHEDULE
        pos = 0.5 if rank is None else s.position(rank, groups or 1)
        base = cfg.seed if seed is None else seed
        return GDTopK(s.ratio(1, pos), s.rho_at(pos), segments=segments,
                      seed=np.random.SeedSequence([int(base), int(stream)]))
    raise ConfigError("compressor", name, "allowed: " + ", ".join(COMPRESSORS))
