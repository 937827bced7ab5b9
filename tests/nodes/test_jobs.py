"""Jobs across the nodes of the test cluster (conftest.py), as a user
submits them: `sbatch -N 3 jobs/<paradigm>.slurm`, Open MPI and MPICH,
mpirun and srun, and `mpirun --host` without Slurm. BSP's final parameters
are the one-node run's bit for bit wherever its ranks run (servers sum the
pushes in the order of their batches, not of their arrival)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpips.analysis.placement import nodes_label
from mpips.experiments.launch import MPI_ENV, MPIEXEC
from mpips.io.log import RunLog
from tests.oracles import assert_each_sample_once
from tests.thresholds import SETUPS

REPO = Path(__file__).resolve().parents[2]
MPICH_VENV = REPO / ".venv-mpich"
# digits, an MLP: 23 BSP rounds of 4 workers; a job that stops progressing ends in
# 2 minutes naming what it waited for, well within its test's wait and timeout
SMALL = {"MPIPS_EPOCHS": "1", "MPIPS_STALL_TIMEOUT": "120"}


def output(cluster, job: str) -> str:
    return Path(cluster.job_info(job)["StdOut"]).read_text(errors="replace").replace("\0", "")


def hosts_of(run_dir) -> list[str]:
    return [p["host"] for p in RunLog(str(run_dir)).placement]


def job_env(setup: str) -> dict[str, str]:
    """A set-up of tests/thresholds.py as its job's environment: --groups 3 ->
    MPIPS_GROUPS=3 (the paradigm is the job script's)."""
    flags = SETUPS[setup].flags
    return {"MPIPS_" + flag[2:].replace("-", "_").upper(): value
            for flag, value in zip(flags[::2], flags[1::2]) if flag != "--paradigm"}


def submit_all(cluster, tmp_path, jobs: dict[str, tuple[str, dict, list[str]]]) -> dict[str, str]:
    """Submit every job at once (the cluster runs them side by side), then
    wait for each: name -> job id, every one COMPLETED."""
    ids = {name: cluster.submit(REPO / "jobs" / f"{script}.slurm", env={**SMALL, **env,
                                "MPIPS_RUN_DIR": tmp_path / name}, args=args, cwd=tmp_path)
           for name, (script, env, args) in jobs.items()}
    for name, job in ids.items():
        assert cluster.wait(job, timeout=600) == "COMPLETED", f"{name}: " + cluster.describe(job)
    return ids


@pytest.fixture(scope="module")
def bsp_one_node(cluster, tmp_path_factory):
    """BSP on one node of the cluster: the reference of every BSP job here."""
    tmp = tmp_path_factory.mktemp("bsp-one")
    submit_all(cluster, tmp, {"one": ("bsp", job_env("nodes-bsp"), ["-N", "1", "-n", "5"])})
    log = RunLog(str(tmp / "one"))
    assert log.status == "finished" and len(set(hosts_of(tmp / "one"))) == 1
    return log


def test_paradigms_across_three_nodes(cluster, tmp_path, bsp_one_node):
    """BSP, SSP, GSSP (a group per node) and Local SGD on 3 nodes under Slurm,
    with what a cluster adds: Open MPI told self,sm (one node's) by the
    environment gets tcp; SSP on MNIST-1D from an empty cache that ranks of
    three hosts fill at once; Local SGD started by srun (Slurm's pmix) instead
    of mpirun."""
    cache = tmp_path / "cache"
    ids = submit_all(cluster, tmp_path, {
        "bsp": ("bsp", {**job_env("nodes-bsp"), "OMPI_MCA_btl": "self,sm"}, ["-N", "3", "-n", "5"]),
        "ssp": ("ssp", {**job_env("nodes-ssp"), "MPIPS_CACHE": cache}, ["-N", "3", "-n", "5"]),
        "gssp": ("gssp", {**job_env("nodes-gssp"), "MPIPS_PLACEMENT": "spread"}, ["-N", "3", "-n", "7"]),
        "localsgd": ("localsgd", {**job_env("nodes-localsgd"), "MPIPS_LAUNCHER": "srun"}, ["-N", "3", "-n", "5"]),
    })
    nodes = {n.name for n in cluster.nodes}
    for name in ids:
        log = RunLog(str(tmp_path / name))
        assert log.status == "finished", (name, log.status_reason)
        assert set(hosts_of(tmp_path / name)) == nodes, (name, log.placement)
        assert log.summary()["final_accuracy"] >= SETUPS[f"nodes-{name}"].threshold, (name, log.summary())
    assert "reaches no other node: using self,sm,tcp" in output(cluster, ids["bsp"])
    assert "launcher: srun --mpi=pmix" in output(cluster, ids["localsgd"]), output(cluster, ids["localsgd"])
    # GSSP's group servers one per node (placement spread)
    gssp = RunLog(str(tmp_path / "gssp")).placement
    assert len({p["host"] for p in gssp if p["role"] == "group_server"}) == 3, gssp
    # the same model as on one node, bit for bit, every sample once
    bsp = RunLog(str(tmp_path / "bsp"))
    np.testing.assert_array_equal(bsp.final_params(), bsp_one_node.final_params())
    assert_each_sample_once(bsp)
    # one cache file, made whole (each rank writes its own copy and renames it over)
    assert [p.name for p in cache.iterdir()] == [f"mnist1d-{_mnist1d_version()}-5000.npz"], list(cache.iterdir())


def test_placement_spreads_the_servers_and_changes_no_result(cluster, tmp_path):
    """BSP with 3 servers, 2 ranks on each node (Slurm's block distribution):
    packed (the launcher's order, the default) puts servers 0 and 1 on the
    first node, spread one on each; the parameters are the same bit for
    bit (a role's index, not its host, decides what it computes)."""
    per_node = ["-N", "3", "-n", "6", "--ntasks-per-node", "2"]
    three = {"MPIPS_SERVERS": "3", "MPIPS_WORKERS": "3"}
    submit_all(cluster, tmp_path, {
        "packed": ("bsp", three, per_node),
        "spread": ("bsp", {**three, "MPIPS_PLACEMENT": "spread"}, per_node)})
    packed, spread = (RunLog(str(tmp_path / name)) for name in ("packed", "spread"))
    assert nodes_label(packed.by_node()) == "3 nodes: 2S, S+W, 2W", packed.placement
    assert nodes_label(spread.by_node()) == "3 nodes: S+W, S+W, S+W", spread.placement
    assert packed.config["placement"] == "packed" and spread.config["placement"] == "spread"
    np.testing.assert_array_equal(spread.final_params(), packed.final_params())


def _mnist1d_version() -> str:
    import importlib.metadata
    return importlib.metadata.version("mnist1d")


@pytest.mark.skipif(not (MPICH_VENV / "bin" / "python").exists(),
                    reason="no .venv-mpich (make test-nodes makes it)")
def test_mpich_across_three_nodes(cluster, tmp_path, bsp_one_node):
    """BSP under MPICH, its ranks on the three nodes (Hydra starts them
    through Slurm): Open MPI's one-node parameters, bit for bit."""
    ids = submit_all(cluster, tmp_path, {"mpich": ("bsp", {"MPIPS_VENV": MPICH_VENV}, ["-N", "3", "-n", "5"])})
    assert "MPI: mpich" in output(cluster, ids["mpich"])
    log = RunLog(str(tmp_path / "mpich"))
    assert set(hosts_of(tmp_path / "mpich")) == {n.name for n in cluster.nodes}
    assert "MPICH" in log.versions["mpi"], log.versions
    np.testing.assert_array_equal(log.final_params(), bsp_one_node.final_params())


def test_mpirun_host_without_slurm(cluster, tmp_path, bsp_one_node):
    """`mpirun --host` (Open MPI's ssh launch through the cluster's stand-in)
    runs the same BSP job across the nodes: the same parameters."""
    net = cluster.network
    run = tmp_path / "run"
    r = subprocess.run([MPIEXEC, "--prtemca", "plm_ssh_agent", str(net.agent),
                        "--host", ",".join(f"{n.name}:2" for n in net.nodes), "--map-by", "node", "-n", "5",
                        sys.executable, "-m", "mpips", "train", "--paradigm", "bsp", "--epochs", "1",
                        "--run-dir", str(run)],
                       capture_output=True, text=True, timeout=600, cwd=REPO,
                       env={**os.environ, **MPI_ENV, "OMPI_MCA_btl": "self,sm,tcp"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "on 3 nodes" in r.stdout, r.stdout
    assert set(hosts_of(run)) == {n.name for n in net.nodes}
    np.testing.assert_array_equal(RunLog(str(run)).final_params(), bsp_one_node.final_params())


LOCAL_RANKS = """\
from mpips.runtime.transport.mpi import MPITransport
t = MPITransport(None, warn=10, timeout=60)
users, mine = t.on_this_node(t.rank % 2 == 1)
print(f"rank {t.rank} host {t.hosts[t.rank]} local {mine} of {len(users)} users {sum(users)}", flush=True)
t.close()
"""


def test_ranks_are_numbered_per_node(cluster, tmp_path):
    """A GPU rank takes its node's GPUs by its place among that node's ranks
    (flatmodel.rank_device): on 3 nodes each node numbers its own ranks from 0."""
    script = tmp_path / "local.py"
    script.write_text(LOCAL_RANKS)
    job = tmp_path / "local.slurm"
    job.write_text(f"#!/bin/bash\nsource {REPO}/jobs/common.sh || exit 1\nmpips_launch 7 python {script}\n")
    ids = cluster.submit(job, env={"MPIPS_ROOT": REPO}, args=["-N", "3", "-n", "7"], cwd=tmp_path)
    assert cluster.wait(ids, timeout=300) == "COMPLETED", cluster.describe(ids)
    rows = re.findall(r"^rank (\d+) host (\S+) local (\d+) of (\d+) users (\d+)$", output(cluster, ids), re.M)
    assert len(rows) == 7, output(cluster, ids)
    by_host: dict[str, list] = {}
    for rank, host, local, count, users in rows:
        by_host.setdefault(host, []).append((int(rank), int(local), int(count), int(users)))
    assert set(by_host) == {n.name for n in cluster.nodes}, by_host
    for host, ranks in by_host.items():
        ranks.sort()
        assert [local for _, local, _, _ in ranks] == list(range(len(ranks))), (host, ranks)
        assert {count for _, _, count, _ in ranks} == {len(ranks)}, (host, ranks)
        assert {users for *_, users in ranks} == {sum(r % 2 == 1 for r, *_ in ranks)}, (host, ranks)


FAKE_MPS = """\
#!/bin/bash
# nvidia-cuda-mps-control as the job sees it, without a GPU: -f makes the
# control pipe and stays until told `quit` on its standard input; it says
# where, on which host
pipe="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" != -f ]; then
    [ "$(cat)" = quit ] && touch "$pipe/quit"
    exit 0
fi
echo "start $(hostname) $pipe" >> "{record}"
touch "$pipe/control"
while [ ! -e "$pipe/quit" ]; do sleep 0.05; done
echo "stop $(hostname)" >> "{record}"
"""
FAKE_SMI = "#!/bin/sh\necho 'GPU 0: a GPU of the test (UUID: GPU-0)'\n"


def test_mps_starts_on_every_node(cluster, tmp_path):
    """MPIPS_MPS=1 on 3 nodes: an MPS daemon on each node for the run, in a
    folder of its own host, each rank pointed at its node's, all stopped at
    the end (nvidia-cuda-mps-control and nvidia-smi are stand-ins here)."""
    bin_dir, record = tmp_path / "bin", tmp_path / "mps.txt"
    bin_dir.mkdir()
    for name, text in (("nvidia-cuda-mps-control", FAKE_MPS.replace("{record}", str(record))),
                       ("nvidia-smi", FAKE_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    job = tmp_path / "mps.slurm"
    job.write_text(f"#!/bin/bash\nsource {REPO}/jobs/common.sh || exit 1\nmpips_start_mps 6\n"
                   "mpips_launch 6 python -c 'import os, socket; "
                   "print(\"rank on\", socket.gethostname(), os.environ[\"CUDA_MPS_PIPE_DIRECTORY\"], flush=True)'\n"
                   "mpips_stop_mps\n")
    env = {"MPIPS_ROOT": REPO, "MPIPS_DEVICE": "cuda", "MPIPS_MPS": "1",
           "PATH": f"{bin_dir}{os.pathsep}{cluster.env['PATH']}"}
    ids = cluster.submit(job, env=env, args=["-N", "3", "-n", "6"], cwd=tmp_path)
    assert cluster.wait(ids, timeout=300) == "COMPLETED", cluster.describe(ids)
    out = output(cluster, ids)
    events = record.read_text().split("\n")
    nodes = sorted(n.name for n in cluster.nodes)
    started = {line.split()[1]: line.split()[2] for line in events if line.startswith("start")}
    assert sorted(started) == nodes, events
    assert all(Path(pipe).parts[-2:] == (host, "pipe") for host, pipe in started.items()), started
    assert sorted(line.split()[1] for line in events if line.startswith("stop")) == nodes, events
    ranks = re.findall(r"^rank on (\S+) (\S+)$", out, re.M)
    assert len(ranks) == 6 and all(started[host] == pipe for host, pipe in ranks), out
    assert "MPS started on 3 nodes" in out and "MPS stopped" in out, out


PROGRESS = """\
import threading
from mpips.runtime.transport.mpi import MPITransport
from mpips.runtime.transport.protocols import LevelSpec
t = MPITransport(None, warn=10, timeout=60)
members = tuple(range(t.size))
t.level([LevelSpec(members, (0, 1), t.size - 2, tuple(range(t.size - 2)))], n=10, sparse=False)
names = [th.name for th in threading.enumerate()]
print(f"rank {t.rank} on {t.hosts[t.rank]} progress {names.count('mpips-progress')}", flush=True)
t.close()
print(f"rank {t.rank} closed, progress {[th.name for th in threading.enumerate()].count('mpips-progress')}", flush=True)
"""


@pytest.mark.parametrize("where", ["nodes", "one node", "turned off"])
def test_servers_keep_mpi_progressing_across_nodes(cluster, tmp_path, where):
    """A job across nodes gives each server (the ranks others reach
    one-sidedly) a progress thread (transport.mpi.ProgressThread), ended
    before its windows go; workers get none, nor does a job on one node
    (osc/sm needs none) or one told MPIPS_PROGRESS_INTERVAL=0."""
    net = cluster.network
    hosts = (",".join(f"{n.name}:2" for n in net.nodes[:2]) if where != "one node" else f"{net.nodes[0].name}:4")
    script = tmp_path / "progress.py"
    script.write_text(PROGRESS)
    env = {**os.environ, **MPI_ENV, "OMPI_MCA_btl": "self,sm,tcp",
           **({"MPIPS_PROGRESS_INTERVAL": "0"} if where == "turned off" else {})}
    r = subprocess.run([MPIEXEC, "--prtemca", "plm_ssh_agent", str(net.agent), "--host", hosts, "--map-by", "node",
                        "-n", "4", sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       cwd=REPO, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    threads = {int(rank): int(n) for rank, n in re.findall(r"^rank (\d) on \S+ progress (\d)$", r.stdout, re.M)}
    expected = {0: 1, 1: 1, 2: 0, 3: 0} if where == "nodes" else {r: 0 for r in range(4)}
    assert threads == expected, r.stdout
    assert len(set(re.findall(r"^rank \d on (\S+)", r.stdout, re.M))) == (1 if where == "one node" else 2)
    assert sorted(re.findall(r"^rank (\d) closed, progress 0$", r.stdout, re.M)) == ["0", "1", "2", "3"], r.stdout
