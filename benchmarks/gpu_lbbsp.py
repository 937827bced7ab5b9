"""LB-BSP on one GPU: where its time goes when every round changes the batch sizes.

    python benchmarks/gpu_lbbsp.py [--quick] [--progress FILE] [--keep DIR]
    python benchmarks/gpu_lbbsp.py --render FILE    # results/gpu-lbbsp.{md,json} from a --progress file
    python benchmarks/gpu_lbbsp.py --quick --device cpu --train 4000   # a dry run on a CPU

On one H100 (results/gpu.md) LB-BSP trained 4 homogeneous CUDA workers at
5,800 samples/s against BSP's 15,200, with the same median compute per
iteration: its time is in a tail of slow iterations. LB-BSP splits every
round's global batch anew from the workers' measured speeds, so a worker
computes batches of many sizes, and a GPU library does per-shape work the first
time it sees one (cuDNN picks and builds its convolution plans; CUDA loads the
kernels those use lazily). BSP's workers see one shape, once.

1. Shapes: in a fresh process, the worker's compute (copies included) of the
   CIFAR ResNet at batch sizes it has not run before, against the same sizes
   again: with the defaults, with CUDA's modules loaded eagerly
   (CUDA_MODULE_LOADING=EAGER), with cuDNN off (PyTorch's own convolutions), and
   with cuDNN's benchmark mode (it times every algorithm of a new shape).
2. Runs: 1 server + 4 workers (+ the evaluator), CIFAR-10-format data
   (benchmarks/make_cifar10.py), one epoch: BSP, LB-BSP, and LB-BSP under
   each setting above, with `--lbbsp-refine`, and under MPS; then 8 workers.
   From each log: the batch sizes each worker computed, how many iterations
   were a size new to that worker, their compute against the others', and the
   seconds the new sizes cost (their compute above the worker's median).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

import gpu
import numpy as np
from common import RESULTS, table, write_results
from make_cifar10 import write as write_cifar

# torch settings of a process, set before it computes
SETTINGS = {
    "default": ({}, None),
    "eager": ({"CUDA_MODULE_LOADING": "EAGER"}, None),
    "nocudnn": ({}, "enabled"),
    "cudnn-benchmark": ({}, "benchmark"),
}
SIZES = (17, 20, 23, 26, 29, 31, 35, 38, 41, 44, 47, 50, 56, 64)   # never 32, the warmed-up one


def set_torch(setting: str) -> None:
    import torch

    flag = SETTINGS[setting][1]
    if flag == "enabled":
        torch.backends.cudnn.enabled = False
    elif flag == "benchmark":
        torch.backends.cudnn.benchmark = True


def compute_once(flat, loss_fn, b: int) -> float:
    """Seconds of the worker's compute of one CIFAR-shaped batch of `b`."""
    import torch

    return gpu.worker_compute(flat, loss_fn, torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,)))


def shapes_inner(out: str, setting: str) -> None:
    """The first and the repeated compute of each of SIZES, after 5 batches of 32."""
    import torch

    from mpips.training.flatmodel import FlatModel
    from mpips.training.models import build_model

    set_torch(setting)
    torch.manual_seed(0)
    flat = FlatModel(build_model("resnet", (3, 32, 32), 10), gpu.DEVICE)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(5):
        compute_once(flat, loss_fn, 32)
    first, again = {}, {}
    for b in SIZES:
        first[b] = compute_once(flat, loss_fn, b)
        again[b] = float(np.median([compute_once(flat, loss_fn, b) for _ in range(3)]))
    with open(out, "w") as fh:
        json.dump({"first_ms": {b: 1e3 * v for b, v in first.items()},
                   "again_ms": {b: 1e3 * v for b, v in again.items()}}, fh)


def shapes(setting: str) -> dict:
    env = {**os.environ, **SETTINGS[setting][0]}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "shapes.json")
        subprocess_run([sys.executable, __file__, "--shapes-inner", out, "--setting", setting,
                        "--device", gpu.DEVICE], env)
        with open(out) as fh:
            r = json.load(fh)
    first, again = np.array(list(r["first_ms"].values())), np.array(list(r["again_ms"].values()))
    return {**r, "first_median_ms": float(np.median(first)), "again_median_ms": float(np.median(again)),
            "extra_per_new_size_ms": float(np.median(first - again))}


def subprocess_run(cmd: list[str], env: dict) -> None:
    import subprocess

    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")


# --- 2. the runs --------------------------------------------------------------

def new_sizes(run_dir: str) -> dict:
    """Per worker: the batch sizes it computed, and what the first iteration of
    each size cost against the worker's other iterations; how compute grows
    with the batch, and how the batch sizes wander from round to round."""
    from mpips.io.log import RunLog

    it = RunLog(run_dir).iterations
    distinct, new_count, new_ms, seen_ms, excess, lag1, sd = [], [], [], [], [], [], []
    line_b, line_t = [], []
    for w in np.unique(it["worker"]):
        mine = np.sort(it[it["worker"] == w], order="start")
        compute = mine["compute"] - mine["slowdown"]
        _, first = np.unique(mine["batch"], return_index=True)
        new = np.zeros(len(mine), bool)
        new[first] = True
        typical = float(np.median(compute[~new])) if (~new).any() else float(np.median(compute))
        distinct.append(len(first))
        new_count.append(int(new.sum()))
        new_ms += (1e3 * compute[new]).tolist()
        seen_ms += (1e3 * compute[~new]).tolist()
        excess.append(float(np.clip(compute[new] - typical, 0, None).sum()))
        sizes = mine["batch"][:-1].astype(float)   # the last batch is the budget's remainder
        sd.append(float(sizes.std()))
        if sizes.std() > 0:
            lag1.append(float(np.corrcoef(sizes[:-1], sizes[1:])[0, 1]))
        line_b += mine["batch"][~new].tolist()
        line_t += compute[~new].tolist()
    slope, intercept = np.polyfit(line_b, line_t, 1) if len(set(line_b)) > 1 else (np.nan, np.median(line_t))
    return {"compute_intercept_ms": 1e3 * float(intercept), "compute_us_per_sample": 1e6 * float(slope),
            "batch_autocorrelation": float(np.mean(lag1)) if lag1 else None, "batch_sd": float(np.mean(sd)),
            "batch_min": int(it["batch"].min()), "batch_max": int(it["batch"].max()),
            "distinct_sizes_per_worker": float(np.mean(distinct)), "new_size_iterations_per_worker":
            float(np.mean(new_count)), "new_size_compute_ms": float(np.median(new_ms)),
            "seen_size_compute_ms": float(np.median(seen_ms)) if seen_ms else None,
            "new_size_excess_s_per_worker": float(np.mean(excess))}


def run(key: str, paradigm: str, workers: int, epochs: float, data_dir: str, where: str, keep: str,
        setting: str = "default", more: tuple[str, ...] = ()) -> dict:
    run_dir = os.path.join(where, key.replace("/", "-"))
    env, flag = SETTINGS[setting]
    launcher = (__file__, "--as-mpips", setting) if flag else ("-m", "mpips")
    r = gpu.mpips_run(paradigm, workers, epochs, data_dir, run_dir, more=more, launcher=launcher, env=env)
    r.update(new_sizes(run_dir))
    del r["curve"]
    if keep:
        dest = os.path.join(keep, os.path.basename(run_dir))
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(run_dir):
            if name.endswith(".h5") and name != "checkpoint.h5":
                shutil.copy(os.path.join(run_dir, name), dest)
    return r


def plan(quick: bool, only: str) -> list[tuple]:
    """(key, paradigm, workers, setting, more flags, under MPS), most telling first."""
    four = [("4/bsp", "bsp", 4, "default", (), False),
            ("4/lbbsp", "lbbsp", 4, "default", (), False),
            ("4/lbbsp-eager", "lbbsp", 4, "eager", (), False),
            ("4/lbbsp-nocudnn", "lbbsp", 4, "nocudnn", (), False),
            ("4/lbbsp-refine", "lbbsp", 4, "default", ("--lbbsp-refine",), False),
            ("4/bsp-mps", "bsp", 4, "default", (), True),
            ("4/lbbsp-mps", "lbbsp", 4, "default", (), True)]
    eight = [("8/bsp", "bsp", 8, "default", (), False), ("8/lbbsp", "lbbsp", 8, "default", (), False)]
    runs = four[:3] if quick else four + eight
    return [r for r in runs if r[0] in only.split(",")] if only else runs


def main() -> None:
    if sys.argv[1:2] == ["--as-mpips"]:     # an mpips rank under a torch setting: --as-mpips SETTING ARGS
        set_torch(sys.argv[2])
        from mpips.cli import main as mpips_main
        sys.exit(mpips_main(sys.argv[3:]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes-inner", metavar="JSON", help=argparse.SUPPRESS)
    p.add_argument("--setting", default="default", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="a quarter epoch, three runs: a check that it all runs")
    p.add_argument("--progress", help="write the results so far here after every step")
    p.add_argument("--keep", default="", help="copy the runs' logs into this folder")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run of the script")
    p.add_argument("--train", type=int, default=50000, help="training images written (the test set: a fifth)")
    p.add_argument("--deadline", type=float, default=0, help="seconds: start no run after this many")
    p.add_argument("--logs", default="", help="with --render: the --keep folders of the progress files, "
                   "comma-separated, to read the runs' logs again")
    p.add_argument("--only", default="", help="these runs (keys of plan(), comma-separated), no shapes")
    p.add_argument("--render", metavar="PROGRESS", nargs="+",
                   help="write results/gpu-lbbsp.{json,md} from --progress files (one per machine)")
    args = p.parse_args()
    if args.render:
        return render(args.render, args.logs.split(",") if args.logs else [])
    gpu.DEVICE = args.device
    if args.shapes_inner:
        return shapes_inner(args.shapes_inner, args.setting)
    began = time.perf_counter()
    progress = gpu.Progress(args.progress)
    progress.put("environment", gpu.gpu_info())
    settings = () if args.only else ("default", "eager") if args.quick or args.device == "cpu" else tuple(SETTINGS)
    for setting in settings:
        gpu.attempt(progress, f"shapes/{setting}", shapes, setting)
    with tempfile.TemporaryDirectory() as tmp:
        write_cifar(tmp, args.train, args.train // 5, 0)
        epochs = 0.25 if args.quick else 1.0
        for key, paradigm, workers, setting, more, under_mps in plan(args.quick, args.only):
            if args.deadline and time.perf_counter() - began > args.deadline:
                progress.put(f"runs/{key}", {"error": "not run: past --deadline"})
                continue
            with gpu.mps() if under_mps else contextlib.nullcontext(True) as started:
                if under_mps and not started:
                    progress.put(f"runs/{key}", {"error": "MPS did not start"})
                    continue
                gpu.attempt(progress, f"runs/{key}", run, key, paradigm, workers, epochs, tmp, tmp, args.keep,
                            setting, more)
    if not args.progress:
        data = combined([progress.data])
        write_results(f"gpu-lbbsp-quick-{args.device}" if args.quick else "gpu-lbbsp", data, markdown(data))


def combined(progresses: list[dict]) -> dict:
    """The steps of several --progress files, each run tagged with its machine (1, 2, ...)."""
    return {"environments": [p["environment"] for p in progresses],
            "shapes": {k.split("/", 1)[1]: {"machine": i, **v} for i, p in enumerate(progresses, 1)
                       for k, v in p.items() if k.startswith("shapes/")},
            "runs": [{"machine": i, "run": k.split("/", 1)[1], **v} for i, p in enumerate(progresses, 1)
                     for k, v in p.items() if k.startswith("runs/") and "not run" not in v.get("error", "")]}


def render(paths: list[str], logs: list[str]) -> None:
    """`logs`: per progress file, the --keep folder of its runs ('' for none): the
    numbers read from the logs are read again by this code."""
    progresses = []
    for path, kept in zip(paths, logs + [""] * len(paths)):
        with open(path) as fh:
            progress = json.load(fh)
        for key, v in progress.items():
            run_dir = os.path.join(kept, key.split("/", 1)[-1].replace("/", "-"))
            if kept and key.startswith("runs/") and "error" not in v and os.path.isdir(run_dir):
                v.update(new_sizes(run_dir))
        progresses.append(progress)
    data = {"benchmark": "gpu-lbbsp", "command": "python3 benchmarks/gpu_lbbsp.py --progress progress.json "
            "(on a GPU machine), then python benchmarks/gpu_lbbsp.py --render progress.json ...",
            **combined(progresses)}
    with open(os.path.join(RESULTS, "gpu-lbbsp.json"), "w") as fh:
        json.dump(data, fh, indent=1)
    machines = "; ".join(f"machine {i}: {e['gpu']}, {e.get('cpus', 16)} CPU cores, torch {e['torch']} (CUDA "
                         f"{e['cuda']}), {e['mpi'].split(',')[0]}" for i, e in enumerate(data["environments"], 1))
    with open(os.path.join(RESULTS, "gpu-lbbsp.md"), "w") as fh:
        fh.write(f"# gpu-lbbsp\n\n`{data['command']}`; {machines}.\n\n" + markdown(data))


def markdown(r: dict) -> str:
    shape_rows = [[setting, v["machine"], v.get("first_median_ms"), v.get("again_median_ms"),
                   v.get("extra_per_new_size_ms"), v.get("error", "")[-80:]] for setting, v in r["shapes"].items()]
    rows = []
    for v in r["runs"]:
        if "error" in v:
            rows.append([v["run"], v["machine"], "failed: " + v["error"].splitlines()[-1][:80]] + [None] * 13)
            continue
        rows.append([v["run"], v["machine"], v["samples_per_s"], v["wall"], v["iteration_ms"], f"{v['batch_min']}-{v['batch_max']}",
                     v["distinct_sizes_per_worker"], v["new_size_iterations_per_worker"], v["new_size_compute_ms"],
                     v["seen_size_compute_ms"], v["new_size_excess_s_per_worker"], v["compute_intercept_ms"],
                     v["compute_us_per_sample"], v["batch_autocorrelation"], v["batch_sd"], v["final_accuracy"]])
    bsp = {(v["machine"], v["run"].split("/")[0]): v["samples_per_s"] for v in r["runs"]
           if v["run"].endswith("/bsp") and "error" not in v}
    against = "; ".join(f"{v['run']} (machine {v['machine']}) {v['samples_per_s'] / base:.2f}"
                        for v in r["runs"] if "lbbsp" in v["run"] and "error" not in v
                        and (base := bsp.get((v["machine"], v["run"].split("/")[0]))))
    return (f"LB-BSP's samples/s over BSP's on the same machine and workers: {against}.\n\n"
            "## A batch size new to a process, and the same size again\n\nThe CIFAR ResNet's compute "
            "(parameters and batch to the GPU, forward/backward, gradient back), in a fresh process after 5 "
            f"batches of 32: the first batch of each of {len(SIZES)} other sizes, and the median of 3 more of the "
            "same size (medians over the sizes, ms).\n\n"
            + table(["setting", "machine", "first of a size ms", "again ms", "first - again ms", "error"], shape_rows)
            + "\n\n## The runs\n\nOne epoch, 32 samples per worker (LB-BSP: the round's 32 x W split by "
            "speed). Compute: forward/backward with the copies, per iteration; a new size: a batch size "
            "that worker had not computed before in the run; excess: the seconds its new-size iterations "
            "took above the worker's median, per worker. Compute against batch: a least-squares line "
            "through every worker's iterations at sizes it had computed before (intercept, and the time "
            "one more sample adds); batch autocorrelation: of a worker's batch size with its next one "
            "(near 1: the split wanders; the mean over workers), with the standard deviation of its "
            "sizes.\n\n"
            + table(["run", "machine", "samples/s", "wall s", "median iteration ms", "batch sizes", "sizes per worker",
                     "new-size iterations per worker", "compute ms, new size", "compute ms, seen size",
                     "excess s per worker", "compute ms at batch 0", "compute us a sample",
                     "batch autocorrelation", "batch sd", "final acc"], rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
