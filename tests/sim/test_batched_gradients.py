"""`mpips simulate --sim-gradients batched`: the workers computing at once get
their gradients from one vmap call (mpips/training/batched.py). The schedule
is the per-worker path's (the same iterations table but for the loss, which
is computed, not timed), and the floats differ by rounding only."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mpips.cli import main
from mpips.io.log import RunLog
from mpips.training.batched import _patches_conv, batched_gradients
from mpips.training.flatmodel import FlatModel

# After 8 workers x 6 rounds of LeNet-5 on digits, the largest differences
# measured: final parameters 7e-9 (bsp) to 3e-8 (localsgd), of parameters up
# to 0.25; losses 5e-7. The tolerances leave 100x for other CPUs' kernels.
PARAMS_ATOL = 3e-6
LOSS_ATOL = 5e-5


def simulate(run_dir, *flags: str) -> RunLog:
    assert main(["simulate", "--run-dir", str(run_dir), "--eval-every", "100", "--workers", "8",
                 "--model", "lenet5", "--slowdown", "1,1,1,1,2,2,4,4", "--random-stragglers", "0.05:3:3",
                 *flags]) == 0
    return RunLog(str(run_dir))


@pytest.mark.parametrize("paradigm", [["bsp"], ["asp"], ["ssp"], ["gssp", "--groups", "2"], ["localsgd"]])
def test_batched_gradients_keep_the_schedule_and_the_floats_within_rounding(tmp_path, paradigm):
    flags = ("--paradigm", *paradigm, "--iterations", "6")
    exact = simulate(tmp_path / "exact", *flags, "--sim-gradients", "exact")
    batched = simulate(tmp_path / "batched", *flags, "--sim-gradients", "batched")
    a, b = exact.iterations, batched.iterations
    assert len(a) == len(b)
    for column in a.dtype.names:
        if column != "loss":   # (bit for bit: every other column is a count or a virtual time)
            assert a[column].tobytes() == b[column].tobytes(), column
    assert np.allclose(a["loss"], b["loss"], rtol=0, atol=LOSS_ATOL)
    for column in ("server", "time", "pushes", "step"):
        assert exact.applies[column].tobytes() == batched.applies[column].tobytes(), column
    assert np.allclose(exact.final_params(), batched.final_params(), rtol=0, atol=PARAMS_ATOL)
    # batched is not the exact path under another name: its floats differ
    assert not np.array_equal(exact.final_params(), batched.final_params())


@pytest.mark.parametrize("conv,shape,options", [
    (nn.Conv1d, (3, 40), dict(kernel_size=5, stride=2, padding=1)),
    (nn.Conv1d, (2, 17), dict(kernel_size=3, dilation=2, bias=False)),
    (nn.Conv2d, (1, 8, 8), dict(kernel_size=5, padding=2)),
    (nn.Conv2d, (3, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
])
def test_a_convolution_as_a_product_of_patches_is_the_convolution(conv, shape, options):
    torch.manual_seed(0)
    layer = conv(shape[0], 4, **options)
    x = torch.randn(5, *shape)
    assert torch.allclose(_patches_conv(layer, x), layer(x), atol=1e-5)


def test_a_model_vmap_cannot_batch_is_computed_one_worker_at_a_time(capsys):
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.Linear(16, 10))
    flat = FlatModel(model)
    assert batched_gradients(model, F.cross_entropy, flat, torch.randn(4, 8, 8), torch.zeros(4, dtype=torch.long)) \
        is None
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot be batched" in err and "buffers" in err
