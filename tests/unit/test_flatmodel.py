"""FlatModel: parameters and gradients are views into two flat buffers."""
import numpy as np
import torch

from mpips.training.flatmodel import FlatModel


def _flat():
    torch.manual_seed(0)
    return FlatModel(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)))


def test_backward_accumulates_into_the_flat_gradient():
    flat = _flat()
    flat.zero_grad()
    flat.model(torch.ones(5, 3)).sum().backward()
    flat.check_grad_views()
    expected = torch.cat([p.grad.reshape(-1) for p in flat.model.parameters()])
    np.testing.assert_array_equal(flat.host_grads, expected.numpy())
    assert np.abs(flat.host_grads).sum() > 0


def test_a_replaced_or_dropped_grad_is_put_back_into_the_flat_buffer():
    flat = _flat()
    first, second = list(flat.model.parameters())[:2]
    first.grad = torch.full_like(first, 7.0)     # replaced: its values are copied back
    second.grad = None                          # dropped: zero
    flat.check_grad_views()
    n = first.numel()
    assert (flat.host_grads[:n] == 7.0).all() and (flat.host_grads[n:n + second.numel()] == 0).all()
    assert first.grad.data_ptr() == flat.grads.data_ptr()
    flat.zero_grad()                            # and the views hold from then on
    flat.model(torch.ones(5, 3)).sum().backward()
    flat.check_grad_views()
    assert np.abs(flat.host_grads[:n]).sum() > 0 and (first.grad.numpy() == flat.host_grads[:n].reshape(first.shape)).all()


def test_pulled_parameters_are_the_model_parameters():
    flat = _flat()
    flat.host_params[:] = np.arange(flat.n, dtype=np.float32)
    flat.params_from_host()
    assert float(next(flat.model.parameters()).detach().reshape(-1)[1]) == 1.0


def test_the_warm_up_leaves_the_model_and_the_random_state_as_they_were():
    """A worker's warm-up forward/backward (before the clock starts) runs on
    a copy: parameters, gradients, BatchNorm's statistics and the random
    numbers that dropout draws next are those of a run without it."""
    from types import SimpleNamespace

    from mpips.training.flatmodel import warm_up
    torch.manual_seed(0)
    flat = FlatModel(torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8),
                                         torch.nn.Dropout(0.5), torch.nn.Linear(8, 2)))
    flat.host_grads[:] = np.arange(flat.n)
    data = SimpleNamespace(x_train=torch.randn(32, 3), y_train=torch.randint(0, 2, (32,)))
    before = [t.clone() for t in (flat.params, flat.grads, *flat.model.buffers())]
    rng = torch.get_rng_state()
    warm_up(flat, data, 16)
    after = [flat.params, flat.grads, *flat.model.buffers()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert torch.equal(torch.get_rng_state(), rng)
