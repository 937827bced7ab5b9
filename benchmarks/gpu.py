"""mpips on one GPU: CUDA workers sharing it, against one-process training and DDP.

    python benchmarks/gpu.py [--quick] [--data DIR] [--progress FILE]
    python benchmarks/gpu.py --quick --device cpu --train 4000   # a dry run of the script on a CPU
    python benchmarks/gpu.py --workload mnist1d [--progress FILE]  # MNIST-1D's CNN (results/gpu-mnist1d)

Needs an NVIDIA GPU (torch.cuda); CI has none, so this runs on a lent
machine. The CIFAR ResNet (ResNet-8) on CIFAR-10-format batches written by
benchmarks/make_cifar10.py (50,000 + 10,000 images, seeded), so the real
CIFAR reader loads them. Every rank computes on the one GPU; servers apply
on the CPU beside their windows; the evaluator rank evaluates on the GPU.

1. The device-time model: one process times the worker's compute (the
   parameters to the GPU, the batch to the GPU, forward/backward, the gradient
   back) at several batch sizes and fits T(b) = a + c*b**p, the model
   `--device-time` and the simulator take.
2. One process at the global batch (workers x 32) on the GPU: the ceiling of
   one GPU. DDP with 4 ranks on the GPU over gloo with CUDA tensors (NCCL
   refuses two ranks on one GPU).
3. mpips with 1 server + 4 and 1 server + 8 workers (`--device cuda`):
   BSP, SSP, ASP, GSSP and LB-BSP, homogeneous; with 4 workers also slowed
   1,1,2,4 under a device time of SCALE x the fitted model (DDP slowed the
   same way: each rank waits out factor x T(b) before its allreduce).
4. The per-iteration profile of every mpips run from its log: gate wait,
   pull, host-to-device, forward/backward, device-to-host, push.

`--workload mnist1d`: the same on MNIST-1D with the published CNN (the
comparison's workload, benchmarks/paradigms.py, at 4 workers): one process,
then the paradigms with 4 workers under MPS (as the job scripts run ranks that
share a GPU), BSP also without.

Time to the target test accuracy: single process and DDP from parameter
snapshots taken during training and evaluated after it (evaluation costs
them nothing); mpips from its evaluator rank, which reads the parameters
without stopping anyone (it shares the GPU with the workers).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from common import RESULTS, mpiexec, run_inner, table, write_results
from make_cifar10 import write as write_cifar
from vs_ddp import SlowStep, _free_port, slowed_allreduce

BATCH = 32                   # per worker
# What is trained: train settings (Config fields) and the target accuracy.
# cifar10's data folder is written at run time; mnist1d: benchmarks/paradigms.py's
# workload at 4 workers (lr and epochs x sqrt(4 / 8)).
WORKLOADS = {
    "cifar10": {"settings": {"dataset": "cifar10", "model": "resnet"}, "epochs": 1.0, "target": 0.80,
                "label": "ResNet-8 on CIFAR-10-format data (benchmarks/make_cifar10.py)"},
    "mnist1d": {"settings": {"dataset": "mnist1d", "model": "cnn1d", "mnist1d_samples": 26000,
                             "lr": 0.05 * math.sqrt(4 / 8)}, "epochs": 20 * math.sqrt(4 / 8), "target": 0.93,
                "label": "MNIST-1D (26,000 signals) with the published CNN"},
}
WORK = WORKLOADS["cifar10"]  # main() sets it from --workload
PARADIGMS = ("bsp", "ssp", "asp", "gssp", "lbbsp")
SLOWDOWN = "1,1,2,4"
SNAPSHOTS_PER_EPOCH = 4      # evaluation points, as --eval-every 0.25
FIT_BATCHES = (8, 16, 32, 64, 128, 256)
DEVICE = "cuda"              # --device cpu: a dry run of this script where there is no GPU


def synchronize() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def gpu_info() -> dict:
    import torch
    from mpi4py import MPI

    smi = shutil.which("nvidia-smi")
    q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True) if smi else None
    ompi = shutil.which("ompi_info", path=os.path.dirname(sys.executable)) or shutil.which("ompi_info")
    cuda_aware = None
    if ompi:
        out = subprocess.run([ompi, "--parsable", "--all"], capture_output=True, text=True).stdout
        cuda_aware = any(line.startswith("mca:mpi:base:param:mpi_built_with_cuda_support:value:true")
                         for line in out.splitlines())
    return {"cpus": os.cpu_count(), "gpu": q.stdout.strip() if q else "none (no nvidia-smi)", "torch": torch.__version__, "cuda": torch.version.cuda,
            "mpi": MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip(),
            "mpi_cuda_aware": cuda_aware, "mps": shutil.which("nvidia-cuda-mps-control") is not None}


def config(**more):
    from mpips.config import Config

    return Config(**WORK["settings"], **more)


def target() -> float:
    return WORK["target"]


def load(data_dir: str):
    from mpips.training.data import load_dataset

    return load_dataset(config(data_dir=data_dir))


def model_for(data):
    import torch

    from mpips.training.models import build_model

    torch.manual_seed(0)
    return build_model(WORK["settings"]["model"], data.input_shape, data.num_classes)


def train_flags(data_dir: str) -> list[str]:
    """`mpips train` flags of the workload's settings."""
    settings = {**WORK["settings"], "data_dir": data_dir}
    return [x for k, v in settings.items() for x in (f"--{k.replace('_', '-')}", str(v))]


# --- 1. the device-time model -------------------------------------------------

def time_compute(data, batches, reps: int) -> dict[int, float]:
    """Median seconds of the worker's compute (copies included) per batch size."""
    import torch

    from mpips.training.flatmodel import FlatModel

    flat = FlatModel(model_for(data), DEVICE)
    loss_fn = torch.nn.CrossEntropyLoss()
    out = {}
    for b in batches:
        times = []
        for k in range(reps + 3):      # three untimed: cuDNN picks its kernels per shape
            lo = k * b % max(1, len(data.y_train) - b)
            times.append(worker_compute(flat, loss_fn, data.x_train[lo:lo + b], data.y_train[lo:lo + b]))
        out[b] = float(np.median(times[3:]))
    return out


def worker_compute(flat, loss_fn, x, y) -> float:
    """Seconds of a worker's compute of one batch: the parameters and the batch
    to the device, forward/backward, the gradient back (as runtime/roles/worker.py)."""
    t = time.perf_counter()
    flat.params_from_host()
    x, y = x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
    flat.zero_grad()
    loss = loss_fn(flat.model(x), y)
    loss.backward()
    float(loss.detach())
    flat.grads_to_host()
    return time.perf_counter() - t


def fit(points: dict[int, float]) -> dict:
    """Least-squares a + c*b**p (a, c >= 0) over a grid of p."""
    b = np.array(list(points), dtype=float)
    t = np.array(list(points.values()))
    best = None
    for p in np.linspace(0.1, 1.5, 141):
        design = np.stack([np.ones_like(b), b ** p], axis=1)
        (a, c), *_ = np.linalg.lstsq(design / t[:, None], np.ones_like(t), rcond=None)  # relative error
        if a < 0 or c < 0:
            continue
        err = float(np.max(np.abs(a + c * b ** p - t) / t))
        if best is None or err < best["max_relative_error"]:
            best = {"a": float(a), "c": float(c), "p": float(p), "max_relative_error": err}
    if best is None:   # no growth with the batch (a small model on a GPU): a constant time
        a = float(np.median(t))
        best = {"a": a, "c": 0.0, "p": 1.0, "max_relative_error": float(np.max(np.abs(a - t) / t))}
    return best


def device_time(model: dict, scale: float) -> str:
    """The --device-time setting of `scale` x the fitted model."""
    return f"a={scale * model['a'] * 1e3:.4g}ms,c={scale * model['c'] * 1e3:.4g}ms,p={model['p']:.3g}"


# --- 2. one process and DDP ----------------------------------------------------

def snapshots_to_curve(model, snapshots, data) -> list[tuple[float, float]]:
    import torch

    curve = []
    model.eval()
    with torch.no_grad():
        x, y = data.x_test.to(DEVICE), data.y_test.to(DEVICE)
        for t, params in snapshots:
            for p, saved in zip(model.parameters(), params):
                p.copy_(saved)
            acc = sum(int((model(x[lo:lo + 2000]).argmax(1) == y[lo:lo + 2000]).sum())
                      for lo in range(0, len(y), 2000)) / len(y)
            curve.append((t, acc))
    return curve


def result(samples: int, wall: float, curve, iteration_s: list[float]) -> dict:
    return {"samples": samples, "wall": wall, "samples_per_s": samples / wall,
            "iteration_ms": 1e3 * float(np.median(iteration_s)),
            "time_to_target": next((t for t, a in curve if a >= target()), None),
            "final_accuracy": curve[-1][1] if curve else None, "curve": curve}


def single(data, global_batch: int, epochs: float) -> dict:
    """One process, one GPU, the global batch: what mpips' workers together compute per round."""
    import torch

    from mpips.training.data import WorkerShard

    cfg = config()
    model = model_for(data).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    shard = WorkerShard(data.x_train, data.y_train, 0, 1, cfg.seed)
    ipe = len(data.y_train) // global_batch
    iterations = max(1, math.ceil(epochs * ipe))
    every = max(1, ipe // SNAPSHOTS_PER_EPOCH)
    loss_fn = torch.nn.CrossEntropyLoss()
    snapshots, starts = [], []
    synchronize()
    t0 = time.perf_counter()
    for it in range(iterations):
        starts.append(time.perf_counter())
        x, y = shard.next_batch(global_batch)
        x, y = x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if (it + 1) % every == 0:
            synchronize()
            snapshots.append((time.perf_counter() - t0, [p.detach().clone() for p in model.parameters()]))
    synchronize()
    wall = time.perf_counter() - t0
    return result(iterations * global_batch, wall, snapshots_to_curve(model, snapshots, data), np.diff(starts))


def ddp_inner(path: str, data_dir: str, epochs: float, slowdown: str, device_time_setting: str) -> None:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel

    from mpips.heterogeneity import parse_device_time
    from mpips.training.data import WorkerShard

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)  # MASTER_ADDR/PORT from the env
    cfg = config()
    data = load(data_dir)
    model = model_for(data).to(DEVICE)
    ddp = DistributedDataParallel(model)
    factors = [float(f) for f in slowdown.split(",")] if slowdown else [1.0] * world
    target = parse_device_time(device_time_setting, BATCH).seconds(BATCH) if device_time_setting else None
    step = SlowStep(factors[rank], target)
    ddp.register_comm_hook(step, slowed_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    shard = WorkerShard(data.x_train, data.y_train, rank, world, cfg.seed)
    ipe = len(data.y_train) // (world * BATCH)
    iterations = max(1, math.ceil(epochs * ipe))
    every = max(1, ipe // SNAPSHOTS_PER_EPOCH)
    loss_fn = torch.nn.CrossEntropyLoss()
    snapshots, starts = [], []
    comm.Barrier()
    t0 = time.perf_counter()
    for it in range(iterations):
        starts.append(time.perf_counter())
        step.begin()
        x, y = shard.next_batch(BATCH)
        x, y = x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        if rank == 0 and (it + 1) % every == 0:
            synchronize()
            snapshots.append((time.perf_counter() - t0, [p.detach().clone() for p in model.parameters()]))
    synchronize()
    wall = max(comm.allgather(time.perf_counter() - t0))
    dist.destroy_process_group()
    if rank == 0:
        with open(path, "w") as fh:
            json.dump(result(iterations * world * BATCH, wall, snapshots_to_curve(model, snapshots, data),
                             np.diff(starts)), fh)


def ddp(data_dir: str, workers: int, epochs: float, slowdown: str = "", setting: str = "") -> dict:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    workload = next(k for k, v in WORKLOADS.items() if v is WORK)
    return run_inner(__file__, workers, "--workload", workload, "--data", data_dir, "--epochs", str(epochs), "--slowdown", slowdown,
                     "--device-time", setting, "--device", DEVICE, timeout=600, env=env)


# --- 3. and 4. mpips -------------------------------------------------------------

PROFILE = ("wait", "pull", "h2d", "forward_backward", "d2h", "push", "slept")


def profile(it: np.ndarray) -> dict:
    """Median milliseconds per iteration of each part, and each part's share of the workers' time."""
    parts = {"wait": it["wait"], "pull": it["pull"], "h2d": it["h2d"],
             "forward_backward": it["compute"] - it["h2d"] - it["d2h"] - it["slowdown"],
             "d2h": it["d2h"], "push": it["push"], "slept": it["slowdown"]}
    total = sum(float(v.sum()) for v in parts.values())
    return {"median_ms": {k: 1e3 * float(np.median(v)) for k, v in parts.items()},
            "share": {k: float(v.sum()) / total for k, v in parts.items()}}


def mpips_run(paradigm: str, workers: int, epochs: float, data_dir: str, run_dir: str,
              slowdown: str = "", setting: str = "", *, more: tuple[str, ...] = (),
              launcher: tuple[str, ...] = ("-m", "mpips"), env: dict | None = None) -> dict:
    """One `mpips train` job (`launcher` runs the mpips command; `more`: further flags)."""
    from mpips.config import Config
    from mpips.io.log import RunLog
    from mpips.runtime.layout import ranks_for

    flags = [*launcher, "train", "--paradigm", paradigm, *train_flags(data_dir), "--device", DEVICE,
             "--batch-size", str(BATCH), "--epochs", str(epochs), "--evaluator",
             "--eval-every", str(1 / SNAPSHOTS_PER_EPOCH), "--run-dir", run_dir, *more]
    if slowdown:
        flags += ["--slowdown", slowdown, "--device-time", setting]
    n = ranks_for(Config(paradigm=paradigm, workers=workers, evaluator=True))
    began = time.perf_counter()
    mpiexec(n, flags, timeout=600, env=env)
    log = RunLog(run_dir)
    s = log.summary()
    it = log.iterations
    ends = it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]
    starts = [np.diff(np.sort(it["start"][it["worker"] == w])) for w in np.unique(it["worker"])]
    ev = log.evaluations
    return {"ranks": n, "status": s["status"], "complete": s["complete"], "job_seconds": time.perf_counter() - began,
            "samples": s["samples"], "wall": float(ends.max()), "samples_per_s": s["samples"] / float(ends.max()),
            "iteration_ms": 1e3 * float(np.median(np.concatenate(starts))),
            "time_to_target": log.time_to_accuracy(target()), "final_accuracy": s["final_accuracy"],
            "overruns": s["device_time_overruns"], "rejected": s["rejected_pushes"],
            "curve": [(float(t), float(a)) for t, a in zip(ev["time"], ev["accuracy"])],
            "profile": profile(it)}


# --- the whole benchmark ------------------------------------------------------------

class Progress:
    """Results so far, written after every step (a run cut short keeps what it measured)."""

    def __init__(self, path: str | None):
        self.path, self.data = path, {}

    def put(self, key: str, value) -> None:
        self.data[key] = value
        print(f"gpu: {key}: {json.dumps(value)[:300]}", flush=True)
        if self.path:
            with open(self.path, "w") as fh:
                json.dump(self.data, fh, indent=1)


def attempt(progress: Progress, key: str, fn, *args, **kwargs):
    began = time.perf_counter()
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - say which step failed, go on with the others
        r = {"error": str(e)[-3000:]}
    if isinstance(r, dict):
        r["seconds"] = time.perf_counter() - began
    progress.put(key, r)
    return r


def plan(quick: bool, workload: str) -> dict:
    if workload == "mnist1d":   # one process, BSP alone and every paradigm under MPS
        return {"epochs": 1.0 if quick else WORK["epochs"], "workers": {4: ("bsp",)}, "hetero": (), "ddp": False,
                "mps": {4: PARADIGMS}, "reps": 10 if quick else 30}
    if quick:
        return {"epochs": 0.25, "workers": {4: ("bsp", "asp", "gssp", "lbbsp", "ssp"), 8: ("bsp",)},
                "hetero": ("bsp", "asp"), "mps": {4: ("bsp",)}, "reps": 10, "ddp": True}
    return {"epochs": 1.0, "workers": {4: PARADIGMS, 8: PARADIGMS}, "hetero": PARADIGMS,
            "mps": {4: ("bsp", "asp"), 8: ("bsp", "asp")}, "reps": 30, "ddp": True}


@contextlib.contextmanager
def mps():
    """NVIDIA's Multi-Process Service for the jobs inside: the ranks sharing the
    GPU submit their kernels through one server, which runs them side by side
    instead of time-slicing the GPU between processes. Yields whether it started."""
    control = shutil.which("nvidia-cuda-mps-control")
    started = bool(control) and subprocess.run([control, "-d"]).returncode == 0
    try:
        yield started
    finally:
        if started:
            subprocess.run([control], input="quit\n", text=True)
            time.sleep(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inner", metavar="JSON", help=argparse.SUPPRESS)
    p.add_argument("--slowdown", default="", help=argparse.SUPPRESS)      # of the DDP job
    p.add_argument("--device-time", default="", help=argparse.SUPPRESS)   # of the DDP job
    p.add_argument("--epochs", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="cifar10", help="what is trained")
    p.add_argument("--data", help="CIFAR-10-format folder (default: written by make_cifar10.py into a temporary one)")
    p.add_argument("--quick", action="store_true", help="a fraction of an epoch each, fewer runs: a check that it all runs")
    p.add_argument("--scale", type=float, default=3.0, help="device time = this x the fitted compute model")
    p.add_argument("--progress", help="write the results so far here after every step")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run of the script")
    p.add_argument("--train", type=int, default=50000, help="training images written (the test set: a fifth)")
    p.add_argument("--render", metavar="PROGRESS", help="write results/gpu.{json,md} from the --progress "
                   "file of a run on a GPU machine, and nothing else")
    args = p.parse_args()
    if args.render:
        return render(args.render)
    global DEVICE, WORK
    DEVICE, WORK = args.device, WORKLOADS[args.workload]
    if args.inner:
        return ddp_inner(args.inner, args.data, args.epochs, args.slowdown, args.device_time)
    import torch

    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu.py: no CUDA device (torch.cuda.is_available() is False)")
    steps = plan(args.quick, args.workload)
    progress = Progress(args.progress)
    progress.put("workload", args.workload)
    progress.put("environment", gpu_info())
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data or tmp
        if args.workload == "cifar10" and not os.path.isdir(os.path.join(data_dir, "cifar-10-batches-py")):
            write_cifar(data_dir, args.train, args.train // 5, 0)
        data = load(data_dir)
        points = time_compute(data, FIT_BATCHES, steps["reps"])
        model = fit(points)
        setting = device_time(model, args.scale)
        progress.put("device_time_model", {"measured_s": points, **model, "scale": args.scale,
                                           "setting": setting})
        epochs, runs = steps["epochs"], iter(range(1000))
        for w in steps["workers"]:
            attempt(progress, f"single/{w}", single, data, w * BATCH, epochs)
        if steps["ddp"]:
            attempt(progress, "ddp/4/homogeneous", ddp, data_dir, 4, epochs)
            attempt(progress, "ddp/4/heterogeneous", ddp, data_dir, 4, epochs, SLOWDOWN, setting)

        def ours(key, name, w, *slowed):
            attempt(progress, key, mpips_run, name, w, epochs, data_dir, os.path.join(tmp, f"run{next(runs)}"),
                    *slowed)
        for name in steps["workers"][4]:
            ours(f"mpips/4/homogeneous/{name}", name, 4)
        for name in steps["hetero"]:
            ours(f"mpips/4/heterogeneous/{name}", name, 4, SLOWDOWN, setting)
        for name in steps["workers"].get(8, ()):
            ours(f"mpips/8/homogeneous/{name}", name, 8)
        with mps() as started:
            progress.put("mps", {"started": started})
            if started and steps["ddp"]:
                attempt(progress, "ddp/4/homogeneous-mps", ddp, data_dir, 4, epochs)
            for w, names in steps["mps"].items():
                for name in names:
                    if started:
                        ours(f"mpips/{w}/homogeneous-mps/{name}", name, w)
                    elif args.workload != "cifar10" and name not in steps["workers"].get(w, ()):
                        ours(f"mpips/{w}/homogeneous/{name}", name, w)   # no MPS here: every paradigm still runs
    name = results_name(args.workload)
    write_results(name if not args.quick else f"{name}-quick-{DEVICE}",
                  {"target_accuracy": target(), "batch_per_worker": BATCH, **progress.data}, markdown(progress.data))


def results_name(workload: str) -> str:
    return "gpu" if workload == "cifar10" else f"gpu-{workload}"


def render(path: str) -> None:
    """results/gpu.{json,md} from the --progress file of a run on a GPU machine
    (one cut short by its time limit keeps every step it finished)."""
    global WORK
    with open(path) as fh:
        data = json.load(fh)
    workload = data.get("workload", "cifar10")   # older progress files: CIFAR
    WORK, name = WORKLOADS[workload], results_name(workload)
    env = data["environment"]
    flag = "" if workload == "cifar10" else f" --workload {workload}"
    data = {"benchmark": name, "command": f"python3 benchmarks/gpu.py{flag} --progress progress.json (on the "
            "GPU machine), then python benchmarks/gpu.py --render progress.json", "target_accuracy": target(),
            "batch_per_worker": BATCH, **data}
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as fh:
        json.dump(data, fh, indent=1)
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as fh:
        fh.write(f"# {name}\n\n`{data['command']}`; {env['gpu']}, {env.get('cpus', 16)} CPU cores.\n\n"
                 + markdown(data))


def _ratio(a, b):
    return a / b if a is not None and b else None


def markdown(r: dict) -> str:
    from mpips.config import Config

    env, model = r["environment"], r["device_time_model"]
    cfg = Config(**{k: v for k, v in WORK["settings"].items() if k in ("lr", "momentum")})
    runs = {k: v for k, v in r.items() if "/" in k and "error" not in v}
    rows = []
    for key, v in r.items():
        if "/" not in key:
            continue
        system, *rest = key.split("/")
        label = {"single": "one process", "ddp": "DDP (gloo, CUDA tensors)"}.get(system, "mpips")
        setting = rest[1] if len(rest) > 1 else "homogeneous"
        name = rest[2] if len(rest) > 2 else ""
        if "error" in v:
            rows.append([label, name, rest[0], setting, "failed: " + v["error"].splitlines()[-1][:80]] + [None] * 5)
            continue
        rows.append([label, name, rest[0], setting, v["samples_per_s"], v["time_to_target"], v["final_accuracy"],
                     v["iteration_ms"], v.get("overruns"), v["seconds"]])
    prof = [[k.split("/")[1], k.split("/")[2], k.split("/")[3]] + [v["profile"]["median_ms"][p] for p in PROFILE]
            + [100 * v["profile"]["share"]["forward_backward"]]
            for k, v in runs.items() if k.startswith("mpips/")]
    # before (GPU time-sliced between the processes) and after (MPS), same runs otherwise
    mps = []
    for key, after in runs.items():
        if "homogeneous-mps" not in key:
            continue
        before = runs.get(key.replace("homogeneous-mps", "homogeneous"))
        if before is None:
            continue
        fb = [x["profile"]["median_ms"]["forward_backward"] if "profile" in x else None for x in (before, after)]
        h2d = [x["profile"]["median_ms"]["h2d"] if "profile" in x else None for x in (before, after)]
        mps.append([key.replace("/homogeneous-mps", ""), before["samples_per_s"], after["samples_per_s"],
                    after["samples_per_s"] / before["samples_per_s"], *fb, *h2d])
    # against the one-GPU baselines
    base = []
    for key, v in runs.items():
        if not key.startswith("mpips/"):
            continue
        _, w, setting, name = key.split("/")
        one = runs.get(f"single/{w}")
        ddp = runs.get(f"ddp/4/{setting.replace('-mps', '')}" + ("-mps" if setting.endswith("-mps") else ""))
        ddp = ddp if w == "4" else None
        base.append([name, w, setting, v["samples_per_s"], _ratio(v["samples_per_s"], one and one["samples_per_s"]),
                     _ratio(v["samples_per_s"], ddp and ddp["samples_per_s"]), v["time_to_target"],
                     _ratio(ddp and ddp["time_to_target"], v["time_to_target"]), v["final_accuracy"]])
    # what --device-time should say to simulate these runs: the workers' compute under sharing
    shared = "; ".join(f"{k.split('/')[1]} workers{' under MPS' if 'mps' in k else ''}: "
                       f"{sum(v['profile']['median_ms'][p] for p in ('h2d', 'forward_backward', 'd2h')):.2f} ms"
                       for k, v in runs.items() if k.startswith("mpips/") and k.endswith("/bsp")
                       and "heterogeneous" not in k)
    return (f"GPU: {env['gpu']}; torch {env['torch']} (CUDA {env['cuda']}); {env['mpi']} "
            f"(CUDA-aware: {env['mpi_cuda_aware']}); MPS control daemon present: {env['mps']}.\n\n"
            f"{WORK['label']}, {BATCH} samples per worker, "
            f"SGD lr {cfg.lr:.3g} momentum {cfg.momentum:g}. Device-time model fitted on one process: T(b) = "
            f"{1e3 * model['a']:.3g} ms + {1e3 * model['c']:.3g} ms x b^{model['p']:.3g} "
            f"(largest error {100 * model['max_relative_error']:.1f}%); slowed runs: {SLOWDOWN} x "
            f"`--device-time {model['setting']}` ({model['scale']} x the model). A worker's compute of "
            f"{BATCH} samples on the shared GPU (median over the BSP runs, copies included; the "
            f"device time to simulate these runs with): {shared}. `-mps`: the same run "
            f"under NVIDIA MPS. Samples/s: samples pushed (trained) over the span to the last "
            f"iteration's end; job s: the whole launch, start-up included.\n\n"
            + table(["system", "paradigm", "workers", "setting", "samples/s", f"s to {target():.0%}",
                     "final acc", "median iteration ms", "overruns", "job s"], rows)
            + "\n\n## Against one GPU\n\nmpips over one process at the same global batch (workers x "
            f"{BATCH}), and over DDP with 4 ranks (slowed alike in the heterogeneous setting); times to "
            f"{target():.0%}: DDP's over mpips' (> 1: mpips sooner).\n\n"
            + table(["paradigm", "workers", "setting", "samples/s", "x one process", "x DDP", f"s to {target():.0%}",
                     "DDP time / ours", "final acc"], base)
            + "\n\n## Per-iteration profile (median ms; share of the workers' time in forward/backward)\n\n"
            + table(["workers", "setting", "paradigm", *PROFILE, "fwd/bwd %"], prof)
            + "\n\n## What dominates, made faster: MPS\n\nForward/backward dominates every run, and "
            "several processes on one GPU are time-sliced by default. Under MPS their kernels run side by "
            "side. Before: without MPS; after: with it (same run otherwise).\n\n"
            + table(["run", "samples/s before", "after", "x", "fwd/bwd ms before", "after",
                     "h2d ms before", "after"], mps) + "\n")


if __name__ == "__main__":
    sys.exit(main())
