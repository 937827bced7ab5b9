"""Built-in models, user models by `package.module:function`, and their errors."""
import itertools

import pytest
import torch
from torch import nn

from mpips.config import Config, ConfigError
from mpips.training.data import WorkerShard, load_dataset
from mpips.training.models import BUILTIN_MODELS, build_model
from tests.thresholds import SETUPS

IMAGE_SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
SIGNAL_SHAPES = [(40,), (1, 40), (3,)]
ALLOWED = "allowed: mlp, lenet5, resnet, cnn1d, or package.module:function"
# a shape each model takes
SHAPE = {"mlp": (1, 8, 8), "lenet5": (1, 8, 8), "resnet": (3, 32, 32), "cnn1d": (40,)}


@pytest.mark.parametrize("name, shape", list(itertools.product(["mlp", "lenet5", "resnet"], IMAGE_SHAPES))
                         + [("cnn1d", s) for s in SIGNAL_SHAPES] + [("mlp", s) for s in SIGNAL_SHAPES])
def test_forward_shape(name, shape):
    model = build_model(name, shape, 10)
    assert model(torch.randn(3, *shape)).shape == (3, 10)


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_other_class_counts(name):
    assert build_model(name, SHAPE[name], 3)(torch.randn(2, *SHAPE[name])).shape == (2, 3)


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_parameters_are_the_whole_state(name):
    # The servers hold only the flat parameter vector; buffers would stay behind.
    assert list(build_model(name, SHAPE[name], 10).buffers()) == []


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_caller_seed_decides_the_weights(name):
    def weights(seed):
        torch.manual_seed(seed)
        return nn.utils.parameters_to_vector(build_model(name, SHAPE[name], 10).parameters())

    assert torch.equal(weights(0), weights(0))
    assert not torch.equal(weights(0), weights(1))


def test_mlp_takes_flat_inputs_conv_models_do_not():
    assert build_model("mlp", (64,), 10)(torch.randn(2, 64)).shape == (2, 10)
    for name in ("lenet5", "resnet"):
        with pytest.raises(ConfigError, match=r"needs image inputs \(C, H, W\)"):
            build_model(name, (64,), 10)


def test_cnn1d_is_mnist1ds_published_cnn():
    # ConvBase of the mnist1d repository: conv 1->25 (5, stride 2, padding 1), 25->25 (3, 2, 1)
    # twice, ReLUs, Linear(25 x 5, 10) on signals of 40: 5,210 parameters
    model = build_model("cnn1d", (40,), 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (1, 25, (5,), (2,), (1,)), (25, 25, (3,), (2,), (1,)), (25, 25, (3,), (2,), (1,))]
    assert (model.linear.in_features, model.linear.out_features) == (125, 10)
    assert sum(p.numel() for p in model.parameters()) == 5210
    x = torch.randn(4, 40)   # (L,) and (1, L) are the same signals
    assert torch.equal(model(x), model(x.unsqueeze(1)))


@pytest.mark.parametrize("shape", [(1, 8, 8), (2, 40), (2,), ()])
def test_cnn1d_takes_only_signals(shape):
    with pytest.raises(ConfigError, match=r"needs 1-D signals of shape \(L,\) or \(1, L\)"):
        build_model("cnn1d", shape, 10)


def test_lenet_on_too_small_images():
    assert build_model("lenet5", (1, 4, 4), 10)(torch.randn(1, 1, 4, 4)).shape == (1, 10)
    with pytest.raises(ConfigError, match="3x3 is too small"):
        build_model("lenet5", (1, 3, 3), 10)


@pytest.mark.parametrize("name", ["vgg", "", "MLP", "a:", ":f", "a:b:c"])
def test_unknown_name(name):
    with pytest.raises(ConfigError) as e:
        build_model(name, (1, 8, 8), 10)
    assert str(e.value) == f"invalid model={name!r}: {ALLOWED}"
    assert e.value.field == "model"


# --- user models ------------------------------------------------------------

USER_MODULE = """
from torch import nn

def tiny(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0] * input_shape[1] * input_shape[2], num_classes))

def not_a_model(input_shape, num_classes):
    return "a string"

NOT_CALLABLE = 3
"""


@pytest.fixture
def user_module(user_package):
    return user_package("models", USER_MODULE)


def test_user_model(user_module):
    model = build_model(f"{user_module}:tiny", (1, 8, 8), 10)
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


@pytest.mark.parametrize("function, problem", [
    ("missing", "has no function missing"),
    ("NOT_CALLABLE", "has no function NOT_CALLABLE"),
    ("not_a_model", "returned str, not a torch.nn.Module"),
])
def test_user_model_errors(user_module, function, problem):
    with pytest.raises(ConfigError, match=problem) as e:
        build_model(f"{user_module}:{function}", (1, 8, 8), 10)
    assert str(e.value).startswith(f"invalid model='{user_module}:{function}'")
    assert "\n" not in str(e.value)


def test_user_model_module_not_found():
    with pytest.raises(ConfigError, match="cannot import no_such_package_xyz") as e:
        build_model("no_such_package_xyz.models:net", (1, 8, 8), 10)
    assert "\n" not in str(e.value)


# --- training ---------------------------------------------------------------

def mlp_digits_accuracy(seed: int) -> float:
    """The MLP after 4 epochs of plain SGD on digits (tests/thresholds.py: mlp-digits)."""
    data = load_dataset(Config(dataset="digits"))
    torch.manual_seed(seed)
    model = build_model("mlp", data.input_shape, data.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shard = WorkerShard(data.x_train, data.y_train, worker=0, num_workers=1, seed=seed)
    while shard.epoch < 4:
        x, y = shard.next_batch(16)  # the default batch size
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        return (model(data.x_test).argmax(1) == data.y_test).float().mean().item()


def test_mlp_learns_digits():
    assert mlp_digits_accuracy(0) >= SETUPS["mlp-digits"].threshold
