"""A real Slurm cluster on this machine, for tests and for trying mpips
on several nodes (`make cluster-up`, tests/cluster.py).

One node: `slurmd` on this host beside `slurmctld`, on 127.0.0.1 (the
`slurm` fixture of tests/slurm). Several: one `slurmd` on each node of a
`netns.Network` (a namespace with its own address and host name; the
`cluster` fixture of tests/nodes), `slurmctld` on this host at the
bridge's address. Either way the configuration has free ports and a
directory of its own, the daemons run in the foreground as child processes
and are stopped by PID; every Slurm command must see `SLURM_CONF`
(`cluster.env` carries it, `submit`/`wait` use it).

    cluster = SlurmCluster(root, [node])          # one node
    cluster = SlurmCluster.on(network)            # a node per namespace
    cluster.start(); ...; cluster.stop()
    job = cluster.submit(script, env={"MPIPS_EPOCHS": "1"}, args=["-N", "3"], cwd=tmp_path)
    assert cluster.wait(job, timeout=60) == "COMPLETED", cluster.describe(job)
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.netns import Network

SBIN_PATHS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
TERMINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
}
CPUS = 8  # more than the machine has: tests oversubscribe on purpose

CONF = """\
ClusterName=mpipstest
SlurmctldHost={controller}({controller_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# A requeued job may start again cred_expire + 1 s later (default 120 s).
AuthInfo=cred_expire=5
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
# Private TmpFS and job ids of their own: Slurm's pmix plugin names its
# directory TmpFS/spmix_appdir_UID_JOB.STEP, so two test clusters on one
# machine (job 2 in both) broke each other's `srun --mpi=pmix`; on nodes in
# namespaces each node mounts a directory of its own there (start()).
TmpFS={d}/tmp
FirstJobId={first_job_id}
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
ReturnToService=2
# a node that stops answering is down after this long (Slurm requeues its jobs)
SlurmdTimeout={slurmd_timeout}
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=5
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
NODE = "NodeName={name} NodeAddr={address} CPUs={cpus} RealMemory=8000 State=UNKNOWN"


def _which(name: str) -> str | None:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SBIN_PATHS)
    return shutil.which(name, path=path)


def _free_ports(n: int) -> list[int]:
    # Hold all sockets open until every port is chosen so they differ.
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    # If pytest is killed outright, the daemons get SIGTERM instead of lingering.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and cannot be (a test skips)."""


def install_slurm() -> None:
    """apt-get install Debian's Slurm if it is missing; SlurmUnavailable
    when that is impossible, RuntimeError when it failed."""
    if _which("slurmctld") and _which("slurmd") and _which("sbatch"):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable("Slurm is not installed and we are not root, so "
                               "`apt-get install slurm-wlm` is impossible")
    if not shutil.which("apt-get"):
        raise SlurmUnavailable("Slurm is not installed and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock = ["-o", "DPkg::Lock::Timeout=300"]  # other agents may hold the lock
    for cmd in (["apt-get", *lock, "update"],
                # libpmix-dev: Slurm's mpi/pmix plugin dlopens pmix2/lib/libpmix.so,
                # which only the -dev package has; without it `srun --mpi=pmix` fails.
                ["apt-get", *lock, "install", "-y", "--no-install-recommends",
                 "slurm-wlm", "munge", "libpmix-dev"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    if not _which("slurmctld"):
        raise RuntimeError("apt-get installed slurm-wlm but slurmctld is not on PATH or in /usr/sbin")


def slurm_installed() -> None:
    """install_slurm(), as a test's skip or failure."""
    import pytest

    try:
        install_slurm()
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@dataclass(frozen=True)
class SlurmNode:
    name: str       # NodeName, the host name its slurmd sees
    address: str


class SlurmCluster:
    """A Slurm cluster: its configuration, daemons and helpers. `network`:
    the namespaces its nodes are (None: one node, this host)."""

    def __init__(self, root: Path, nodes: list[SlurmNode], *, network: Network | None = None,
                 controller: SlurmNode | None = None, cpus: int = CPUS, die_with_parent: bool = True,
                 slurmd_timeout: int = 300):
        self.root = root.resolve()
        self.nodes = nodes
        self.network = network
        self.controller = controller or SlurmNode(nodes[0].name, nodes[0].address)
        self.cpus = cpus
        self.die_with_parent = die_with_parent
        self.slurmd_timeout = slurmd_timeout   # seconds (Slurm's default: 300)
        self.conf = self.root / "slurm.conf"
        self.log_dir = self.root / "log"
        self.procs: dict[str, subprocess.Popen] = {}
        self.submitted: list[str] = []
        path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SBIN_PATHS)
        #: environment for every Slurm command (and what jobs inherit)
        self.env = {"SLURM_CONF": str(self.conf), "PATH": path}

    @classmethod
    def on(cls, network: Network, **kwargs) -> "SlurmCluster":
        """A slurmd on each node of `network`, slurmctld on this host at its gateway."""
        here = os.uname().nodename.split(".")[0]
        return cls(network.root, [SlurmNode(n.name, n.address) for n in network.nodes], network=network,
                   controller=SlurmNode(here, network.gateway), **kwargs)

    @property
    def node(self) -> str:
        """The first node's name (the only one of a one-node cluster)."""
        return self.nodes[0].name

    @property
    def node_list(self) -> str:
        return ",".join(n.name for n in self.nodes)

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        for sub in ("state", "spool", "run", "log", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, slurmd_port = _free_ports(2)
        nodes = "\n".join(NODE.format(name=n.name, address=n.address, cpus=self.cpus) for n in self.nodes)
        self.conf.write_text(CONF.format(controller=self.controller.name,
                                         controller_address=self.controller.address,
                                         d=self.root, nodes=nodes, node_list=self.node_list,
                                         slurmd_timeout=self.slurmd_timeout,
                                         ctld_port=ctld_port, slurmd_port=slurmd_port,
                                         first_job_id=ctld_port * 1000))
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        for node in self.nodes:
            self.start_slurmd(node)
        self.wait_idle([n.name for n in self.nodes], timeout)

    def start_slurmd(self, node: SlurmNode) -> None:
        """The node's slurmd: at start, and again on a node that was lost and
        booted again (netns.Network.boot)."""
        slurmd = [_which("slurmd"), "-D", "-f", str(self.conf), "-N", node.name]
        if self.network is None:
            self._spawn(f"slurmd-{node.name}", slurmd)
            return
        # the node's own TmpFS (see CONF), on its mount namespace
        own_tmp = self.root / "tmp" / node.name
        own_tmp.mkdir(exist_ok=True)
        self._spawn(f"slurmd-{node.name}", [
            *self.network.enter(self.network.node(node.name), self.root), "sh", "-c",
            f'mount --bind {own_tmp} {self.root / "tmp"} && exec "$@"', "slurmd", *slurmd])

    def wait_idle(self, nodes: list[str], timeout: float = 30.0) -> None:
        """Until sinfo says each of `nodes` is idle (RuntimeError after `timeout`)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None and name.removeprefix("slurmd-") in [*nodes, "slurmctld"]:
                    raise RuntimeError(f"{name} exited with status {p.returncode} at start\n"
                                       + self.logs())
            r = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in nodes):
                return
            time.sleep(0.1)
        raise RuntimeError(f"nodes not idle after {timeout:.0f} s (sinfo says {states})\n" + self.logs())

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.log_dir / f"{name}.stderr", "wb")
        # cwd = our directory: slurmstepd inherits it, which is how stop() tells
        # this cluster's step daemons from another cluster's.
        self.procs[name] = subprocess.Popen(argv, env=self._env(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.root,
                                            preexec_fn=_die_with_parent if self.die_with_parent else None,
                                            start_new_session=not self.die_with_parent)
        out.close()

    def stop(self) -> None:
        # Jobs first: slurmstepd outlives slurmd by design, so end them through Slurm.
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", str(os.getuid()), check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r = self.run("squeue", "-h", "-o", "%i", check=False)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.2)
        for name in sorted(self.procs, key=lambda name: name == "slurmctld"):   # slurmctld last
            p = self.procs[name]
            if p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        # A step daemon of a job that would not end (it blocks SIGTERM).
        deadline = time.monotonic() + 5
        while (left := self.step_daemons()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def step_daemons(self) -> list[int]:
        """PIDs of the slurmstepd processes of this cluster (by their cwd)."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if ((d / "comm").read_text().strip() == "slurmstepd"
                        and os.readlink(d / "cwd") == str(self.root)):
                    pids.append(int(d.name))
            except OSError:
                continue
        return pids

    # -- helpers ---------------------------------------------------------------
    def _env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env.update(self.env)
        if extra:
            env.update({k: str(v) for k, v in extra.items()})
        return env

    def run(self, *cmd: str, env: dict | None = None, check: bool = True,
            cwd: str | os.PathLike | None = None, timeout: float = 30):
        """Run a Slurm command against this cluster; returns CompletedProcess."""
        r = subprocess.run(list(cmd), env=self._env(env), cwd=cwd, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): "
                               f"{r.stderr.strip() or r.stdout.strip()}")
        return r

    def submit(self, script: str | os.PathLike, env: dict | None = None,
               args: list[str] | tuple = (), cwd: str | os.PathLike | None = None) -> str:
        """sbatch SCRIPT with extra sbatch ARGS; returns the job id.

        The job inherits os.environ + self.env + ENV (sbatch --export=ALL).
        CWD is the submit directory (SLURM_SUBMIT_DIR; relative --output).
        """
        r = self.run("sbatch", "--parsable", *args, str(script), env=env, cwd=cwd)
        job = r.stdout.strip().split(";")[0]
        self.submitted.append(job)
        return job

    def job_info(self, job: str) -> dict[str, str]:
        """`scontrol show job` as a dict ({} once the job is forgotten)."""
        r = self.run("scontrol", "show", "job", "-o", str(job), check=False)
        info = {}
        for tok in r.stdout.split():
            k, sep, v = tok.partition("=")
            if sep and k not in info:
                info[k] = v
        return info

    def wait(self, job: str, timeout: float = 120.0, poll: float = 0.2) -> str:
        """Poll until JOB reaches a final state and return it (e.g. COMPLETED).

        On timeout the job is cancelled and TimeoutError says what it was doing.
        """
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_info(job).get("JobState", "")
            if state in TERMINAL_STATES:
                return state
            time.sleep(poll)
        self.run("scancel", str(job), check=False)
        raise TimeoutError(f"job {job} still {state or 'unknown'} after {timeout:.0f} s\n"
                           + self.describe(job))

    def describe(self, job: str) -> str:
        """The job's record, its output file and the daemon logs, for failures."""
        info = self.job_info(job)
        parts = [f"job {job}: " + " ".join(f"{k}={info.get(k)}" for k in
                                          ("JobState", "Reason", "ExitCode", "StdOut"))]
        out = info.get("StdOut")
        if out and os.path.exists(out):
            parts.append(f"--- {out} (tail)\n" + Path(out).read_text(errors="replace")[-4000:])
        parts.append(self.logs(lines=30))
        return "\n".join(parts)

    def logs(self, lines: int = 60) -> str:
        text = []
        for f in sorted(self.log_dir.glob("*")):
            body = f.read_text(errors="replace").splitlines()[-lines:]
            text.append(f"--- {f}\n" + "\n".join(body))
        return "\n".join(text)

    def srun_mpi_plugins(self) -> list[str]:
        """What `srun --mpi=list` offers (none, pmi2, pmix...)."""
        r = self.run("srun", "--mpi=list", check=False)
        words = (r.stdout + r.stderr).replace(":", " ").split()
        return [w for w in words if w in ("none", "pmi2", "cray_shasta")
                or w.startswith("pmix")]


def wait_for_line(slurm, job: str, text: str, timeout: float = 180) -> None:
    """Until the job's output file holds `text`."""
    deadline = time.monotonic() + timeout
    while True:
        out = slurm.job_info(job).get("StdOut")
        if out and Path(out).exists() and text in Path(out).read_text(errors="replace"):
            return
        assert time.monotonic() < deadline, f"no {text!r} in the output\n" + slurm.describe(job)
        time.sleep(0.2)
