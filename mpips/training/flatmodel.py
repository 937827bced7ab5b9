"""A model whose parameters and gradients are views into two flat buffers.

Pulls write straight into the parameters and pushes read straight from the
gradients: no per-tensor copies, no torch<->numpy conversion on the hot path.
On a GPU the flat buffers live on the device and one host copy carries them.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from ..validate import ConfigError


class FlatModel:
    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu"):
        device = torch.device(device)
        self.device = device
        self.model = model.to(device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.n = sum(p.numel() for p in params)
        self.params = torch.zeros(self.n, dtype=torch.float32, device=device)
        self.grads = torch.zeros(self.n, dtype=torch.float32, device=device)
        offset = 0
        for p in params:
            k = p.numel()
            self.params[offset:offset + k].copy_(p.data.reshape(-1))
            p.data = self.params[offset:offset + k].view_as(p)
            p.grad = self.grads[offset:offset + k].view_as(p)
            offset += k
        self._params_list = params
        self._grad_views = [p.grad for p in params]
        if device.type == "cpu":
            self.host_params = self.params.numpy()
            self.host_grads = self.grads.numpy()
        else:
            # pinned: copies to and from the GPU go by DMA, without a staging copy
            self.host_params = self.params.cpu().pin_memory().numpy()
            self.host_grads = torch.zeros(self.n, dtype=torch.float32).pin_memory().numpy()

    def params_from_host(self) -> None:
        """After a pull into `host_params`."""
        if self.device.type != "cpu":
            self.params.copy_(torch.from_numpy(self.host_params), non_blocking=False)

    def grads_to_host(self) -> None:
        """Before a push from `host_grads`."""
        if self.device.type != "cpu":
            torch.from_numpy(self.host_grads).copy_(self.grads)

    def synchronize(self) -> None:
        """Wait for the device's queued work (nothing to wait for on the CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def zero_grad(self) -> None:
        self.grads.zero_()

    def check_grad_views(self) -> None:
        """Autograd accumulates into the existing .grad in place; if something
        replaced a .grad tensor, copy it back into the flat buffer. Checked by
        identity first: this runs every iteration."""
        if all(p.grad is g for p, g in zip(self._params_list, self._grad_views)):
            return
        offset = 0
        for i, p in enumerate(self._params_list):
            k = p.numel()
            view = self.grads[offset:offset + k]
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad.reshape(-1))
            p.grad = self._grad_views[i] = view.view_as(p)
            offset += k

    def flat_copy(self) -> np.ndarray:
        return self.params.detach().cpu().numpy().copy()


def gpu_index(wants_gpu: list[bool], local_rank: int, gpus: int) -> int:
    """The GPU of a node's rank `local_rank`: the node's ranks that use one
    (`wants_gpu`, in local rank order) take the `gpus` it sees in turn, one
    each when there are enough, shared round-robin when not."""
    return sum(wants_gpu[:local_rank]) % gpus


def rank_device(config, wants_gpu: bool, users: list[bool], local_rank: int) -> torch.device:
    """A rank's device (under Slurm's per-task GPU binding each rank sees its
    own one); `users`, `local_rank`: as gpu_index takes them."""
    if not wants_gpu or config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", "cuda", "no CUDA device visible to this rank; use cpu or auto")
    return torch.device("cuda", gpu_index(users, local_rank, torch.cuda.device_count()))


def warm_up(flat: FlatModel, data, batch_size: int, loss=None) -> None:
    """One forward/backward on a copy of the model, before the clock starts.
    torch initializes lazily at a process's first backward: on a CUDA build
    of torch, even on the CPU, a worker's first iteration took 110-290 ms, an
    overrun of its emulated device time in every worker of every job
    (benchmarks/results/sim_vs_mpi.md). A copy, under a forked random
    state: the run's parameters, gradients and random numbers stay as they are."""
    model = copy.deepcopy(flat.model)
    cuda = [flat.device.index or 0] if flat.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        x, y = data.x_train[:batch_size].to(flat.device), data.y_train[:batch_size].to(flat.device)
        (loss or torch.nn.CrossEntropyLoss())(model(x), y).backward()
