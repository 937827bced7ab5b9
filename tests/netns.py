"""Nodes of a cluster on one machine: Linux network namespaces on a bridge.

    net = Network.create(3)               # root only; net.remove() at the end
    node = net.nodes[0]                   # node.name 'mpips0n1', node.address '10.213.0.2'
    subprocess.run([*net.enter(node), "hostname"])      # runs on the node: 'mpips0n1'
    net.link_down(node); net.shape(node, "100mbit"); net.kill(node)

A node is a network namespace named after it (a loopback and an `eth0`
whose peer, `port`, is on the cluster's bridge), an address on the
cluster's subnet, and a keeper process that holds the node's host name (a
UTS namespace), its mounts (a mount namespace: /etc/netns/NODE/hosts over
/etc/hosts, naming every node; a /dev/shm of its own) and its System V
shared memory (an IPC namespace): `enter` joins the keeper's namespaces,
so whatever runs on a node sees one host. Without the last two, MPICH's
UCX took the nodes for one host and moved their data through shared
memory (its log: `intra-node ... rma(sysv/memory posix/memory)`), so a
job "across nodes" never touched the network. Not
`ip netns exec`: it mounts a fresh /sys, which hides this machine's
cgroup v1 mounts that slurmd needs. Every other file is shared, as NFS or
Lustre is on a cluster. The bridge's address (`gateway`) is this machine
as the nodes see it.

Names: a cluster is `PREFIX` + a number (`mpips0`); its nodes are
`mpips0n1`..., its bridge `mpips0br`, the ports `mpips0v1`..., its
directory STATE/mpips0 (its Slurm's files too). Namespaces and links
outlive the processes that made them, so a cluster records its owner (a
process whose life is the cluster's: pytest's, or slurmctld's under `make
cluster-up`); a set-up first removes every cluster of its prefix whose
owner is gone (a crashed run of its own), then takes the first free
number. Nothing without the prefix is touched. `MPIPS_CLUSTER_PREFIX`
(default `mpips`) and `MPIPS_CLUSTER_SUBNET` (an IPv4 subnet such as
10.213.7.0/24; default the first 10.213.K.0/24 that no address or route
here overlaps) keep two users' clusters apart.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

STATE = Path(os.environ.get("MPIPS_CLUSTER_STATE", "/tmp/mpips-clusters"))
NETNS_DIR = Path("/var/run/netns")
HOSTS_DIR = Path("/etc/netns")
PREFIX_ENV, SUBNET_ENV = "MPIPS_CLUSTER_PREFIX", "MPIPS_CLUSTER_SUBNET"
DEFAULT_PREFIX = "mpips"
MAX_CLUSTERS = 100
IFNAMSIZ = 15   # a link's name is at most 15 characters


class NetworkError(RuntimeError):
    """Namespaces cannot be made here (not root, no `ip`), or a command failed."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode:
        raise NetworkError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("ip", *args, check=check)


def prefix() -> str:
    value = os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)
    if not re.fullmatch(r"[a-z]{1,8}", value):
        raise NetworkError(f"{PREFIX_ENV}={value!r}: 1 to 8 lower-case letters (a cluster's name is "
                           f"the prefix and a number; a link's at most {IFNAMSIZ} characters)")
    return value


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


@dataclass(frozen=True)
class Node:
    name: str       # its namespace's name and its host name
    address: str
    port: str       # the bridge's end of its link


@dataclass
class Network:
    name: str
    subnet: ipaddress.IPv4Network
    nodes: list[Node]

    @property
    def bridge(self) -> str:
        return f"{self.name}br"

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def root(self) -> Path:
        """The cluster's directory (its state, its Slurm's files)."""
        return STATE / self.name

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # -- making and removing ---------------------------------------------------
    @classmethod
    def create(cls, count: int) -> "Network":
        """`count` nodes on a bridge, owned by this process (`set_owner`)."""
        if os.geteuid() != 0:
            raise NetworkError("network namespaces need root")
        for tool in ("ip", "nsenter", "unshare"):
            if not shutil.which(tool):
                raise NetworkError(f"`{tool}` is not installed")
        pre = prefix()
        with _state_lock():
            remove_leftovers(pre)
            taken = clusters(pre)
            for number in range(MAX_CLUSTERS):
                name = f"{pre}{number}"
                subnet = None if name in taken else _free_subnet(number)
                if subnet is not None:
                    break
            else:
                raise NetworkError(f"no free cluster name {pre}0..{pre}{MAX_CLUSTERS - 1} with a free subnet")
            (STATE / name).mkdir()
            net = cls(name, subnet, [])
            net.set_owner(os.getpid())
        try:
            net._build(count)
        except BaseException:
            net.remove()
            raise
        return net

    def _build(self, count: int) -> None:
        if count + 2 > self.subnet.num_addresses:
            raise NetworkError(f"{count} nodes do not fit in {self.subnet} beside its gateway")
        addresses = self.subnet.hosts()
        next(addresses)   # the gateway's
        self.nodes = [Node(f"{self.name}n{i}", str(next(addresses)), f"{self.name}v{i}")
                      for i in range(1, count + 1)]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        here = os.uname().nodename.split(".")[0]
        hosts = "127.0.0.1 localhost\n" + "".join(f"{n.address} {n.name}\n" for n in self.nodes) \
            + f"{self.gateway} {here}\n"
        for n in self.nodes:
            _ip("netns", "add", n.name)
            _ip("link", "add", n.port, "type", "veth", "peer", "name", "eth0", "netns", n.name)
            _ip("link", "set", n.port, "master", self.bridge, "up")
            _ip("-n", n.name, "addr", "add", f"{n.address}/{self.subnet.prefixlen}", "dev", "eth0")
            _ip("-n", n.name, "link", "set", "eth0", "up")
            _ip("-n", n.name, "link", "set", "lo", "up")
            (HOSTS_DIR / n.name).mkdir(parents=True, exist_ok=True)
            (HOSTS_DIR / n.name / "hosts").write_text(hosts)
            self.boot(n)
        self._write_agent()

    @property
    def agent(self) -> Path:
        """A program that runs a command on a node as `ssh [OPTIONS] NODE
        COMMAND` would, for launchers without Slurm: Open MPI's `mpirun
        --prtemca plm_ssh_agent AGENT --host ...`, MPICH's `mpiexec
        -launcher ssh -launcher-exec AGENT -hosts ...`."""
        return self.root / "bin" / "on-node"

    def _write_agent(self) -> None:
        self.agent.parent.mkdir(exist_ok=True)
        self.agent.write_text(f"""#!/bin/sh
# ssh [OPTIONS] NODE COMMAND... for the nodes of cluster {self.name} (tests/netns.py)
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
node="$1"; shift
keeper="$(cat "{self.root}/$node.keeper" 2>/dev/null)" || {{ echo "on-node: no node $node in cluster {self.name}" >&2; exit 255; }}
exec nsenter -t "$keeper" --net --uts --mount --ipc --wd="$PWD" sh -c "$*"
""")
        self.agent.chmod(0o755)

    def boot(self, node: Node) -> None:
        """Start the node's keeper (its host name and mounts): at creation, and
        again after `kill` (the node reboots; its namespace and link stay)."""
        ready = self.root / f"{node.name}.keeper"
        ready.unlink(missing_ok=True)
        setup = (f"hostname {node.name} && mount --bind {HOSTS_DIR / node.name / 'hosts'} /etc/hosts"
                 f" && mount -t tmpfs -o size=2g tmpfs /dev/shm && echo $$ > {ready}.tmp"
                 f" && mv {ready}.tmp {ready} && exec sleep infinity")
        subprocess.Popen(["nsenter", f"--net={NETNS_DIR / node.name}", "unshare", "--uts", "--mount", "--ipc",
                          "sh", "-c", setup], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while not ready.exists():
            if time.monotonic() > deadline:
                raise NetworkError(f"node {node.name}: its keeper did not start (host name, mounts)")
            time.sleep(0.01)

    def keeper(self, node: Node) -> int:
        """The PID holding the node's namespaces."""
        return int((self.root / f"{node.name}.keeper").read_text())

    def set_owner(self, pid: int) -> None:
        """The process whose life is the cluster's: once it is gone, the next
        set-up of this prefix removes what is left."""
        (self.root / "owner").write_text(f"{pid} {_started(pid)}\n")

    def remove(self) -> None:
        """Every process on the nodes and of the cluster's directory killed,
        then the namespaces, links, host files and the directory."""
        remove_cluster(self.name)

    # -- running on a node -----------------------------------------------------
    def enter(self, node: Node, cwd: str | os.PathLike | None = None) -> list[str]:
        """An argv prefix that runs a command on the node, in `cwd` (the
        caller's working directory by default)."""
        return ["nsenter", "-t", str(self.keeper(node)), "--net", "--uts", "--mount", "--ipc",
                f"--wd={cwd or os.getcwd()}"]

    def pids(self, node: Node) -> list[int]:
        """The processes on the node (in its network namespace)."""
        return [int(p) for p in _ip("netns", "pids", node.name, check=False).stdout.split()]

    def kill(self, node: Node) -> list[int]:
        """SIGKILL every process of the node, its keeper too (the node is
        lost), and remove what its MPI daemons left in the shared /tmp; the
        PIDs killed."""
        killed = _kill_all(lambda: self.pids(node))
        for d in session_dirs(re.escape(node.name)):
            shutil.rmtree(d, ignore_errors=True)
        return killed

    # -- its link ----------------------------------------------------------------
    def link_down(self, node: Node) -> None:
        """The node's cable pulled: both ends down, every process alive."""
        _ip("link", "set", node.port, "down")
        _ip("-n", node.name, "link", "set", "eth0", "down")

    def link_up(self, node: Node) -> None:
        _ip("link", "set", node.port, "up")
        _ip("-n", node.name, "link", "set", "eth0", "up")

    def shape(self, node: Node, rate: str | None) -> None:
        """The node's link limited to `rate` (tc's units: 10gbit, 100mbit) in
        both directions, by a token bucket on each end; None: unshaped. The
        bucket holds 1 ms of the rate (at least 4 KB): a transfer of 69 KB
        takes its bytes/rate, not a burst at the bridge's speed."""
        for ns in ([], ["-n", node.name]):
            dev = ["dev", "eth0" if ns else node.port]
            _run("tc", *ns, "qdisc", "del", *dev, "root", check=False)
            if rate is not None:
                burst = max(int(bits_per_second(rate) / 8 / 1000), 4096)
                _run("tc", *ns, "qdisc", "add", *dev, "root", "tbf", "rate", rate,
                     "burst", str(burst), "latency", "100ms")


def bits_per_second(rate: str) -> float:
    """tc's rate ('10gbit', '100mbit', '1kbit', '500bit') in bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise NetworkError(f"rate {rate!r}: a number and bit, kbit, mbit or gbit (tc's units)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


# -- what a prefix made ----------------------------------------------------------

@contextlib.contextmanager
def _state_lock():
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _free_subnet(number: int) -> ipaddress.IPv4Network | None:
    """MPIPS_CLUSTER_SUBNET, or 10.213.NUMBER.0/24; None if the default is in use here."""
    given = os.environ.get(SUBNET_ENV)
    try:
        subnet = ipaddress.IPv4Network(given or f"10.213.{number}.0/24")
    except ValueError as e:
        raise NetworkError(f"{SUBNET_ENV}={given!r}: {e}") from None
    used = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?", used):
        if ipaddress.IPv4Network(word, strict=False).overlaps(subnet):
            if given:
                raise NetworkError(f"{SUBNET_ENV}={given}: overlaps {word}, in use here")
            return None
    return subnet


def _ours(pre: str, listing: str, pattern: str) -> set[str]:
    return set(re.findall(rf"^(?:\d+: )?({re.escape(pre)}\d+{pattern})\b", listing, re.M))


def namespaces(pre: str) -> set[str]:
    return _ours(pre, _ip("netns", "list").stdout, r"n\d+")


def links(pre: str) -> set[str]:
    return _ours(pre, _ip("-o", "link").stdout, r"(?:br|v\d+)")


def host_files(pre: str) -> set[str]:
    names = "\n".join(p.name for p in HOSTS_DIR.glob(f"{pre}*")) if HOSTS_DIR.exists() else ""
    return _ours(pre, names, r"n\d+")


def _cluster_of(name: str, pre: str) -> str:
    return re.match(rf"{re.escape(pre)}\d+", name).group(0)


def clusters(pre: str) -> set[str]:
    """The names of this prefix's clusters that left anything here."""
    dirs = "\n".join(p.name for p in STATE.glob(f"{pre}*")) if STATE.exists() else ""
    found = _ours(pre, dirs, "")
    return found | {_cluster_of(x, pre) for x in namespaces(pre) | links(pre) | host_files(pre)}


def owner_alive(name: str) -> bool:
    try:
        pid, started = (STATE / name / "owner").read_text().split()
        return _started(int(pid)) == float(started)
    except (OSError, ValueError):
        return False


def remove_leftovers(pre: str) -> list[str]:
    """Remove this prefix's clusters whose owner is gone; their names."""
    gone = sorted(name for name in clusters(pre) if not owner_alive(name))
    for name in gone:
        remove_cluster(name)
    for d in leftovers(pre)["session directories"]:   # (of a cluster removed without them)
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _parts(name: str, found: set[str]) -> list[str]:
    return sorted(x for x in found if re.fullmatch(rf"{re.escape(name)}(?:n\d+|br|v\d+)", x))


def processes_of(name: str) -> list[int]:
    """The processes of cluster `name`: on its nodes, or of its directory (a
    daemon's configuration there, a step daemon's working directory)."""
    pre = re.match(r"[a-z]+", name).group(0)
    pids = {int(p) for ns in _parts(name, namespaces(pre))
            for p in _ip("netns", "pids", ns, check=False).stdout.split()}
    root = str(STATE / name)
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cwd, argv = p.info["cwd"] or "", p.info["cmdline"] or ()
        if cwd == root or cwd.startswith(root + "/") or any(root + "/" in a for a in argv):
            pids.add(p.pid)
    pids.discard(os.getpid())
    return sorted(pids)


def session_dirs(node: str) -> dict[Path, str]:
    """Open MPI's session directories (TMP/prted.PID: a daemon's PMIx files,
    named after its host) of the nodes whose names match the regular
    expression `node`, whose daemon is gone; each with its node. The nodes
    share this machine's /tmp, and a daemon killed with its node
    (Network.kill) leaves its directory there."""
    found = {}
    for d in Path(tempfile.gettempdir()).glob("prte*.*"):
        pid = d.suffix[1:]
        if not (d.is_dir() and pid.isdigit()) or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            for f in d.iterdir():
                if m := re.fullmatch(rf"pmix\.({node})\..*", f.name):
                    found[d] = m.group(1)
                    break
    return found


def _alive(pid: int) -> bool:
    """Running (a process just killed stays a zombie until its parent reaps it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_all(find, timeout: float = 10.0) -> list[int]:
    """SIGKILL what find() lists until it lists nothing (a process may
    start another meanwhile); the PIDs killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while (pids := find()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
    return sorted(killed)


def remove_cluster(name: str) -> None:
    pre = re.match(r"[a-z]+", name).group(0)
    _kill_all(lambda: processes_of(name))
    for ns in _parts(name, namespaces(pre)):
        _ip("netns", "del", ns, check=False)    # its eth0 goes with it, and the port
    for link in _parts(name, links(pre)):
        _ip("link", "del", link, check=False)
    for host in _parts(name, host_files(pre)):
        shutil.rmtree(HOSTS_DIR / host, ignore_errors=True)
    for d in session_dirs(rf"{re.escape(name)}n\d+"):
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(STATE / name, ignore_errors=True)


def leftovers(pre: str) -> dict[str, list]:
    """What this prefix's clusters without a live owner left here (the check
    after a suite): empty lists when nothing."""
    dead = sorted(n for n in clusters(pre) if not owner_alive(n))
    return {"clusters": dead,
            "namespaces": [x for n in dead for x in _parts(n, namespaces(pre))],
            "links": [x for n in dead for x in _parts(n, links(pre))],
            "host files": [x for n in dead for x in _parts(n, host_files(pre))],
            "session directories": sorted(str(d) for d, node in session_dirs(rf"{re.escape(pre)}\d+n\d+").items()
                                          if not owner_alive(_cluster_of(node, pre))),
            "processes": [p for n in dead for p in processes_of(n)]}
