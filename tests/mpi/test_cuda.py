"""Workers on a GPU (`--device cuda`): skipped where torch sees no CUDA device
(CI has none); run on a GPU machine with `pytest tests/mpi/test_cuda.py`.

The same job on the GPU and on the CPU computes the same training: BSP with
one worker is plain SGD, the server applies on the CPU either way, and only
the forward/backward moves; so the two runs' parameters agree to float
rounding (cuDNN and MKL sum in other orders), and the GPU run logs its
copies to and from the device.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import train

from mpips.config import Config
from mpips.runtime.layout import ranks_for

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

FLAGS = ["--paradigm", "bsp", "--model", "lenet5", "--epochs", "1", "--iterations", "40", "--seed", "3"]


def test_bsp_on_the_gpu_trains_as_on_the_cpu(tmp_path):
    gpu = train(3, tmp_path / "gpu", *FLAGS, "--device", "cuda", "--evaluator").log
    cpu = train(3, tmp_path / "cpu", *FLAGS, "--device", "cpu", "--evaluator").log
    assert gpu.summary()["status"] == "finished" and gpu.completeness()["complete"]
    np.testing.assert_allclose(gpu.final_params(), cpu.final_params(), rtol=1e-3, atol=1e-4)
    it = gpu.iterations
    assert (it["h2d"] > 0).all() and (it["d2h"] > 0).all()
    assert (it["h2d"] + it["d2h"] < it["compute"]).all()
    assert (cpu.iterations["h2d"] == 0).all()
    assert abs(gpu.evaluations["accuracy"][-1] - cpu.evaluations["accuracy"][-1]) <= 0.02


@pytest.mark.parametrize("paradigm", ["gssp", "lbbsp", "localsgd", "backup"])
def test_every_role_runs_beside_gpu_workers(tmp_path, paradigm):
    """Group servers and the evaluator with workers on the GPU: no role trips
    over a device it does not expect."""
    ranks = ranks_for(Config(paradigm=paradigm, workers=2, evaluator=True))
    log = train(ranks, tmp_path / paradigm, "--paradigm", paradigm, "--model", "lenet5", "--epochs", "1",
                "--device", "cuda", "--evaluator").log
    s = log.summary()
    assert s["status"] == "finished" and s["complete"] and s["rejected_pushes"] == 0
