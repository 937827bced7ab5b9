"""Many workers' gradients in one call: `mpips simulate`'s batched mode.

In the simulator a worker's forward/backward takes no virtual time (its
device time is slept out after it), so its gradient is not needed when its
compute begins, only when that sleep ends; meanwhile every worker that began
computing has asked for its own. `BatchedGradients.submit` queues a request
(the worker's model at the parameters it pulled, its batch); the first
`Pending.result()` computes every queued request of the same batch shape
in calls of up to MAX_BATCH workers (`torch.func.functional_call` + `vmap`
over the stacked parameters and batches), writes each gradient into its
worker's flat buffer and returns the loss. The schedule is the per-worker
path's; the floats differ from it by rounding (a batched product sums in
another order). A model that vmap cannot batch (buffers such as batch
norm's running statistics, random operations, data-dependent control flow)
is found by one trial call and computed one worker at a time.

Convolutions: vmap batches a convolution over per-worker weights as one
convolution of B groups, whose backward on the CPU took longer than B
separate ones (cnn1d, B = 256: 2.9 ms a worker against 2.2 ms as below). The
batched copy of the model computes each `Conv1d`/`Conv2d` (groups 1, zero
padding) as a product of its weight and the input's patches
(`_patches_conv`), which vmap turns into one batched matrix product.
"""
from __future__ import annotations

import copy
import itertools
import math
import sys
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from .flatmodel import FlatModel

# Workers per call: a worker's gradient of cnn1d on MNIST-1D (batch 32) took
# 3.3 ms in calls of 16, 2.0 in calls of 64, 2.2 of 256 and 2.9 of 1,024
# (activations out of the caches; measured on this 2-core VM under load,
# against 7 ms one at a time then: issue #51's note).
MAX_BATCH = 128


class Pending:
    """One worker's gradient, computed on the first `result()` of any request of its shape."""

    __slots__ = ("flat", "x", "y", "loss", "_engine")

    def __init__(self, engine: "BatchedGradients", flat: FlatModel, x: torch.Tensor, y: torch.Tensor):
        self._engine, self.flat, self.x, self.y = engine, flat, x, y
        self.loss: float | None = None

    def result(self) -> float:
        """The loss; the gradient is in the worker's `flat.grads`."""
        if self.loss is None:
            self._engine.compute(self)
        assert self.loss is not None
        return self.loss


class BatchedGradients:
    """The gradients of every worker of one simulation (all copies of `model`)."""

    def __init__(self, model: nn.Module, loss_fn: Callable):
        self.model = _patched(copy.deepcopy(model))
        self.names = [name for name, p in model.named_parameters() if p.requires_grad]
        self.shapes = [p.shape for _, p in model.named_parameters() if p.requires_grad]
        self.loss_fn = loss_fn
        self._queued: dict[tuple, list[Pending]] = {}
        self._call = vmap(grad_and_value(self._loss))

    def _loss(self, params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(functional_call(self.model, params, (x,)), y)

    def submit(self, flat: FlatModel, x: torch.Tensor, y: torch.Tensor) -> Pending:
        """Queue the gradient of (x, y) at `flat`'s parameters, which must not
        change until the result is taken."""
        pending = Pending(self, flat, x, y)
        self._queued.setdefault((x.shape, x.dtype, y.shape, y.dtype), []).append(pending)
        return pending

    def compute(self, first: Pending) -> None:
        """Every queued request of `first`'s shape, MAX_BATCH at a time."""
        queued = self._queued.pop((first.x.shape, first.x.dtype, first.y.shape, first.y.dtype))
        for lo in range(0, len(queued), MAX_BATCH):
            self._batch(queued[lo:lo + MAX_BATCH])

    def _batch(self, group: list[Pending]) -> None:
        b = len(group)
        stacked = torch.stack([p.flat.params for p in group])   # (B, n)
        params, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            k = math.prod(shape)
            params[name] = stacked[:, offset:offset + k].view(b, *shape)
            offset += k
        xs = torch.stack([p.x for p in group])
        ys = torch.stack([p.y for p in group])
        grads, losses = self._call(params, xs, ys)
        flat = torch.cat([grads[name].reshape(b, -1) for name in self.names], 1)
        for p, g, loss in zip(group, flat, losses.tolist()):
            p.flat.grads.copy_(g)
            p.loss = loss

    def works(self, flat: FlatModel, x: torch.Tensor, y: torch.Tensor) -> str:
        """'' if this model and loss batch (one trial call of two requests), else why not."""
        if any(True for _ in self.model.buffers()):
            return "it has buffers (batch norm's running statistics?), which one call would share"
        try:
            trial = [Pending(self, flat, x, y) for _ in range(2)]
            grads = flat.grads.clone()
            self._batch(trial)
            flat.grads.copy_(grads)
        except Exception as e:  # noqa: BLE001 - vmap refuses in many ways (randomness, control flow, ops)
            return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        return ""


def batched_gradients(model: nn.Module, loss_fn: Callable, flat: FlatModel, x: torch.Tensor,
                      y: torch.Tensor) -> BatchedGradients | None:
    """The batched gradients of workers of `model` (a trial on `flat` and the
    batch x, y), or None with a one-line notice where vmap cannot batch it."""
    engine = BatchedGradients(model, loss_fn)
    why = engine.works(flat, x, y)
    if why:
        print(f"mpips: simulate: the model's gradients cannot be batched ({why}): computed one worker "
              f"at a time (--sim-gradients exact)", file=sys.stderr, flush=True)
        return None
    return engine


def _patched(model: nn.Module) -> nn.Module:
    """`model` with every convolution of groups 1 and zero padding computed
    as a product with its input's patches (the module doc)."""
    for m in model.modules():
        if (type(m) in _AS_PRODUCT and m.groups == 1 and m.padding_mode == "zeros"
                and not isinstance(m.padding, str)):
            m.__class__ = _AS_PRODUCT[type(m)]
    return model


class _Conv1dAsProduct(nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _patches_conv(self, x)


class _Conv2dAsProduct(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _patches_conv(self, x)


_AS_PRODUCT: dict[type, type] = {nn.Conv1d: _Conv1dAsProduct, nn.Conv2d: _Conv2dAsProduct}


def _patches_conv(self: nn.Conv1d | nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """F.conv1d/conv2d(x, weight, bias, stride, padding, dilation) as one
    matrix product: each kernel offset's strided slice of the padded input,
    stacked (slices, not `unfold`: vmap has no batching rule for unfold's
    backward and loops over the workers)."""
    w = self.weight
    cout, cin, *kernel = w.shape
    dims = len(kernel)
    padding = [int(p) for p in self.padding]   # (a str padding is never patched: _patched)
    x = F.pad(x, [q for p in reversed(padding) for q in (p, p)])
    size = x.shape[-dims:]
    out = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, kernel, self.stride, self.dilation)]
    slices = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(j * d, j * d + s * (o - 1) + 1, s)
                      for j, d, s, o in zip(offsets, self.dilation, self.stride, out))
        slices.append(x[(Ellipsis,) + index])
    patches = torch.stack(slices, -1)                   # (N, Cin, *out, K)
    patches = patches.movedim(1, -2).flatten(-2)        # (N, *out, Cin*K), channel-major as the weight
    y = patches @ w.reshape(cout, -1).T                 # (N, *out, Cout)
    if self.bias is not None:
        y = y + self.bias
    return y.movedim(-1, 1)
