"""What the simulator benchmarks share (simulator.py, scale.py): a shared
cluster's speed mix.

The mix:

Most workers run at full speed; some are persistently slower (older
hardware, co-located jobs): 70% at 1x, 15% at 1.5x, 10% at 2x, 5% at 3x,
placed by a seeded permutation so slow workers are not all at the end.
On top, transient stragglers (`--random-stragglers rate:mean_iters:factor`):
each iteration starts a straggle with probability 1%, lasting 10 iterations
on average (geometric), 4x slower.
"""
from __future__ import annotations

import numpy as np

SHARES = ((1.0, 0.70), (1.5, 0.15), (2.0, 0.10), (3.0, 0.05))
RANDOM_STRAGGLERS = "0.01:10:4"
DESCRIPTION = ("persistent slowdowns 70% 1x, 15% 1.5x, 10% 2x, 5% 3x (seeded permutation), "
               f"plus transient stragglers --random-stragglers {RANDOM_STRAGGLERS} "
               "(1% of iterations start a 4x straggle of mean 10 iterations)")


def slowdowns(workers: int, seed: int = 0) -> list[float]:
    """One factor per worker, the shares of SHARES rounded (the rest at 1x)."""
    factors = []
    for factor, share in SHARES[1:]:
        factors += [factor] * int(round(share * workers))
    factors = [1.0] * (workers - len(factors)) + factors
    order = np.random.default_rng([seed, workers, 0xC1A5]).permutation(workers)
    return [factors[k] for k in order]


def options(workers: int, seed: int = 0) -> dict:
    """The Config overrides of this mix for `workers` workers."""
    return {"slowdown": ",".join(f"{f:g}" for f in slowdowns(workers, seed)),
            "random_stragglers": RANDOM_STRAGGLERS}


def linear(input_shape, num_classes):
    """`--model sim_common:linear`: one linear layer (digits: 650 parameters,
    2.5 KiB), for the simulator's cost with next to no model
    (benchmarks/simulator.py --models)."""
    import torch
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(input_shape)), num_classes))
