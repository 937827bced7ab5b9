"""Write a CIFAR-10-format dataset with learnable structure, so that the real
CIFAR reader (`--dataset cifar10 --data-dir DIR`) loads it where the real
CIFAR-10 cannot be downloaded (a machine with no internet).

    python benchmarks/make_cifar10.py DIR [--train 50000] [--test 10000] [--seed 0]

DIR/cifar-10-batches-py/ gets data_batch_1..5, test_batch and batches.meta
as the CIFAR-10 python version ships them: pickled dicts with b'data' (uint8,
N x 3072, rows of 1024 red, 1024 green, 1024 blue values) and b'labels'.

Each class is a smooth random colour pattern (a 4x4x3 field upsampled to
32x32); an image is its class's pattern, shifted by up to 4 pixels and
scaled in contrast, under a smooth random pattern of no class and pixel
noise, so a convolutional network learns it over a few epochs while a
linear model does not. The same seed writes the same bytes.
"""
from __future__ import annotations

import argparse
import os
import pickle

import numpy as np

CLASSES = 10
SIZE = 32
PATTERN_CELLS = 8   # a class pattern: this many random values across, upsampled to 32
CLASS_LEVEL = 50    # pixel values: class pattern, nuisance pattern and noise amplitudes
NUISANCE_LEVEL = 40
NOISE_LEVEL = 30
CHUNK = 5000


def smooth_fields(rng: np.random.Generator, n: int, cells: int) -> np.ndarray:
    """n random colour fields (n, 3, 32, 32) of unit scale: cells x cells
    random values, bilinearly upsampled."""
    coarse = rng.standard_normal((n, 3, cells, cells)).astype(np.float32)
    grid = np.linspace(0, cells - 1, SIZE, dtype=np.float32)
    lo = np.minimum(grid.astype(int), cells - 2)
    frac = grid - lo
    up = np.zeros((SIZE, cells), np.float32)   # a separable interpolation matrix
    up[np.arange(SIZE), lo] = 1 - frac
    up[np.arange(SIZE), lo + 1] = frac
    return np.einsum("yi,ncij,xj->ncyx", up, coarse, up)


def images(rng: np.random.Generator, patterns: np.ndarray, labels: np.ndarray) -> np.ndarray:
    n = len(labels)
    dx, dy = rng.integers(0, SIZE, size=(2, n))
    shifted = np.stack([np.roll(patterns[c], (y, x), axis=(1, 2)) for c, x, y in zip(labels, dx, dy)])
    contrast = rng.uniform(0.5, 1.5, size=(n, 1, 1, 1)).astype(np.float32)
    x = (128 + CLASS_LEVEL * contrast * shifted + NUISANCE_LEVEL * smooth_fields(rng, n, 4)
         + NOISE_LEVEL * rng.standard_normal(shifted.shape, dtype=np.float32))
    return np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(n, 3 * SIZE * SIZE)


def write(folder: str, train: int, test: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    patterns = smooth_fields(rng, CLASSES, PATTERN_CELLS)
    out = os.path.join(folder, "cifar-10-batches-py")
    os.makedirs(out, exist_ok=True)
    per_batch = -(-train // 5)
    names = [(f"data_batch_{i + 1}", min(per_batch, train - i * per_batch)) for i in range(5)]
    for name, n in names + [("test_batch", test)]:
        labels = rng.integers(0, CLASSES, size=n)
        data = np.concatenate([images(rng, patterns, labels[lo:lo + CHUNK]) for lo in range(0, n, CHUNK)])
        with open(os.path.join(out, name), "wb") as fh:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels.tolist(), b"data": data}, fh,
                        protocol=2)
    with open(os.path.join(out, "batches.meta"), "wb") as fh:
        pickle.dump({b"label_names": [f"class{c}".encode() for c in range(CLASSES)],
                     b"num_cases_per_batch": per_batch, b"num_vis": 3 * SIZE * SIZE}, fh, protocol=2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--train", type=int, default=50000)
    p.add_argument("--test", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print(write(args.folder, args.train, args.test, args.seed))


if __name__ == "__main__":
    main()
