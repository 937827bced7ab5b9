"""`mpips compare`: paradigms side by side on one job of one's own.

    mpips compare --paradigms bsp,ssp,gssp+gdtopk --seeds 0,1,2 --workers 4 \\
        --slowdown 1,1,2,4 --epochs 10 --evaluator --runs runs/cmp --out results/cmp
    mpips compare --simulate --paradigms ssp,dssp --workers 64 --epochs 5

Every (seed, entry of --paradigms) is one run with the same train settings;
each paradigm keeps its own defaults. An entry is PARADIGM[+COMPRESSOR]
[:SETTING=VALUE...] (mpips/experiments/setups.py, as `mpips plan
--candidates`): gssp+gdtopk adds --compressor gdtopk, localsgd:local_mode=async:dylu=true
its own settings over the shared ones; the tables call its runs by the entry. A run is `LAUNCHER -n RANKS python -m mpips train` (RANKS as
`mpips ranks` counts them) or, with --simulate, `python -m mpips simulate`,
each in a fresh process, into RUNS/NAME-sSEED/ with its output in
RUNS/NAME-sSEED.out (NAME: the entry, of characters that cannot leave RUNS).
RUNS is the comparison's alone while it runs, and each run directory is
claimed before any run: one in use, or holding another run, is refused
without --overwrite, which removes run files only; --reuse keeps a run
finished with these settings. Then the table sorted by the ranking, its
mean over seeds, and the ranking with its verdict (ranking.py, as `mpips
plan`'s) on the terminal and in OUT/table.md, the runs' raw values in
OUT/table.csv and the figures of `mpips plot` in OUT/. A run that fails is
reported and left out (exit status 1); a stop signal ends the comparison
and its runs (128 + the signal's number).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby

from ..config import ConfigError, known, load
from ..io.checkpoint import run_attrs
from ..io.log import DiskFull, RunLog, writing
from ..io.outdir import folder_problem
from ..io.rundir import RunDirLock, in_use, other_settings, run_files, run_settings
from ..paradigms import available
from ..runtime.layout import ranks_for
from ..validate import number_in
from .launch import Launches, default_launcher, launcher_words
from .ranking import TARGET_EVALUATIONS, Run, eval_every, failures, rank, render, verdict
from .setups import OptionError, Setup, file_name  # noqa: F401 - OptionError: this module's too


def parse_seeds(text: str) -> list[int]:
    try:
        return list(dict.fromkeys(int(s) for s in text.split(",")))
    except ValueError:
        raise OptionError("--seeds", text, "comma-separated integers, e.g. 0,1,2") from None


def flags(settings: dict) -> list[str]:
    """Settings as `mpips train` flags."""
    out = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        else:
            out += [flag, str(value)]
    return out


def finished(run_dir: str) -> bool:
    """Whether `run_dir` holds a finished run whose log is whole: --reuse
    trains a damaged one again (it kept one with a rank file unreadable,
    and its row counted only what was left)."""
    try:
        log = RunLog(run_dir)
    except (FileNotFoundError, OSError, KeyError):
        return False
    if log.status == "finished" and log.problems:
        print(f"{os.path.basename(os.path.normpath(run_dir))}: damaged run log ({'; '.join(log.problems)})",
              file=sys.stderr, flush=True)
    return log.status == "finished" and not log.problems


def failure_reason(output: str) -> str:
    """The line of a failed run's output file that says why: the last one
    naming an error (mpips' own, a traceback's), else the first line of Open
    MPI's last message (a block between rules of dashes)."""
    with open(output, errors="replace") as fh:
        lines = [ln.strip() for ln in fh.read().replace("\x00", "").splitlines()[1:]]   # [0]: the command
    errors = [ln for ln in lines if "error" in ln.lower()]
    if errors:
        return errors[-1]
    blocks = [[ln for ln in block if ln] for rule, block in groupby(lines, lambda ln: ln.startswith("---"))
              if not rule]
    return ([b[0] for b in blocks if b] or ["no output"])[-1]


@dataclass
class Comparison:
    """The runs of a comparison, checked when made: a bad entry or setting
    raises OptionError or ConfigError before anything is trained."""
    setups: list[str]                     # entries PARADIGM[+COMPRESSOR][:SETTING=VALUE...] (setups.py)
    seeds: list[int]
    settings: dict                        # train settings of every run, by Config field
    runs: str                             # where the run directories go
    simulate: bool = False
    launcher: str = field(default_factory=default_launcher)   # started as LAUNCHER -n RANKS
    timeout: float | None = None          # seconds one run may take
    reuse: bool = False                   # keep runs already finished with these settings
    prefix: str = ""                      # before each run's name (benchmarks/paradigms.py: the cluster)
    config: str | None = None             # a YAML file of settings, under the flags
    plugins: list[str] = field(default_factory=list)
    parallel: int = 1                     # simulated runs at once (MPI runs: always one at a time)
    plan: list[tuple[str, list[str]]] = field(init=False)   # (run directory, command), seeds outermost
    labels: dict[str, str] = field(init=False)   # run directory -> its entry (the tables' name for it)
    settings_of: dict[str, dict] = field(init=False)   # run directory -> its run's settings (Config.to_dict)
    # run directory -> how it is taken (claim()): "fresh", "keep", "resume" or "replace", and what to say
    claims: dict[str, tuple[str, str]] = field(init=False, default_factory=dict)

    def __post_init__(self):
        self.setups = list(dict.fromkeys(s.strip() for s in self.setups))
        entries = [Setup.parse(name) for name in self.setups]
        if self.parallel < 1:
            raise OptionError("--parallel", str(self.parallel), "a whole number >= 1")
        own = (["--config", self.config] if self.config else []) + [a for p in self.plugins for a in ("--plugin", p)]
        try:
            launcher = [] if self.simulate else launcher_words(self.launcher)
        except ValueError as e:
            raise OptionError("--launcher", self.launcher, str(e)) from None
        self.plan, self.labels, self.settings_of = [], {}, {}
        for seed in self.seeds:
            for entry in entries:
                prefix = file_name(self.prefix) if self.prefix else ""
                run_dir = os.path.join(self.runs, f"{prefix}{file_name(entry.name)}-s{seed}")
                settings = {**self.settings, **entry.settings, "seed": seed, "run_dir": run_dir}
                with entry.blame():
                    config = load(self.config, settings)
                    if self.simulate:
                        from ..runtime.job.simulate import simulated_config  # torch: only to simulate

                        config = simulated_config(config)
                if self.simulate:
                    start = [sys.executable, "-m", "mpips", "simulate"]
                else:
                    start = [*launcher, "-n", str(ranks_for(config)),
                             sys.executable, "-m", "mpips", "train"]
                self.plan.append((run_dir, [*start, *own, *flags(settings)]))
                self.labels[run_dir] = entry.name
                self.settings_of[run_dir] = config.to_dict()

    def claim(self) -> RunDirLock:
        """Before any run: --runs is this comparison's alone (its lock, held
        until released: a second comparison on it is refused), and each run
        directory one it may write (one that holds another run, or is in
        use, is refused without --overwrite; a comparison deleted what it
        did not own: a second comparison's live runs, a user's files, a
        folder outside --runs). --overwrite (and --reuse, for a run of the
        same entry and seed) replaces a run's files only (io/rundir.py,
        `claim`). OptionError naming each directory refused; --runs is made
        where missing."""
        why = folder_problem(self.runs)
        if why:
            raise OptionError("--runs", self.runs, f"cannot write there ({why})")
        try:
            lock = RunDirLock(self.runs, option="runs")
        except ConfigError as e:
            raise OptionError("--runs", self.runs, e.allowed) from None
        try:
            refused = []
            for run_dir, _ in self.plan:
                why = self._claim(run_dir)
                if why:
                    refused.append(f"{os.path.basename(run_dir)} {why}")
            if refused:
                more = f"; {len(refused) - 2} more" if len(refused) > 2 else ""
                raise OptionError("--runs", self.runs, "; ".join(refused[:2]) + more + " (--overwrite replaces "
                                  "runs there, their files only; --reuse keeps those finished with these "
                                  "settings; or choose another --runs)")
        except BaseException:
            lock.release()
            raise
        return lock

    def _claim(self, run_dir: str) -> str:
        """How this comparison takes `run_dir` (self.claims), or why it may not."""
        real = os.path.realpath(run_dir)
        if os.path.dirname(real) != os.path.realpath(self.runs):
            return f"resolves to {real}, outside --runs"
        if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
            return "is a file, not a folder"
        holder = in_use(run_dir)
        if holder:
            return f"is in use by {holder}"
        name = os.path.basename(run_dir)
        if not run_files(run_dir):
            self.claims[run_dir] = ("fresh", "")
        elif self.settings.get("overwrite"):
            self.claims[run_dir] = ("replace", "")
        elif not self.reuse:
            return f"holds a run ({_described(run_dir)})"
        else:
            ours, theirs = self.settings_of[run_dir], run_settings(run_dir) or {}
            if any(theirs.get(k) != ours[k] for k in ("paradigm", "seed")):
                return f"holds a run that is not this comparison's ({_described(run_dir)})"
            differ = other_settings(run_dir, ours)
            if differ:
                self.claims[run_dir] = ("replace", f"{name}: finished earlier with other settings "
                                                   f"({'; '.join(differ[:3])}): trained again")
            elif finished(run_dir):
                self.claims[run_dir] = ("keep", f"{name}: finished earlier, kept")
            elif run_attrs(run_dir).get("status"):
                self.claims[run_dir] = ("replace", f"{name}: {run_attrs(run_dir)['status']} earlier: trained again")
            else:   # unfinished with these settings: from its checkpoint, if it has one
                self.claims[run_dir] = ("resume", f"{name}: unfinished earlier: resumed")
        return ""

    def train(self, launches: Launches) -> tuple[list[str], list[str]]:
        """Train every run (claim() first); returns (the run directories that
        finished, 'NAME: why' of each that failed), in the plan's order.
        Simulated runs go `parallel` at a time: each is one process on its own
        virtual clock, so how many share the machine changes their wall time only; MPI runs one at a
        time, as their times are the measurement."""
        workers = self.parallel if self.simulate else 1
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            outcomes = list(pool.map(lambda step: self._train_one(step, launches), self.plan))
        done = [run_dir for run_dir, why in outcomes if why is None]
        return done, [why for _, why in outcomes if why is not None]

    def _train_one(self, step: tuple[str, list[str]], launches: Launches) -> tuple[str, str | None]:
        """(run directory, None) when it finished, else (run directory, 'NAME: why')."""
        run_dir, cmd = step
        name = os.path.basename(run_dir)
        how, say = self.claims.get(run_dir, ("fresh", ""))
        if launches.stopped:
            return run_dir, f"{name}: not started ({signal.Signals(launches.stopped).name})"
        if say:
            print(say, flush=True)
        if how == "keep":
            return run_dir, None
        if how == "replace":
            cmd = [*cmd, "--overwrite"]
        output = run_dir + ".out"
        start = time.perf_counter()
        code = launches.run_to_file(cmd, output, self.timeout, relay=0 if self.simulate else signal.SIGUSR1)
        if code == 0 and finished(run_dir):
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
            return run_dir, None
        if launches.stopped:
            why = f"stopped ({signal.Signals(launches.stopped).name})"
        elif code is None:
            why = f"no result within {self.timeout:g} s"
        else:   # (exit 0 with no run: a --launcher that started nothing, such as `true`)
            why = failure_reason(output) if code else "exited 0 without a finished run log"
        print(f"mpips: run {name} failed: {why} (see {output})", file=sys.stderr, flush=True)
        return run_dir, f"{name}: {why}"


def _described(run_dir: str) -> str:
    """A run in a few words: paradigm, seed, status."""
    config = run_settings(run_dir)
    if config is None:
        return "its run.h5 missing or unreadable"
    return f"{config.get('paradigm', '?')}, seed {config.get('seed', '?')}, {run_attrs(run_dir).get('status', 'unfinished')}"


@dataclass
class Report:
    rows: list[dict]        # one per run (mpips.analysis.summarize.rows)
    text: str               # the table, and its mean over seeds when there are several
    markdown: str           # the same in Markdown
    figures: list[str]


def report(runs: list[str], out: str, *, target: float, csv: str, labels: dict[str, str] | None = None,
           ranked: str = "") -> Report:
    """The table of `runs`, its raw values written to `csv`, and every figure
    in `out`; timelines and dynamics only for the first seed's runs (the
    others add to the summaries). `labels` (Comparison.labels): each run's
    entry, its name in the table and figures. A run's time to the target:
    ranking.py's (the mean of TARGET_EVALUATIONS evaluations reached it).
    `ranked`: the ranking and its verdict, after the tables."""
    # pandas and matplotlib only once there is something to show
    from ..analysis.plot import plot_runs
    from ..analysis.summarize import mean_rows, render_markdown, render_text, rows, write_csv

    table = rows(runs, target, labels, TARGET_EVALUATIONS)
    first = table[0]["seed"]
    figures = plot_runs(runs, out, target=target,
                        per_run=[d for d, r in zip(runs, table) if r["seed"] == first], labels=labels)
    write_csv(table, csv)
    seeds = sorted({r["seed"] for r in table})
    means = mean_rows(table) if len(seeds) > 1 else []

    def both(render) -> str:
        text = render(table, target).rstrip("\n") + "\n"
        if means:
            text += f"\nMean over seeds {seeds}:\n\n" + render(means, target).rstrip("\n") + "\n"
        return text + (f"\n{ranked}" if ranked else "")

    return Report(table, both(render_text), both(render_markdown), figures)


def ranking(comparison: Comparison, runs: list[str], failed: list[str], target: float) -> tuple[list[str], str]:
    """The finished runs in the ranking's order (an entry's seeds together,
    best entry first; those of an entry not ranked last), and the ranking
    with its verdict as text (ranking.py: plan's)."""
    by_name = {os.path.basename(d): d for d, _ in comparison.plan}
    done = [Run.from_log(comparison.labels[d], d, target) for d in runs]
    lost = [Run(comparison.labels[d], comparison.settings_of[d]["seed"], d, None, 0.0, 0.0, 0, failed=why)
            for d, why in ((by_name[f.partition(": ")[0]], f.partition(": ")[2]) for f in failed)]
    table = rank(done + lost, target)
    order = {name: k for k, name in enumerate(table["candidate"])}
    runs = sorted(runs, key=lambda d: order.get(comparison.labels[d], len(order)))   # (stable: seeds in order)
    head = (f"Ranked by the time to {100 * target:g}% (a run's: the first evaluation at which the mean of it and "
            f"the {TARGET_EVALUATIONS - 1} before reached it; an entry's: the mean over seeds plus its "
            f"standard error):\n\n")
    return runs, head + render(table, target) + "\n" + verdict(table, target, failures(lost))


def add_arguments(p) -> None:
    """`mpips compare`'s own options (cli.py adds every train setting but PER_RUN)."""
    p = p.add_argument_group("comparison (the other options: train settings of every run)")
    p.add_argument("--paradigms", default=",".join(available()), metavar="P[+COMPRESSOR][:SETTING=VALUE...],...",
                   help="what to compare: paradigms, each with a compressor (gssp+gdtopk) or settings of its "
                        "own over the shared ones (ssp:staleness=1, localsgd:local_mode=async:dylu=true), as "
                        "`mpips plan --candidates` [default: every registered paradigm]")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, one run each [default: 0]")
    p.add_argument("--runs", default=os.path.join("runs", "compare"),
                   help="where the run directories go [default: runs/compare]")
    p.add_argument("--out", default=None, help="where table.md, table.csv and the figures go "
                                               "[default: RUNS/summary]")
    p.add_argument("--simulate", action="store_true", default=False,
                   help="run each in the simulator (`mpips simulate`, virtual time) instead of under MPI")
    p.add_argument("--launcher", default=default_launcher(),
                   help="command that starts N ranks with -n N, e.g. 'srun --mpi=pmix' [default: mpiexec]")
    p.add_argument("--parallel", type=int, default=1,
                   help="with --simulate: runs at once, each its own process [default: 1]")
    p.add_argument("--timeout", type=number_in(0, 1e9, low_open=True), default=None, help="seconds one run may take [default: none]")
    p.add_argument("--reuse", action="store_true", default=False,
                   help="keep runs finished in RUNS with these settings, and resume unfinished ones (those "
                        "made with other settings are said and trained again)")
    p.add_argument("--target", type=number_in(0, 1, low_open=True), default=0.9,
                   help="the accuracy the ranking's time to the target is to [default: 0.9]")


def cmd_compare(args) -> int:
    settings = {k: v for k, v in vars(args).items() if known(k)}   # the train settings given
    try:
        if "eval_every" not in settings:   # the time to the target: not one evaluation interval
            settings["eval_every"] = eval_every(load(getattr(args, "config", None), settings).epochs)
        comparison = Comparison(
            setups=args.paradigms.split(","), seeds=parse_seeds(args.seeds), settings=settings,
            runs=args.runs, simulate=args.simulate, launcher=args.launcher, timeout=args.timeout,
            reuse=args.reuse, config=getattr(args, "config", None), plugins=getattr(args, "plugin", []),
            parallel=args.parallel)
    except (OptionError, ConfigError) as e:
        print(f"mpips: error: {e}", file=sys.stderr, flush=True)
        return 2
    out = args.out or os.path.join(args.runs, "summary")
    for option, folder in (("--runs", args.runs), ("--out", out)):   # before any run
        why = folder_problem(folder)
        if why:
            print(f"mpips: error: {OptionError(option, folder, f'cannot write there ({why})')}",
                  file=sys.stderr, flush=True)
            return 2
    try:
        lock = comparison.claim()
    except OptionError as e:
        print(f"mpips: error: {e}", file=sys.stderr, flush=True)
        return 2
    try:
        with Launches() as launches:
            runs, failed = comparison.train(launches)
            stopped = launches.stopped
        if stopped:
            print(f"mpips: error: the comparison stopped on {signal.Signals(stopped).name}: {len(runs)} of "
                  f"{len(comparison.plan)} runs finished, in {args.runs} (--reuse keeps them)",
                  file=sys.stderr, flush=True)
            return 128 + stopped
        if not runs:
            print("mpips: error: no run finished", file=sys.stderr, flush=True)
            return 1
        runs, ranked = ranking(comparison, runs, failed, args.target)
        try:
            with writing(out):
                result = report(runs, out, target=args.target, csv=os.path.join(out, "table.csv"),
                                labels=comparison.labels, ranked=ranked)
                with open(os.path.join(out, "table.md"), "w") as fh:
                    fh.write(result.markdown)
        except DiskFull as e:
            print(f"mpips: error: {e}", file=sys.stderr, flush=True)
            return 1
    finally:
        lock.release()
    print(result.text, end="")
    print(f"table and {len(result.figures)} figures in {out}/")
    if failed:
        print(f"mpips: {len(failed)} of {len(comparison.plan)} runs failed (above) and are left out",
              file=sys.stderr, flush=True)
    return 1 if failed else 0
