"""Run configuration: the shared settings in one frozen, validated dataclass,
loaded from YAML plus overrides; the paradigm's own settings in its options
(`Paradigm.Options`, mpips/paradigms), held here as `options`.

Every setting carries its help text, allowed values and bounds
(mpips/settings.py), so the command line, the YAML file, the Python keywords
and the error messages all come from one place. The emulated cluster's
settings are parsed once, here (`cluster`, mpips/heterogeneity.py).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from .heterogeneity import EmulatedCluster
from .node_links import NodeLinks
from .paradigms import REGISTRY as PARADIGMS  # the registry itself: registered paradigms are choices too
from .paradigms import RESERVED, Options, option_specs, options_class
from .paradigms.async_rules import ASYNC_RULES
from .paradigms.base import counted
from .paradigms.compress import COMPRESSORS
from .settings import MAX_COUNT, MAX_WORKERS, Spec, check, setting, specs, values
from .validate import ConfigError, function_name  # noqa: F401 - ConfigError: part of this module's interface

DATASETS = ("digits", "mnist", "cifar10", "synthetic", "mnist1d", "mnist5k")
ALLOWED_DATASETS = f"allowed: {', '.join(DATASETS)}, or package.module:function"
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("none", "step", "cosine")
DEVICES = ("cpu", "cuda", "auto")
BUDGETS = ("global", "per-worker")
ASYNC_MOMENTUM = ("compensated", "as-set")
SIM_GRADIENTS = ("auto", "batched", "exact")
PROGRESS_MODES = ("auto", "bar", "lines", "off")
PLACEMENTS = ("spread", "packed")   # mpips/runtime/placement.py
MAX_SYNTHETIC = 10_000_000   # samples of the synthetic dataset (64 floats each, on every rank)
MAX_MNIST1D = 1_000_000      # samples of mnist1d (made in about 2 minutes per million, once)
MIN_STALL_TIMEOUT = 1.0      # seconds
MAX_SAMPLES = 2**53          # a run's budget: the control table counts claimed samples in float64 cells
MAX_SIM_SECONDS = 3600.0     # a modelled message or step: virtual times stay far from float's limits
OPTIONS_TEXT = "paradigm_options"   # the fallback: a paradigm's options as 'key=value,...'


@dataclass(frozen=True, init=False)
class Config:
    # what to run ---------------------------------------------------------
    paradigm: str = setting("ssp", "synchronization paradigm (or one registered with mpips.register_paradigm)",
                            choices=PARADIGMS)
    servers: int = setting(1, "parameter-server ranks (shards of the parameters)", low=1, high=MAX_WORKERS)
    workers: int = setting(0, "worker ranks; 0 = derived from the world size", low=0, high=MAX_WORKERS)
    dataset: str = setting("digits", "digits, mnist, cifar10, synthetic, mnist1d, mnist5k, or "
                                     "package.module:function returning (x_train, y_train, x_test, y_test) "
                                     "or (train, test) torch Datasets")
    data_dir: str = setting("", "directory with MNIST IDX files or CIFAR-10 python batches")
    model: str = setting("mlp", "mlp, lenet5, resnet, cnn1d, or package.module:function")
    device: str = setting("cpu", "where workers and the evaluator compute (servers: the cpu)", choices=DEVICES)
    epochs: float = setting(5.0, "passes over the training set (budget global: by all workers together; "
                                 "per-worker: over each worker's shard)", low=0.0, low_open=True, high=1e6)
    iterations: int = setting(0, "iterations per worker (budget global: workers x iterations x batch-size "
                                 "samples in all); overrides epochs when > 0", low=0, high=MAX_COUNT)
    budget: str = setting("global", "global: workers claim batches from one shared sample budget, so a fast "
                                    "worker does more iterations; per-worker: every worker the same iterations",
                          choices=BUDGETS)
    time_limit: float = setting(0.0, "also end training after this many seconds (0 = no limit)", low=0.0,
                                note="seconds; 0 = none")
    batch_size: int = setting(16, "samples per worker per iteration", low=1, high=MAX_COUNT)
    test_fraction: float = setting(0.2, "held-out fraction for evaluation (digits, synthetic, mnist5k, a "
                                        "seeded split; the other datasets come with their test sets)",
                                   low=0.0, high=1.0, low_open=True, high_open=True)
    synthetic_samples: int = setting(4096, "samples of the synthetic dataset", low=16, high=MAX_SYNTHETIC,
                                     note="it is built in memory on every rank")
    mnist1d_samples: int = setting(0, "samples of mnist1d, training and test (80/20, mnist1d's split); "
                                      "0 = the published 5000 (4000 + 1000)", low=0)
    seed: int = setting(0, "seed of data order, initial weights and emulated stragglers")
    # optimizer (applied at the servers) ------------------------------------
    optimizer: str = setting("sgd", "server-side optimizer; with localsgd the workers' inner one (adam: AdamW, "
                                    "DiLoCo's)", choices=OPTIMIZERS)
    lr: float = setting(0.05, "learning rate of one update from workers x batch-size samples (pushes are "
                              "scaled 1/W)", low=0.0, low_open=True)
    momentum: float = setting(0.9, "SGD momentum", low=0.0, high=1.0, high_open=True)
    nesterov: bool = setting(False, "Nesterov momentum")
    async_momentum: str = setting("compensated", "pushes applied one at a time (every paradigm but BSP, "
                                                 "LB-BSP and Sync-Switch's BSP phase): compensated = momentum "
                                                 "max(0, 1 - W(1 - m)) at lr x (1 - that)/(1 - m), since "
                                                 "asynchrony adds momentum of about 1 - 1/W; as-set = m and lr",
                                  choices=ASYNC_MOMENTUM)
    async_rule: str = setting("none", "pushes applied one at a time (the paradigms async_momentum names, GSSP at "
                                      "both levels, asynchronous localsgd): each push's update rule, tau being the "
                                      "pushes applied between its read and its apply: staleness = the push x "
                                      "1/max(1, tau); delay-adaptive = x W/max(W, tau); dc = the gradient g plus "
                                      "dc-lambda g*g*(w_now - w_read) (DC-ASGD; the worker sends w_read with its "
                                      "push); dc-adaptive = the same with lambda = dc-lambda0 / sqrt(MS + 1e-7), "
                                      "MS an EMA of g*g", choices=ASYNC_RULES)
    dc_lambda: float = setting(0.04, "async-rule dc: lambda (0 = the plain rule)", low=0.0)
    dc_lambda0: float = setting(2.0, "async-rule dc-adaptive: lambda0 (0 = the plain rule)", low=0.0)
    dc_decay: float = setting(0.95, "async-rule dc-adaptive: decay of MS, the EMA of g*g", low=0.0, high=1.0,
                              high_open=True)
    dc_clip: float = setting(0.0, "async-rules dc, dc-adaptive: each element's correction at most dc-clip x |g| "
                                  "there (0 = unbounded, the papers' rule; docs/paradigms.md, 'dc-clip')", low=0.0)
    weight_decay: float = setting(0.0, "L2 weight decay", low=0.0)
    lr_schedule: str = setting("none", "learning-rate schedule over updates", choices=SCHEDULES)
    lr_step_every: float = setting(1.0, "step schedule: decay every this many epochs", low=0.0, low_open=True)
    lr_gamma: float = setting(0.1, "step schedule: decay factor", low=0.0, high=1.0, low_open=True)
    # pushes ------------------------------------------------------------------
    compressor: str = setting("none", "push compression", choices=COMPRESSORS)
    topk_ratio: float = setting(0.01, "topk: fraction of entries sent", low=0.0, high=1.0, low_open=True)
    # emulated heterogeneity -------------------------------------------------
    slowdown: str = setting("", "persistent slowdown factor per worker, e.g. 1,1,2,4, or FACTORxCOUNT items, "
                                "e.g. 1x48,2x12,4x4 (48 workers at 1, then 12 at 2, 4 at 4)")
    straggler: str = setting("", "transient stragglers: worker:start_iter:iters:factor[,...]")
    random_stragglers: str = setting("", "random stragglers: rate:mean_iters:factor (per worker iteration), "
                                         "for every worker, or one such item per worker separated by commas")
    device_time: str = setting("", "emulated device time of one iteration, times the slowdown factor: "
                                   "'20ms' (at batch-size, linear in the batch) or 'a=2ms,c=1ms,p=0.8' "
                                   "(a + c*b**p seconds); the worker sleeps out what compute leaves")
    sim_latency: float = setting(20e-6, "simulate: seconds of one pull or push message (latency of the "
                                        "modelled network)", low=0.0, high=MAX_SIM_SECONDS)
    sim_bandwidth: float = setting(10e9, "simulate: bytes/s of a pull or push (the modelled network)",
                                   low=1.0)
    sim_jitter: float = setting(2e-4, "simulate: mean of a seeded random extra delay of each pull or push "
                                      "(exponential; 0 = none, equally fast workers then move in lockstep)",
                                low=0.0, high=MAX_SIM_SECONDS)
    sim_nodes: str = setting("", "simulate: the cluster's nodes, one item per node separated by ';': "
                                 "'servers=S,group_servers=G,workers=W,latency=SECONDS,bandwidth=BYTES_PER_S' "
                                 "(each role's ranks fill the nodes in order; between nodes a pull or push takes "
                                 "the slower of the two links, within one sim-latency and sim-bandwidth); "
                                 "'' = one node")
    sim_apply: float = setting(2e-4, "simulate: seconds of a server's step, beyond its sum of the pushes "
                                     "(which moves each push's bytes at sim-bandwidth)",
                               low=0.0, high=MAX_SIM_SECONDS)
    sim_apply_per_push: float = setting(0.0, "simulate: seconds a server's step takes per push it sums, beyond "
                                             "the push's bytes at sim-bandwidth (a measured cluster's: mpips plan)",
                                        low=0.0, high=MAX_SIM_SECONDS)
    sim_gradients: str = setting("auto", "simulate: batched = the gradients of the workers computing at once in "
                                         "one vmap call (the same schedule, floats within rounding); exact = each "
                                         "worker's alone, bit for bit an MPI job's; auto = batched from 32 workers",
                                 choices=SIM_GRADIENTS)
    # runtime -----------------------------------------------------------------
    run_dir: str = setting("", "run directory; default runs/<time>-<paradigm>")
    overwrite: bool = setting(False, "start afresh in a run directory that holds another run, removing its "
                                     "files (off: such a directory is refused; a checkpoint is resumed)")
    eval_every: float = setting(1.0, "evaluate every this many epochs of updates", low=0.0, low_open=True,
                                high=1e6)
    placement: str = setting("packed", "which launched ranks take the servers' roles, by host (a job across "
                                       "nodes; on one node both are the launcher's order): packed = the "
                                       "launcher's order, servers on the first ranks (under Slurm's block "
                                       "distribution all on the first node); spread = servers one per node round "
                                       "robin, group servers likewise, workers node by node (GSSP's groups one per "
                                       "node); simulate: --sim-nodes says each node's roles",
                             choices=PLACEMENTS)
    evaluator: bool = setting(False, "evaluate on one extra rank (after the workers) that reads the "
                                     "parameters without stopping anyone; off: server 0 evaluates inline")
    checkpoint_every: float = setting(0.0, "also checkpoint every this many seconds of training "
                                           "(0 = only on SIGUSR1, the preemption signal)", low=0.0,
                                      note="seconds; 0 = off")
    log_flush_seconds: float = setting(2.0, "flush the run log at least this often", low=0.0, low_open=True)
    stall_warn: float = setting(60.0, "a wait longer than this prints whom it waits for", low=0.0,
                                low_open=True)
    stall_timeout: float = setting(300.0, "a wait longer than this aborts the job", low=MIN_STALL_TIMEOUT,
                                   note="seconds")
    torch_threads: int = setting(1, "torch threads per rank", low=1, high=1024)
    progress: str = setting("auto", "the progress of samples, throughput, time left and accuracy, on stderr: a bar "
                                    "updating in place, a line every progress-every seconds, or none; auto: the bar "
                                    "on a terminal, else lines", choices=PROGRESS_MODES)
    progress_every: float = setting(10.0, "seconds between two progress lines (progress lines, or auto off a "
                                          "terminal)", low=0.0, low_open=True)
    fail_at: str = setting("", "testing: 'worker:iteration' raises there")
    nan_at: str = setting("", "testing: 'worker:iteration[,...]' pushes a NaN gradient there")
    # the paradigm's own settings (an instance of its Options), and the
    # emulated cluster parsed: both made by __init__ from the settings
    options: Options = field(default=Options(), metadata={"options": True})
    cluster: EmulatedCluster = field(init=False, repr=False, compare=False)

    def __init__(self, *, options: Options | None = None, paradigm_options: str | Mapping[str, Any] = "",
                 **given: Any):
        """The shared settings by name, and the paradigm's own: by name (its
        option `staleness=3`), as `options` (an Options; another paradigm's
        keeps what the two share) or as `paradigm_options` ('key=value,...'
        or a mapping; a named option overrides it). An option of another
        paradigm is checked against its owner's declaration, and not used
        (settings shared by a comparison of several paradigms)."""
        for name, spec in SHARED.items():
            object.__setattr__(self, name, given.pop(name, spec.default))
        SHARED["paradigm"].check(self.paradigm)   # before its options are looked up
        object.__setattr__(self, "options", _own_options(self.paradigm, options, paradigm_options, given))
        self.validate()
        object.__setattr__(self, "cluster", EmulatedCluster.parse(
            slowdown=self.slowdown, straggler=self.straggler, random_stragglers=self.random_stragglers,
            device_time=self.device_time, batch_size=self.batch_size))
        parse_points(self.fail_at, "fail_at")
        parse_points(self.nan_at, "nan_at")
        NodeLinks.parse(self.sim_nodes)

    # ------------------------------------------------------------------
    def validate(self) -> None:
        """Every setting against its declaration, then what involves several."""
        check(self)
        if not -2**63 <= self.seed < 2**64:
            # torch.manual_seed's range
            raise ConfigError("seed", self.seed, "must be an integer in [-2**63, 2**64)")
        if self.mnist1d_samples % 10 or self.mnist1d_samples > MAX_MNIST1D:
            raise ConfigError("mnist1d_samples", self.mnist1d_samples,
                              f"0 (the published 5000) or a multiple of 10 (as many of each digit) "
                              f"up to {MAX_MNIST1D}")
        if self.dataset not in DATASETS:
            function_name("dataset", self.dataset, ALLOWED_DATASETS)
        if self.dataset in ("mnist", "cifar10"):
            if not self.data_dir:
                raise ConfigError("data_dir", self.data_dir,
                                  f"dataset {self.dataset} needs --data-dir with its files")
            if not os.path.isdir(self.data_dir):
                raise ConfigError("data_dir", self.data_dir, "no such directory")
        check(self.options)
        self.options.check()
        self.options.check_with(self)

    def check_workers(self, workers: int | None) -> None:
        """The settings that name workers or depend on their number, parsed as
        the workers will; `workers` None: the syntax only (before the layout)."""
        if workers is None:
            return
        self.cluster.check_workers(workers)
        self.options.check_workers(workers)
        parse_points(self.fail_at, "fail_at", workers)
        parse_points(self.nan_at, "nan_at", workers)

    def check_epoch_size(self, paradigm, samples: int, dataset: str = "") -> None:
        """`samples` training samples of `dataset` (default the setting's: a
        user's object is not the setting) hold a run of these settings: sized in
        epochs of each worker's shard (budget per-worker), an epoch needs at
        least one round: a batch beyond a worker's shard would make every
        "epoch" several passes."""
        workers = paradigm.num_workers
        dataset = dataset or self.dataset
        if samples < workers:
            raise ConfigError("workers", workers, f"more than the {samples} training samples of {dataset}")
        if self.batch_size > samples:
            # one batch beyond the training set: its claim would span passes (epoch 1.39 after one)
            raise ConfigError("batch_size", self.batch_size,
                              f"must be <= {samples}, the training samples of {dataset}")
        total, setting_ = counted(self.paradigm, paradigm.round_samples), paradigm.round_setting
        budget = self.iterations * total if self.iterations else self.epochs * samples
        if budget > MAX_SAMPLES:
            name = "iterations" if self.iterations else "epochs"
            raise ConfigError(name, self.get(name), f"a budget of {budget:.3g} samples; at most 2**53 "
                                                    f"(the control table counts them exactly)")
        if self.iterations or self.budget == "global":
            return   # sized in iterations, or in samples of the whole set (runtime/roles/budget.py): nothing to miscount
        if total <= samples:
            return
        if total == workers * self.batch_size and setting_ == "batch_size":
            raise ConfigError("batch_size", self.batch_size,
                              f"must be <= {samples // workers}, a worker's share of the {samples} "
                              f"training samples (an epoch); or size the run with --iterations")
        raise ConfigError(setting_, self.get(setting_),
                          f"a round of {total} samples exceeds the {samples} training samples "
                          f"(an epoch); use a smaller batch, or --iterations")

    def get(self, name: str) -> Any:
        """A setting by name: a shared one or one of the paradigm's options."""
        return getattr(self, name) if name in SHARED else getattr(self.options, name)

    def slowdown_factors(self, workers: int | None = None) -> list[float]:
        """Per-worker persistent slowdown factors ([] = none); `workers` given:
        checked to be their number."""
        return self.cluster.slowdowns.factors(workers)

    def device_time_model(self):
        """The parsed `device_time` (heterogeneity.DeviceTime), or None."""
        return self.cluster.device_time

    def with_workers(self, workers: int) -> "Config":
        return dataclasses.replace(self, workers=workers)

    def to_dict(self) -> dict[str, Any]:
        """The settings by name, the paradigm's own after the shared ones (run.h5's `config`)."""
        return {**values(self), **values(self.options)}


SHARED: dict[str, Spec] = specs(Config)
RESERVED.update(SHARED)


def option_owners(name: str) -> list[tuple[str, Spec]]:
    """(paradigm, its Spec) of each registered paradigm with an option `name`."""
    return [(paradigm, own[name]) for paradigm, own in option_specs().items() if name in own]


def _own_options(paradigm: str, options: Options | None, text: str | Mapping[str, Any],
                 given: dict[str, Any]) -> Options:
    """`paradigm`'s options from what the configuration was given (see Config)."""
    own = specs(options_class(paradigm))
    chosen = {} if options is None else {k: v for k, v in values(options).items() if k in own}
    for key, raw in _entries(paradigm, text, own).items():
        chosen[key] = own[key].coerce(raw)
    others: dict[str, dict[str, Any]] = {}   # another paradigm's options: not used, but not wrong either
    for key, value in given.items():
        if key in own:
            chosen[key] = value
            continue
        owners = option_owners(key)
        if not owners:
            raise ConfigError(key, value, "unknown setting; see `python -m mpips train --help`")
        for owner, _ in owners:
            others.setdefault(owner, {})[key] = value
    for owner, given_ in others.items():
        theirs = _make(owner, given_)
        check(theirs)
        theirs.check()
    return _make(paradigm, chosen)


def _make(paradigm: str, given: dict[str, Any]) -> Options:
    try:
        return options_class(paradigm)(**given)
    except TypeError as e:   # a plugin's Options that cannot be made from its own defaults
        raise ConfigError("paradigm", paradigm, f"its Options cannot be made ({e})") from None


def _entries(paradigm: str, text: str | Mapping[str, Any], own: dict[str, Spec]) -> dict[str, Any]:
    """`paradigm_options` ('key=value,...' or a mapping) as {option: value}."""
    if isinstance(text, Mapping):
        items = [(str(k), v) for k, v in text.items()]
    elif isinstance(text, str):
        items = []
        for item in filter(None, (s.strip() for s in text.split(","))):
            key, eq, raw = item.partition("=")
            if not eq or not key.strip():
                raise ConfigError(OPTIONS_TEXT, text, "entries key=value, e.g. threshold=0.5")
            items.append((key.strip(), raw.strip()))
    else:
        raise ConfigError(OPTIONS_TEXT, text, "'key=value,...' or a mapping of option: value")
    shown = text if isinstance(text, str) else ",".join(f"{k}={v}" for k, v in items)
    for key, raw in items:
        if key not in own:
            allowed = ", ".join(own) if own else "none"
            raise ConfigError(OPTIONS_TEXT, shown, f"unknown option {key!r} of paradigm {paradigm}; "
                                                   f"its options: {allowed}")
        try:
            own[key].check(own[key].coerce(raw))
        except ConfigError as e:
            raise ConfigError(OPTIONS_TEXT, f"{key}={raw}", e.allowed) from None
    return dict(items)


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


def spec_of(name: str) -> Spec:
    """The Spec of a setting by name: a shared one, or the first registered
    paradigm's option of that name; a ConfigError for an unknown name."""
    if name in SHARED:
        return SHARED[name]
    owners = option_owners(name)
    if not owners:
        raise ConfigError(name, None, "unknown setting; see `python -m mpips train --help`")
    return owners[0][1]


def known(name: str) -> bool:
    """A setting of `mpips train`: shared, a registered paradigm's option, or paradigm_options."""
    return name == OPTIONS_TEXT or name in SHARED or bool(option_owners(name))


def coerce(name: str, value: Any) -> Any:
    """Convert a YAML or command-line value to the setting's type, or say why not."""
    if name == OPTIONS_TEXT:
        if value is None or not isinstance(value, (str, Mapping)):
            raise ConfigError(name, value, "'key=value,...' or a mapping of option: value")
        return value
    if not known(name):
        raise ConfigError(name, value, "unknown setting; see `python -m mpips train --help`")
    return spec_of(name).coerce(value)


def load(path: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Build the configuration: defaults < YAML file < overrides."""
    values_: dict[str, Any] = {}
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
            values_[name] = coerce(name, v)
    for k, v in (overrides or {}).items():
        values_[k] = coerce(k, v)
    return Config(**values_)
