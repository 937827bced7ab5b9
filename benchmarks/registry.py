"""Every benchmark of mpips as data: its name (its results file is
results/<name>.json), its script, what it measures, and its goals, each a
number found in the results and the bound it must meet. `bench.py` runs
them and says, for each, whether its results meet its goals.

A goal's `path` walks the results' JSON: each step a key (an fnmatch
pattern: `*` is every key), `*` over a list's items, or `key=value` keeping
the items (of a list, or found so far) whose `key` is `value`; `per`, a
second path, divides what the first found, item by item (a rate over the
plain loop's); `reduce` makes one number of it (min, max, all: every one
true) and `op` compares it with `bound`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Goal:
    says: str                    # the goal in words
    path: tuple[str, ...]        # where its numbers are in results/<name>.json
    op: str                      # ">=", "<=" or "=="
    bound: float | bool
    reduce: str = "min"          # min, max or all
    per: tuple[str, ...] = ()    # a path whose numbers divide the path's, item by item


@dataclass(frozen=True)
class Benchmark:
    name: str                    # results/<name>.json and .md
    script: str                  # under benchmarks/
    measures: str
    goals: tuple[Goal, ...] = ()          # none: a study, its results read by a person
    in_make_bench: bool = False           # `make bench` runs it (else: by hand, see README)
    args: tuple[str, ...] = field(default=())   # its command-line arguments when `make bench` runs it


BENCHMARKS = (
    Benchmark("data_plane", "data_plane.py",
              "pull and push of a flat 1, 16, 64 MiB model through ParameterWindows beside np.copyto and "
              "raw Win.Get / Win.Put, 1 server + 1, 4, 8 workers",
              (Goal("pull + push >= 0.9 of np.copyto's bandwidth (median, every size and worker count)",
                    ("ratios", "* median", "pull_push_vs_copyto"), ">=", 0.9),),
              in_make_bench=True),
    Benchmark("control_plane", "control_plane.py",
              "one gate decision (ControlWindow.read + view + paradigm.gate), every paradigm, 4 and 8 workers",
              (Goal("a gate decision's median <= 5 us (every paradigm and table)",
                    ("results", "*", "decision", "median_us"), "<=", 5.0, "max"),),
              in_make_bench=True),
    Benchmark("overhead", "overhead.py",
              "1 server + 1 worker BSP against a plain PyTorch loop on the same batches, batch 16 and 256",
              (Goal("iteration time ratio <= 1.05 at batch 16 (median, against the plain loop's)",
                    ("results", "16", "mpips_ratios", "ratio"), "<=", 1.05),
               Goal("framework time (iteration - compute - the server's step) <= 100 us at batch 16 (median)",
                    ("results", "16", "mpips", "framework", "median_us"), "<=", 100.0)),
              in_make_bench=True),
    Benchmark("vs_ddp", "vs_ddp.py",
              "torch DDP (gloo), 4 workers, against mpips BSP and every paradigm, homogeneous and 1,1,2,4",
              (Goal("BSP >= 0.9x DDP's samples/s, homogeneous", ("bsp_vs_ddp_samples_per_s_homogeneous",), ">=", 0.9),
               Goal("the best paradigm >= 1.5x DDP, time to the target, heterogeneous",
                    ("best_vs_ddp_time_to_target_heterogeneous",), ">=", 1.5)),
              in_make_bench=True),
    Benchmark("nodes", "nodes.py",
              "BSP and ASP, 1 server + 4 workers, on one node (shared memory, TCP) and across 2 and 3 nodes of "
              "network namespaces, Open MPI and MPICH, with and without the servers' progress thread",
              (Goal("a job across nodes within 1.5x of the same job on one node over TCP (updates/s, every row)",
                    ("rows", "*", "slowdown_vs_one_node_tcp"), "<=", 1.5, "max"),)),
    Benchmark("links", "links.py",
              "pull + push of a BSP job (1 server + 2 workers) across 3 nodes, the workers' links shaped to 1 and "
              "10 Gbit/s and unshaped, against the link's limit (2 x bytes / rate) and the simulator's prediction "
              "with its per-node network model (--sim-nodes)",
              (Goal("the simulator's pull + push within 10% of the measured (every shaped link)",
                    ("rows", "fitted=False", "simulated_error"), "<=", 0.10, "max"),)),
    Benchmark("placement", "placement.py",
              "pull + push of a BSP job (3 servers + 3 workers, 2 ranks on each of 3 nodes) by placement, packed "
              "(two servers on the first node) against spread (one on each), links unshaped and at 1 Gbit/s: "
              "the study behind --placement's default",
              ()),
    Benchmark("runtime_fingerprints", "runtime_fingerprints.py",
              "sha256 of every paradigm's simulated run and an MPI BSP job: a refactoring changed no result",
              ()),
    Benchmark("fidelity", "fidelity.py",
              "the emulated cluster against its model: BSP and ASP, 1+8, homogeneous and 1,1,1,1,2,2,4,4",
              (Goal("samples/s >= 0.9 of the model's", ("runs", "*", "ratio"), ">=", 0.9),
               Goal("no iteration overran its device time", ("runs", "*", "overruns"), "<=", 0, "max"))),
    Benchmark("sim_vs_mpi", "sim_vs_mpi.py",
              "mpips simulate against the MPI job it models, every paradigm, 1+8, 3 seeds",
              (Goal("iterations within 5%, wall over virtual time within 10%, accuracy within 1.5 points",
                    ("summary", "*", "pass_*"), "==", True, "all"),)),
    Benchmark("simulator-scale", "simulator_scale.py",
              "mpips simulate at 256 and 1,024 workers (cnn1d, MNIST-1D, ASP), per-worker and batched gradients, "
              "beside a plain loop",
              (Goal("batched at 1,024 workers >= 2x the plain loop's worker iterations a second",
                    ("results", "workers=1024", "gradients=batched", "rate"), ">=", 2.0,
                    per=("results", "workers=1024", "gradients=batched", "plain_rate")),)),
    Benchmark("hotpath_profile", "hotpath_profile.py",
              "where the hot path's time goes: py-spy's samples of an MPI 1+1 BSP job and of the simulator"),
    Benchmark("simulator", "simulator.py",
              "mpips simulate's own cost: 256 workers x 40 iterations, every paradigm",
              (Goal("each run < 2 minutes", ("results", "*", "plain", "total_wall_s"), "<=", 120.0, "max"),)),
    Benchmark("mnist1d_reference", "studies/mnist1d_reference.py",
              "MNIST-1D's single-process CNN reference (100 epochs, 3 seeds) against the published 94%",
              (Goal("the mean within 1 point of 94%", ("within_tolerance",), "==", True, "all"),)),
    Benchmark("evaluator_cost", "studies/evaluator_cost.py",
              "what evaluating costs training: BSP 1+4, 20 evaluations against 1, on the evaluator rank",
              (Goal("wall time within 5% on the evaluator rank", ("runs", "evaluation=evaluator", "ratio"),
                    "<=", 1.05, "max"),)),
    Benchmark("paradigms", "paradigms.py", "every paradigm on one job, heterogeneous and homogeneous (make compare)"),
    Benchmark("scale", "scale.py", "every paradigm at 16, 64, 256 and 1,024 simulated workers"),
    Benchmark("async-scale", "async_scale.py",
              "the asynchronous paradigms' update rules (async_rule) against BSP at the same sample budget, "
              "in the simulator: final accuracy minus BSP's and time to the target over BSP's"),
    Benchmark("diloco", "diloco.py",
              "DiLoCo's outer optimizer (outer lr x Nesterov momentum) over Local SGD's inner SGD and AdamW against "
              "BSP at the same sample budget, in the simulator, 8 and 32 workers: final accuracy and pushes"),
    Benchmark("plan_validation", "plan_validation.py", "mpips plan's choice against every candidate trained"),
    Benchmark("test_margins", "test_margins.py", "the test suite's accuracy thresholds over seeds and CPU kernels"),
    Benchmark("gpu", "gpu.py", "CUDA workers sharing one GPU against one process and DDP (a lent GPU)"),
    Benchmark("gpu-hotpath", "gpu_hotpath.py",
              "4 BSP workers sharing one GPU against one process, this checkout against one before a change, "
              "MPS and not (a lent GPU)"),
    Benchmark("overhead-h200", "overhead.py",
              "overhead.py with a core per rank (the lent GPU machine's 16 cores), before #51 and after",
              (Goal("framework time (iteration - compute - the server's step) <= 100 us at batch 16 (median)",
                    ("results", "16", "mpips", "framework", "median_us"), "<=", 100.0),)),
    Benchmark("gpu-lbbsp", "gpu_lbbsp.py", "LB-BSP on a GPU: new batch sizes' cost, the split (a lent GPU)"),
    Benchmark("async_defaults", "studies/async_defaults.py",
              "the asynchronous paradigms' momentum rule, compensated against as-set"),
    Benchmark("dssp_wait", "studies/dssp_wait.py", "DSSP against SSP at either end of its range: the fast workers' wait"),
    Benchmark("vsgd_bound", "studies/vsgd_bound.py", "VSGD's path-length bound against the exact value staleness"),
    Benchmark("lbbsp_split", "studies/lbbsp_split.py", "LB-BSP's split of the global batch: its cost per round against W"),
    Benchmark("scheduler_events", "studies/scheduler_events.py", "one event of the simulator's scheduler, 256 tasks"),
)
