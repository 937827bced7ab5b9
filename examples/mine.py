"""A model and a dataset of one's own, as `mpips train --model examples.mine:model
--dataset examples.mine:data` imports them (the current directory first on the path).

`data()` returns (x_train, y_train, x_test, y_test) as tensors (arrays or two torch
Datasets work too); `model(input_shape, num_classes)` returns an nn.Module. Every rank
calls both, so both must give the same on every rank: seed what is random.
"""
import torch


def data(samples: int = 4000, features: int = 20, classes: int = 5):
    """Gaussian clusters, one per class, 80/20 split (seeded: the same on every rank)."""
    g = torch.Generator().manual_seed(0)
    centres = 2.0 * torch.randn(classes, features, generator=g)
    y = torch.randint(classes, (samples,), generator=g)
    x = centres[y] + torch.randn(samples, features, generator=g)
    cut = samples * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]


def model(input_shape, num_classes):
    """A small MLP on whatever shape the data has."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(torch.tensor(input_shape).prod()), 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, num_classes))
