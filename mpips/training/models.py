"""The built-in models, and loading a user's model by `package.module:function`.

Weights are initialized from torch's global generator; the caller seeds it
(torch.manual_seed) before `build_model`, so every rank builds the same model.
"""
from __future__ import annotations

import torch
from torch import nn

from ..validate import ConfigError, user_code, user_function
from .data import dataset_label

BUILTIN_MODELS = ("mlp", "lenet5", "resnet", "cnn1d")
ALLOWED = "allowed: mlp, lenet5, resnet, cnn1d, or package.module:function"


def build_model(name, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A fresh model for inputs of `input_shape` (without the batch dimension).
    `name` may also be a user's object (mpips.train(model=...)): an nn.Module,
    used as it is, or a factory called as factory() or factory(input_shape,
    num_classes)."""
    input_shape = tuple(int(d) for d in input_shape)
    if not isinstance(name, str):
        return _object_model(name, input_shape, num_classes)
    if name == "mlp":
        return MLP(input_shape, num_classes)
    if name == "cnn1d":
        return CNN1D(input_shape, num_classes)
    if name in ("lenet5", "resnet"):
        if len(input_shape) != 3:
            raise ConfigError("model", name, f"needs image inputs (C, H, W), got shape {input_shape}")
        if name == "lenet5":
            return LeNet5(input_shape, num_classes)
        return CifarResNet(input_shape[0], num_classes)
    if ":" in name:
        return _user_model(name, input_shape, num_classes)
    raise ConfigError("model", name, ALLOWED)


class MLP(nn.Sequential):
    """Two hidden layers: small enough for a parameter-server demo on two cores."""

    def __init__(self, input_shape, num_classes, hidden=(128, 64)):
        features = 1
        for d in input_shape:
            features *= d
        layers: list[nn.Module] = [nn.Flatten()]
        for width in hidden:
            layers += [nn.Linear(features, width), nn.ReLU()]
            features = width
        layers.append(nn.Linear(features, num_classes))
        super().__init__(*layers)


class LeNet5(nn.Module):
    """LeNet-5 (conv 6, pool, conv 16, pool, fc 120, 84) for any image size >= 4x4.

    The first convolution is padded so 28x28 MNIST gives the classic 5x5x16
    map; on small maps (8x8 digits) the second one is padded as well so
    something is left after the pooling.
    """

    def __init__(self, input_shape, num_classes):
        super().__init__()
        channels, height, width = input_shape
        if min(height, width) < 4:  # the two 2x2 poolings would leave nothing
            raise ConfigError("model", "lenet5", f"input {height}x{width} is too small (at least 4x4)")
        small = min(height, width) // 2 < 10  # an unpadded 5x5 conv would leave < 6x6
        self.features = nn.Sequential(
            nn.Conv2d(channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, padding=2 if small else 0), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        with torch.no_grad():  # a dry run finds the flattened size; it draws no random numbers
            flat = self.features(torch.zeros(1, *input_shape)).shape[1]
        self.classifier = nn.Sequential(
            nn.Linear(flat, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class CNN1D(nn.Module):
    """The CNN of MNIST-1D (Greydanus 2020; ConvBase of the mnist1d repository's
    notebooks/models.py): three 1-D convolutions of 25 channels (kernel 5,
    then 3 and 3, stride 2, padding 1), each with a ReLU, and a linear layer
    over the flattened maps. Signals (L,) or (1, L); on MNIST-1D's L = 40 the
    maps are 19, 10 and 5 long, 5,210 parameters in all."""

    def __init__(self, input_shape, num_classes, channels=25):
        super().__init__()
        if len(input_shape) not in (1, 2) or input_shape[:-1] not in ((), (1,)) or input_shape[-1] < 3:
            raise ConfigError("model", "cnn1d", f"needs 1-D signals of shape (L,) or (1, L) with L >= 3, "
                                                f"got shape {input_shape}")
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():  # as LeNet5: a dry run finds the flattened size
            flat = self.features(torch.zeros(1, 1, input_shape[-1])).shape[1]
        self.linear = nn.Linear(flat, num_classes)

    def forward(self, x):
        return self.linear(self.features(x.reshape(len(x), 1, -1)))


def _norm(channels: int) -> nn.Module:
    # GroupNorm, not BatchNorm: it has no running statistics, so the flat
    # parameter vector on the servers is the whole model state, and a model
    # pulled by the evaluator needs no buffers from any worker.
    return nn.GroupNorm(8, channels)


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False), _norm(out_channels), nn.ReLU(),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False), _norm(out_channels),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), _norm(out_channels))

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


class CifarResNet(nn.Module):
    """The CIFAR ResNet family of He et al. (depth 6n+2): three stages of 16, 32
    and 64 channels. The default n=1 (ResNet-8) keeps iterations short on CPUs;
    global average pooling lets it take any image size (8x8 digits included).
    """

    def __init__(self, in_channels, num_classes, blocks_per_stage=1):
        super().__init__()
        layers = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), _norm(16), nn.ReLU()]
        channels = 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks_per_stage):
                layers.append(BasicBlock(channels, width, stride if i == 0 else 1))
                channels = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def _user_model(name, input_shape, num_classes) -> nn.Module:
    function = user_function("model", name, ALLOWED)
    function_name = name.partition(":")[2]
    with user_code("model", name, f"{function_name}(input_shape, num_classes)"):
        model = function(input_shape, num_classes)
    if not isinstance(model, nn.Module):
        raise ConfigError("model", name, f"{function_name}(input_shape, num_classes) returned "
                          f"{type(model).__name__}, not a torch.nn.Module")
    return model


def model_label(model) -> str:
    """How the configuration's `model` or a user's object is named in messages."""
    if isinstance(model, str):
        return model
    kind = type(model) if isinstance(model, nn.Module) else model
    name = getattr(kind, "__qualname__", None) or type(model).__name__
    return name if name.startswith("<") else f"<{name}>"


def _object_model(obj, input_shape, num_classes) -> nn.Module:
    if isinstance(obj, nn.Module):
        return obj
    label = model_label(obj)
    if not callable(obj):
        raise ConfigError("model", label, "a model must be an nn.Module or a function that returns one")
    import inspect

    try:
        takes = len(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        takes = 2
    with user_code("model", label, "the factory"):
        model = obj() if takes == 0 else obj(input_shape, num_classes)
    if not isinstance(model, nn.Module):
        raise ConfigError("model", label, f"the factory returned {type(model).__name__}, "
                          f"not a torch.nn.Module")
    return model


def check_model(model: nn.Module, name: str, x: torch.Tensor, num_classes: int) -> None:
    """Before training: the model has something to train and maps a batch
    of `x` to one score per class (a user's model may do neither). The dry
    run is in eval mode without gradients, so it draws no random numbers
    (dropout) and changes no statistics: every rank stays in step."""
    if not any(p.requires_grad and p.numel() for p in model.parameters()):
        raise ConfigError("model", name, "has no trainable parameters (nothing to train)")
    was_training = model.training
    model.eval()
    # integer features (a user's dataset) are what a model that takes floats fails on
    kind = "" if x.is_floating_point() else f" of {str(x.dtype).removeprefix('torch.')} features"
    try:
        with user_code("model", name, "", f"fails on a batch{kind} of shape {tuple(x.shape)}: {{error}}"):
            with torch.no_grad():
                out = model(x)
    finally:
        model.train(was_training)
    shape = tuple(getattr(out, "shape", ()))
    if len(shape) != 2 or shape[0] != len(x) or shape[1] < num_classes:
        raise ConfigError("model", name, f"maps a batch of shape {tuple(x.shape)} to {shape or type(out).__name__}; "
                          f"needs (batch, {num_classes}): one score per class of the dataset")


def workload(config, data, model=None, built=None) -> dict:
    """What the run trains, by name: the configuration's model and dataset,
    or a user's, named by what they are: an object of mpips.train's `model`
    by its name and the module it built; `data` (data.Dataset), when not a
    built-in one, by its name (`package.module:function`, or `user` for
    mpips.train's `dataset`), sizes and shapes (run.h5's layout; RunLog.model,
    RunLog.dataset)."""
    name = config.model
    if model is not None:
        name = model_label(model)
        if built is not None and type(built).__name__ not in name:
            name += f" ({type(built).__name__})"
    builtin = data.name == config.dataset and ":" not in config.dataset
    return {"model": name, "dataset": config.dataset if builtin else dataset_label(data)}
