"""A user's package source (a dataset and a model function by name), shared by
the simulator's and the MPI workload tests."""

USER_MODULE = """
import numpy as np
import torch


def clusters():
    # four clusters in 6 dimensions: 400 training and 100 test samples
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(4, 6)) * 3
    labels = rng.integers(0, 4, size=500)
    x = (centers[labels] + rng.normal(size=(500, 6))).astype(np.float32)
    return x[:400], labels[:400], x[400:], labels[400:]


def linear(input_shape, num_classes):
    return torch.nn.Linear(input_shape[0], num_classes)
"""
