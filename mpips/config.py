"""Run configuration: one validated dataclass, loaded from YAML plus overrides.

Every field carries its help text (and allowed values) in its metadata, so the
command line, the YAML file and the error messages all come from one place.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from .paradigms import REGISTRY as PARADIGMS  # the registry itself: registered paradigms are choices too
from .paradigms.async_rules import ASYNC_RULES
from .paradigms.base import counted
from .paradigms.compress import COMPRESSORS
from .paradigms.grouping import GROUPINGS
from .paradigms.predict import PREDICTORS
from .paradigms.value_staleness import VSGD_RULES
from .training.emulation import parse_device_time, parse_random_stragglers, parse_slowdown, parse_stragglers
from .validate import ConfigError, coerce_to, function_name  # noqa: F401 - ConfigError: part of this module's interface

DATASETS = ("digits", "mnist", "cifar10", "synthetic", "mnist1d", "mnist5k")
ALLOWED_DATASETS = f"allowed: {', '.join(DATASETS)}, or package.module:function"
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("none", "step", "cosine")
DEVICES = ("cpu", "cuda", "auto")
ONLINE_POLICIES = ("none", "greedy", "conservative")
VSGD_GATES = ("ssp", "asp")
VALUE_MEASURES = ("exact", "bound")
BUDGETS = ("global", "per-worker")
ASYNC_MOMENTUM = ("compensated", "as-set")
LOCAL_MODES = ("sync", "async")
MAX_SYNTHETIC = 10_000_000   # samples of the synthetic dataset (64 floats each, on every rank)
MAX_MNIST1D = 1_000_000      # samples of mnist1d (made in about 2 minutes per million, once)
MIN_STALL_TIMEOUT = 1.0      # seconds


def _f(default, help, choices=None, **kw):
    meta = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    return field(default=default, metadata=meta, **kw)


@dataclass
class Config:
    # what to run ---------------------------------------------------------
    paradigm: str = _f("ssp", "synchronization paradigm (or one registered with mpips.register_paradigm)",
                       PARADIGMS)
    paradigm_options: str = _f("", "options of a registered paradigm, 'key=value,...' (in YAML or "
                                   "Python also a mapping); the built-in ones take none")
    servers: int = _f(1, "parameter-server ranks (shards of the parameters)")
    workers: int = _f(0, "worker ranks; 0 = derived from the world size")
    dataset: str = _f("digits", "digits, mnist, cifar10, synthetic, mnist1d, mnist5k, or "
                                "package.module:function returning (x_train, y_train, x_test, y_test) "
                                "or (train, test) torch Datasets")
    data_dir: str = _f("", "directory with MNIST IDX files or CIFAR-10 python batches")
    model: str = _f("mlp", "mlp, lenet5, resnet, cnn1d, or package.module:function")
    device: str = _f("cpu", "where workers and the evaluator compute (servers: the cpu)", DEVICES)
    epochs: float = _f(5.0, "passes over the training set (budget global: by all workers together; "
                            "per-worker: over each worker's shard)")
    iterations: int = _f(0, "iterations per worker (budget global: workers x iterations x batch-size "
                            "samples in all); overrides epochs when > 0")
    budget: str = _f("global", "global: workers claim batches from one shared sample budget, so a fast "
                               "worker does more iterations; per-worker: every worker the same iterations",
                     BUDGETS)
    time_limit: float = _f(0.0, "also end training after this many seconds (0 = no limit)")
    batch_size: int = _f(16, "samples per worker per iteration")
    test_fraction: float = _f(0.2, "held-out fraction for evaluation (digits, synthetic, mnist5k, a "
                                     "seeded split; the other datasets come with their test sets)")
    synthetic_samples: int = _f(4096, "samples of the synthetic dataset")
    mnist1d_samples: int = _f(0, "samples of mnist1d, training and test (80/20, mnist1d's split); "
                                 "0 = the published 5000 (4000 + 1000)")
    seed: int = _f(0, "seed of data order, initial weights and emulated stragglers")
    # optimizer (applied at the servers) ------------------------------------
    optimizer: str = _f("sgd", "server-side optimizer", OPTIMIZERS)
    lr: float = _f(0.05, "learning rate of one update from workers x batch-size samples (pushes are scaled 1/W)")
    momentum: float = _f(0.9, "SGD momentum")
    nesterov: bool = _f(False, "Nesterov momentum")
    async_momentum: str = _f("compensated", "pushes applied one at a time (every paradigm but BSP, "
                                            "LB-BSP and Sync-Switch's BSP phase): compensated = momentum "
                                            "max(0, 1 - W(1 - m)) at lr x (1 - that)/(1 - m), since "
                                            "asynchrony adds momentum of about 1 - 1/W; as-set = m and lr",
                             ASYNC_MOMENTUM)
    async_rule: str = _f("none", "pushes applied one at a time (the paradigms async_momentum names, GSSP at "
                                 "both levels, asynchronous localsgd): each push's update rule, tau being "
                                 "the pushes applied between its read and its apply: staleness = the push "
                                 "x 1/max(1, tau); delay-adaptive = x W/max(W, tau); dc = the gradient g "
                                 "plus dc-lambda g*g*(w_now - w_read) (DC-ASGD; the worker sends w_read "
                                 "with its push); dc-adaptive = the same with lambda = dc-lambda0 / "
                                 "sqrt(MS + 1e-7), MS an EMA of g*g", ASYNC_RULES)
    dc_lambda: float = _f(0.04, "async-rule dc: lambda (>= 0; 0 = the plain rule)")
    dc_lambda0: float = _f(2.0, "async-rule dc-adaptive: lambda0 (>= 0; 0 = the plain rule)")
    dc_decay: float = _f(0.95, "async-rule dc-adaptive: decay of MS, the EMA of g*g, in [0, 1)")
    weight_decay: float = _f(0.0, "L2 weight decay")
    lr_schedule: str = _f("none", "learning-rate schedule over updates", SCHEDULES)
    lr_step_every: float = _f(1.0, "step schedule: decay every this many epochs")
    lr_gamma: float = _f(0.1, "step schedule: decay factor")
    # paradigms ---------------------------------------------------------------
    staleness: int = _f(3, "SSP bound s (c_i - c_min <= s)")
    staleness_low: int = _f(3, "DSSP lower bound s_L")
    staleness_high: int = _f(15, "DSSP upper bound s_H")
    groups: int = _f(2, "GSSP: number of worker groups")
    group_staleness: int = _f(3, "GSSP: SSP bound inside a group")
    exchange_every: int = _f(0, "GSSP: pushes between exchanges with the global servers; 0 = group size")
    grouping: str = _f("equal", "GSSP: how speeds are cut into groups", GROUPINGS)
    group_assignment: str = _f("", "GSSP: explicit groups, e.g. '0,1;2,3' (workers by index)")
    profile_iterations: int = _f(3, "GSSP: iterations profiled before grouping")
    compressor: str = _f("none", "push compression", COMPRESSORS)
    topk_ratio: float = _f(0.01, "topk: fraction of entries sent")
    switch_at: float = _f(0.1, "Sync-Switch: fraction of the sample budget done in BSP")
    online_policy: str = _f("none", "Sync-Switch: reaction to transient stragglers", ONLINE_POLICIES)
    straggler_factor: float = _f(1.5, "Sync-Switch: slower than the median by this factor is a straggler")
    straggler_rounds: int = _f(3, "Sync-Switch: consecutive slow rounds before acting")
    conservative_window: int = _f(10, "Sync-Switch conservative: rounds the slowdown must last")
    momentum_ramp: int = _f(100, "Sync-Switch: updates over which momentum ramps back after m/W")
    global_batch: int = _f(0, "LB-BSP: global batch X; 0 = workers x batch-size")
    predictor: str = _f("ewma", "LB-BSP speed predictor", PREDICTORS)
    batch_cap: int = _f(0, "LB-BSP: largest batch of one worker; 0 = no cap")
    lbbsp_refine: bool = _f(False, "LB-BSP: after the first predicted split, move samples from the "
                                   "slowest to the fastest worker by measured compute times "
                                   "(time not linear in batch size)")
    gate: str = _f("ssp", "VSGD: gating underneath", VSGD_GATES)
    value_measure: str = _f("bound", "VSGD: value staleness measure", VALUE_MEASURES)
    vsgd_rule: str = _f("max", "VSGD: lr/max(1,v) or lr/(1+lambda*v)", VSGD_RULES)
    vsgd_lambda: float = _f(1.0, "VSGD: lambda of the linear rule")
    backup_workers: int = _f(1, "backup: b of the W workers are backups; a round is applied once its "
                                "first W - b pushes are in, the rest dropped (0 = BSP)")
    grace_window: float = _f(0.0, "backup: seconds the server waits, once a round's first W - b pushes "
                                  "are in, for more of that round (0 = none)")
    local_steps: int = _f(8, "localsgd: local steps H of each worker between pushes")
    outer_lr: float = _f(0.7, "localsgd: the servers' outer learning rate (1 with outer-momentum 0: "
                              "model averaging)")
    outer_momentum: float = _f(0.9, "localsgd: the outer Nesterov momentum (0: plain outer SGD)")
    local_mode: str = _f("sync", "localsgd: sync = the servers step once all W pseudo-gradients of a "
                                 "round are in; async = each applied when it arrives", LOCAL_MODES)
    delayed_nesterov: int = _f(1, "localsgd async: apply the outer momentum every N updates, plain SGD "
                                  "steps in between (1: every update)")
    dylu: bool = _f(False, "localsgd async: dynamic local updates, H_i = H x v_i / max_j v_j from "
                           "measured speeds")
    # emulated heterogeneity -------------------------------------------------
    slowdown: str = _f("", "persistent slowdown factor per worker, e.g. 1,1,2,4, or FACTORxCOUNT items, "
                           "e.g. 1x48,2x12,4x4 (48 workers at 1, then 12 at 2, 4 at 4)")
    straggler: str = _f("", "transient stragglers: worker:start_iter:iters:factor[,...]")
    random_stragglers: str = _f("", "random stragglers: rate:mean_iters:factor (per worker iteration), "
                                    "for every worker, or one such item per worker separated by commas")
    device_time: str = _f("", "emulated device time of one iteration, times the slowdown factor: "
                              "'20ms' (at batch-size, linear in the batch) or 'a=2ms,c=1ms,p=0.8' "
                              "(a + c*b**p seconds); the worker sleeps out what compute leaves")
    sim_latency: float = _f(20e-6, "simulate: seconds of one pull or push message (latency of the modelled network)")
    sim_bandwidth: float = _f(10e9, "simulate: bytes/s of a pull or push (the modelled network)")
    sim_jitter: float = _f(2e-4, "simulate: mean of a seeded random extra delay of each pull or push "
                                 "(exponential; 0 = none, equally fast workers then move in lockstep)")
    sim_apply: float = _f(2e-4, "simulate: seconds of a server's step, beyond its sum of the pushes "
                                "(which moves each push's bytes at sim-bandwidth)")
    sim_apply_per_push: float = _f(0.0, "simulate: seconds a server's step takes per push it sums, beyond "
                                        "the push's bytes at sim-bandwidth (a measured cluster's: mpips plan)")
    # runtime -----------------------------------------------------------------
    run_dir: str = _f("", "run directory; default runs/<time>-<paradigm>")
    overwrite: bool = _f(False, "start afresh in a run directory that holds another run, removing its "
                                "files (off: such a directory is refused; a checkpoint is resumed)")
    eval_every: float = _f(1.0, "evaluate every this many epochs of updates")
    evaluator: bool = _f(False, "evaluate on one extra rank (after the workers) that reads the "
                                "parameters without stopping anyone; off: server 0 evaluates inline")
    checkpoint_every: float = _f(0.0, "also checkpoint every this many seconds of training "
                                      "(0 = only on SIGUSR1, the preemption signal)")
    log_flush_seconds: float = _f(2.0, "flush the run log at least this often")
    stall_warn: float = _f(60.0, "a wait longer than this prints whom it waits for")
    stall_timeout: float = _f(300.0, "a wait longer than this aborts the job")
    torch_threads: int = _f(1, "torch threads per rank")
    fail_at: str = _f("", "testing: 'worker:iteration' raises there")
    nan_at: str = _f("", "testing: 'worker:iteration[,...]' pushes a NaN gradient there")

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------
    def validate(self) -> None:
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ConfigError(f.name, value, "allowed: " + ", ".join(choices))
            # NaN passes every `x < 0` test and inf every `x > 0`: no float setting takes them
            if isinstance(f.default, float) and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                                 or not math.isfinite(value)):
                raise ConfigError(f.name, value, "must be a finite number")
        _at_least(self, "servers", 1)
        _at_least(self, "workers", 0)
        _at_least(self, "batch_size", 1)
        _at_least(self, "iterations", 0)
        _at_least(self, "staleness", 0)
        _at_least(self, "staleness_low", 0)
        _at_least(self, "group_staleness", 0)
        _at_least(self, "groups", 1)
        _at_least(self, "exchange_every", 0)
        _at_least(self, "profile_iterations", 1)
        _at_least(self, "global_batch", 0)
        _at_least(self, "batch_cap", 0)
        _at_least(self, "torch_threads", 1)
        _at_least(self, "synthetic_samples", 16)
        _at_least(self, "straggler_rounds", 1)
        _at_least(self, "conservative_window", 1)
        _at_least(self, "momentum_ramp", 0)
        _at_least(self, "backup_workers", 0)
        if self.grace_window < 0:
            raise ConfigError("grace_window", self.grace_window, "must be >= 0 (seconds)")
        _at_least(self, "local_steps", 1)
        _at_least(self, "delayed_nesterov", 1)
        _positive(self, "outer_lr")
        _unit(self, "outer_momentum", 0.0, 1.0, closed=False)
        if self.paradigm == "localsgd" and self.budget != "global":
            raise ConfigError("budget", self.budget, "must be global with localsgd (its workers claim "
                                                     "the batches of their local steps)")
        if self.paradigm == "localsgd" and self.lr_schedule != "none":
            raise ConfigError("lr_schedule", self.lr_schedule, "must be none with localsgd (its inner and "
                                                               "outer learning rates are constant)")
        if self.paradigm == "localsgd" and (self.fail_at or self.nan_at):
            raise ConfigError("fail_at" if self.fail_at else "nan_at", self.fail_at or self.nan_at,
                              "not with localsgd (its workers take local steps)")
        if self.paradigm == "localsgd" and self.local_mode == "sync":
            if self.dylu:
                raise ConfigError("dylu", self.dylu, "only with local_mode async (a synchronous round "
                                                     "waits for every worker)")
            if self.delayed_nesterov != 1:
                raise ConfigError("delayed_nesterov", self.delayed_nesterov, "must be 1 unless local_mode "
                                                                             "is async")
        if not isinstance(self.seed, int) or not -2**63 <= self.seed < 2**64:
            # torch.manual_seed's range
            raise ConfigError("seed", self.seed, "must be an integer in [-2**63, 2**64)")
        if self.synthetic_samples > MAX_SYNTHETIC:
            raise ConfigError("synthetic_samples", self.synthetic_samples,
                              f"must be an integer in [16, {MAX_SYNTHETIC}] (it is built in memory on every rank)")
        _at_least(self, "mnist1d_samples", 0)
        if self.mnist1d_samples % 10 or self.mnist1d_samples > MAX_MNIST1D:
            raise ConfigError("mnist1d_samples", self.mnist1d_samples,
                              f"0 (the published 5000) or a multiple of 10 (as many of each digit) "
                              f"up to {MAX_MNIST1D}")
        if self.dataset not in DATASETS:
            function_name("dataset", self.dataset, ALLOWED_DATASETS)
        if self.staleness_high < self.staleness_low:
            raise ConfigError("staleness_high", self.staleness_high,
                              f"must be >= staleness_low ({self.staleness_low})")
        _positive(self, "epochs")
        _positive(self, "lr")
        _positive(self, "eval_every")
        _positive(self, "log_flush_seconds")
        _positive(self, "stall_warn")
        _positive(self, "stall_timeout")
        if self.stall_timeout < MIN_STALL_TIMEOUT:
            # below this, start-up waits of a loaded machine would abort healthy jobs
            raise ConfigError("stall_timeout", self.stall_timeout, f"must be a number >= {MIN_STALL_TIMEOUT:g} (seconds)")
        _positive(self, "lr_step_every")
        _positive(self, "sim_bandwidth")
        for name in ("sim_latency", "sim_jitter", "sim_apply", "sim_apply_per_push"):   # virtual seconds; 0 = free
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "must be >= 0 (seconds)")
        _positive(self, "straggler_factor")
        _unit(self, "momentum", 0.0, 1.0, closed=False)
        _unit(self, "test_fraction", 0.0, 1.0, closed=False)
        _unit(self, "switch_at", 0.0, 1.0, closed=True)
        _unit(self, "topk_ratio", 0.0, 1.0, closed=True, low_open=True)
        _unit(self, "lr_gamma", 0.0, 1.0, closed=True, low_open=True)
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", self.weight_decay, "must be >= 0")
        if not isinstance(self.checkpoint_every, (int, float)) or not self.checkpoint_every >= 0:
            raise ConfigError("checkpoint_every", self.checkpoint_every, "must be a number >= 0 (seconds; 0 = off)")
        if not isinstance(self.time_limit, (int, float)) or not self.time_limit >= 0:
            raise ConfigError("time_limit", self.time_limit, "must be a number >= 0 (seconds; 0 = none)")
        for name in ("dc_lambda", "dc_lambda0"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "must be >= 0")
        _unit(self, "dc_decay", 0.0, 1.0, closed=False)
        if self.vsgd_lambda < 0:
            raise ConfigError("vsgd_lambda", self.vsgd_lambda, "must be >= 0")
        if self.dataset in ("mnist", "cifar10"):
            if not self.data_dir:
                raise ConfigError("data_dir", self.data_dir,
                                  f"dataset {self.dataset} needs --data-dir with its files")
            if not os.path.isdir(self.data_dir):
                raise ConfigError("data_dir", self.data_dir, "no such directory")
        self.paradigm_option_values()
        self.slowdown_factors()  # parse now so errors surface before MPI work
        self.check_workers(None)
        self.device_time_model()

    def check_workers(self, workers: int | None) -> None:
        """The settings that name workers or depend on their number, parsed as
        the workers will; `workers` None: the syntax only (before the layout)."""
        self.slowdown_factors(workers)
        if self.paradigm == "backup" and workers is not None and self.backup_workers >= workers:
            raise ConfigError("backup_workers", self.backup_workers,
                              f"must be an integer in [0, {workers - 1}] (fewer than the {workers} workers)")
        parse_stragglers(self.straggler, workers)
        parse_random_stragglers(self.random_stragglers, workers)
        parse_points(self.fail_at, "fail_at", workers)
        parse_points(self.nan_at, "nan_at", workers)

    def check_epoch_size(self, paradigm, samples: int) -> None:
        """`samples` training samples hold a run of these settings: sized in
        epochs of each worker's shard (budget per-worker), an epoch needs at
        least one round: a batch beyond a worker's shard would make every
        "epoch" several passes."""
        workers = paradigm.num_workers
        if samples < workers:
            raise ConfigError("workers", workers, f"more than the {samples} training samples of {self.dataset}")
        if self.batch_size > samples:
            # one batch beyond the training set: its claim would span passes (epoch 1.39 after one)
            raise ConfigError("batch_size", self.batch_size,
                              f"must be <= {samples}, the training samples of {self.dataset}")
        total, setting = counted(self.paradigm, paradigm.round_samples), paradigm.round_setting
        if self.iterations or self.budget == "global":
            return   # sized in iterations, or in samples of the whole set (runtime/roles/budget.py): nothing to miscount
        if total <= samples:
            return
        if total == workers * self.batch_size and setting == "batch_size":
            raise ConfigError("batch_size", self.batch_size,
                              f"must be <= {samples // workers}, a worker's share of the {samples} "
                              f"training samples (an epoch); or size the run with --iterations")
        raise ConfigError(setting, getattr(self, setting),
                          f"a round of {total} samples exceeds the {samples} training samples "
                          f"(an epoch); use a smaller batch, or --iterations")

    def paradigm_option_values(self) -> dict[str, Any]:
        """The registered paradigm's options, defaults filled in (mpips.register_paradigm)."""
        from .paradigms import parse_options

        return parse_options(self.paradigm, self.paradigm_options)

    def slowdown_factors(self, workers: int | None = None) -> list[float]:
        """Per-worker persistent slowdown factors ([] = none); `workers` None:
        the syntax only."""
        return parse_slowdown(self.slowdown, workers)

    def device_time_model(self):
        """The parsed `device_time` (emulation.DeviceTime), or None."""
        return parse_device_time(self.device_time, self.batch_size)

    def with_workers(self, workers: int) -> "Config":
        return dataclasses.replace(self, workers=workers)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_points(text: str, name: str, workers: int | None = None) -> set[tuple[int, int]]:
    """'worker:iteration[,...]' (fail_at, nan_at) as a set of pairs."""
    out = set()
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            w, i = (int(x) for x in item.split(":"))
        except ValueError:
            raise ConfigError(name, text, "entries worker:iteration, e.g. 2:10") from None
        if w < 0 or i < 0 or (workers is not None and w >= workers):
            top = f"0..{workers - 1}" if workers is not None else ">= 0"
            raise ConfigError(name, text, f"entries worker:iteration with worker in {top}, iteration >= 0")
        out.add((w, i))
    return out


def _at_least(cfg, name, low):
    v = getattr(cfg, name)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ConfigError(name, v, f"must be an integer >= {low}")


def _positive(cfg, name):
    v = getattr(cfg, name)
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(name, v, "must be a number > 0")


def _unit(cfg, name, lo, hi, closed, low_open=False):
    v = getattr(cfg, name)
    ok = isinstance(v, (int, float)) and math.isfinite(v)
    if ok:
        ok = (v > lo if low_open else v >= lo) and (v <= hi if closed else v < hi)
    if not ok:
        left = "(" if low_open else "["
        right = "]" if closed else ")"
        raise ConfigError(name, v, f"must be in {left}{lo}, {hi}{right}")


def field_types() -> dict[str, type]:
    return {f.name: type(f.default) for f in dataclasses.fields(Config)}


def coerce(name: str, value: Any) -> Any:
    """Convert a YAML or command-line value to the field's type, or say why not."""
    types = field_types()
    if name not in types:
        raise ConfigError(name, value, "unknown setting; see `python -m mpips train --help`")
    if name == "paradigm_options" and isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    return coerce_to(types[name], name, value)


def load(path: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Build the configuration: defaults < YAML file < overrides."""
    values: dict[str, Any] = {}
    if path:
        import yaml

        try:
            # bytes: YAML finds the encoding (UTF-8, or UTF-16 by its mark) and says
            # where a file of other bytes fails (a text stream raised UnicodeDecodeError)
            with open(path, "rb") as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as e:
            raise ConfigError("config", path, f"cannot read: {e.strerror}") from None
        except yaml.reader.ReaderError as e:
            raise ConfigError("config", path, f"not YAML text ({e.reason} at position {e.position})") from None
        except yaml.YAMLError as e:
            raise ConfigError("config", path, f"not valid YAML ({e.__class__.__name__})") from None
        except RecursionError:
            raise ConfigError("config", path, "not valid YAML (nested too deeply)") from None
        if not isinstance(data, dict):
            raise ConfigError("config", path, "must be a mapping of setting: value")
        for k, v in data.items():
            name = str(k).replace("-", "_")
            values[name] = coerce(name, v)
    for k, v in (overrides or {}).items():
        values[k] = coerce(k, v)
    return Config(**values)
