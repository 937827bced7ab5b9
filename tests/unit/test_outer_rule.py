"""Local SGD's outer rule (training/optim.Outer): DiLoCo's Nesterov step,
and Delayed Nesterov's buffer applied every N updates; the workers' inner
optimizer's state in a checkpoint."""
import numpy as np
import pytest
import torch

from mpips.config import Config
from mpips.io.checkpoint import decode, encode
from mpips.training.optim import Outer, inner_optimizer

LR, M = 0.7, 0.9


def pseudo_gradients(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(5).astype(np.float32) for _ in range(n)]


def test_outer_step_is_torch_sgd_with_nesterov():
    grads = pseudo_gradients(6)
    shard = np.ones(5, dtype=np.float32)
    rule = Outer(shard, LR, momentum=M)
    p = torch.nn.Parameter(torch.ones(5))
    opt = torch.optim.SGD([p], lr=LR, momentum=M, nesterov=True)
    for g in grads:
        rule.step(g, rule.schedule(0.0))
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    np.testing.assert_allclose(shard, p.detach().numpy(), rtol=0, atol=1e-6)


def test_delayed_nesterov_applies_the_buffer_every_n_updates():
    """N = 3: updates 1, 2, 4, 5 plain SGD; 3 and 6 add the momentum of the
    buffer, which takes the mean of the last three pseudo-gradients."""
    grads = pseudo_gradients(6)
    shard = np.zeros(5, dtype=np.float32)
    rule = Outer(shard, LR, momentum=M, delay=3)
    w, buf = np.zeros(5), None
    for t, g in enumerate(grads, 1):
        rule.step(g, LR)
        step = g.astype(np.float64)
        if t % 3 == 0:
            mean = np.mean(grads[t - 3:t], axis=0)
            buf = mean if buf is None else M * buf + mean
            step = step + M * buf
        w -= LR * step
        np.testing.assert_allclose(shard, w, rtol=0, atol=1e-5, err_msg=f"update {t}")


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_inner_optimizer_state_survives_a_checkpoint(optimizer):
    """A Local SGD worker's optimizer state (momentum, AdamW's moments) as
    a checkpoint encodes it: restored into a fresh one, the next steps are
    the same as without the cut."""
    config = Config(paradigm="localsgd", optimizer=optimizer, lr=0.1, weight_decay=0.01)
    grads = pseudo_gradients(5)
    params, grad = np.ones(5, dtype=np.float32), np.zeros(5, dtype=np.float32)
    inner = inner_optimizer(config, params, grad)
    for g in grads[:3]:
        grad[:] = g
        inner.step()
    resumed_params, resumed_grad = params.copy(), np.zeros(5, dtype=np.float32)
    resumed = inner_optimizer(config, resumed_params, resumed_grad)
    resumed.load_state_dict(decode(*encode(inner.state_dict())))
    for g in grads[3:]:
        grad[:] = resumed_grad[:] = g
        inner.step()
        resumed.step()
    assert np.array_equal(params, resumed_params)
