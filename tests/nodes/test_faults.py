"""What a cluster does to a job that one node cannot (conftest.py's
cluster): a node lost mid-run, a link down with every process alive, a
scancel and a preemption of a job across nodes, a node whose link is ten
times slower. BSP's final parameters are checked against an uninterrupted
run's (`mpips simulate`, which gives BSP's parameters bit for bit:
tests/mpi/test_simulated_vs_mpi.py)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from mpips.cli import main
from mpips.io.log import RunLog
from tests.oracles import assert_each_sample_once

REPO = Path(__file__).resolve().parents[2]
BSP = REPO / "jobs" / "bsp.slurm"
LBBSP = REPO / "jobs" / "lbbsp.slurm"
STALL = 60   # seconds: MPIPS_STALL_TIMEOUT of these jobs
# BSP, 1 server + 4 workers, 6 epochs of the digits MLP at 20 ms an iteration: long
# enough to be cut after a checkpoint (one every 2 s) and before the end
LONG = {"MPIPS_EPOCHS": "6", "MPIPS_DEVICE_TIME": "20ms", "MPIPS_CHECKPOINT_EVERY": "2",
        "MPIPS_STALL_TIMEOUT": str(STALL)}


def output(cluster, job: str) -> str:
    path = cluster.job_info(job).get("StdOut")
    return Path(path).read_text(errors="replace").replace("\0", "") if path and Path(path).exists() else ""


def wait_until(what: str, ready, timeout: float, describe=lambda: "") -> float:
    """Seconds until ready() (polled every 0.2 s); fails naming `what` after `timeout`."""
    start = time.monotonic()
    while not ready():
        assert time.monotonic() - start < timeout, f"no {what} within {timeout:.0f} s\n{describe()}"
        time.sleep(0.2)
    return time.monotonic() - start


def uninterrupted(tmp_path, settings: dict) -> np.ndarray:
    """The final parameters of the same BSP run never stopped (the simulator's)."""
    flags = ["--epochs", settings["MPIPS_EPOCHS"], "--device-time", settings["MPIPS_DEVICE_TIME"]]
    assert main(["simulate", "--paradigm", "bsp", "--workers", "4", *flags, "--run-dir", str(tmp_path / "sim")]) == 0
    return RunLog(str(tmp_path / "sim")).final_params()


def job_nodes(cluster, job: str) -> list[str]:
    nodes = cluster.job_info(job).get("NodeList", "")
    return cluster.run("scontrol", "show", "hostnames", nodes).stdout.split() if nodes else []


@pytest.fixture
def reboot(cluster):
    """reboot(node): the test is going to lose the node; at its end the node
    is rebooted as an administrator would (whatever is left on it killed,
    its link up, its keeper and slurmd started again: slurmd registers, and
    Slurm, ReturnToService=2, has it idle again)."""
    lost: list[str] = []
    yield lost.append
    for name in lost:
        node = cluster.network.node(name)
        cluster.network.kill(node)
        cluster.network.link_up(node)
        cluster.network.boot(node)
        cluster.start_slurmd(next(n for n in cluster.nodes if n.name == name))
    if lost:
        cluster.wait_idle(lost, timeout=120)


def test_a_node_lost_mid_run_is_named_requeued_and_resumed_elsewhere(cluster, tmp_path, reboot):
    """Every process of one node killed (the node is lost) after a
    checkpoint: the training ends at once, the job names the node and the
    ranks it ran, waits for Slurm to requeue it (the node misses
    SlurmdTimeout), and the next start resumes from the checkpoint on the
    two nodes left: the parameters of a run never stopped, bit for bit, and
    every sample once."""
    run = tmp_path / "run"
    job = cluster.submit(BSP, env={**LONG, "MPIPS_RUN_DIR": run}, args=["-N", "2", "-n", "5"], cwd=tmp_path)
    wait_until("checkpoint", lambda: any((run / "checkpoints").glob("ckpt-*.h5")), 300,
               lambda: cluster.describe(job))
    first = job_nodes(cluster, job)
    batch_host = cluster.job_info(job)["BatchHost"]
    victim = next(n for n in first if n != batch_host)   # the batch script's node lives on to say it
    assert RunLog(str(run)).by_node().get(victim), "no rank on the node to be lost"
    reboot(victim)
    cluster.network.kill(cluster.network.node(victim))
    seconds = wait_until("lost node named", lambda: f"node(s) lost (no step starts there): {victim}"
                         in output(cluster, job), STALL + 60, lambda: cluster.describe(job))
    # its ranks follow from run.h5 (a Python started by the job script: seconds under load)
    wait_until("lost node's ranks named", lambda: f"ranks on {victim}: " in output(cluster, job), 60,
               lambda: cluster.describe(job))
    out = output(cluster, job)
    assert f"ranks on {victim}: " in out and "worker" in out.split(f"ranks on {victim}: ")[1].split("\n")[0], out
    assert seconds < STALL, f"the job took {seconds:.0f} s to name the lost node"
    assert cluster.wait(job, timeout=600) == "COMPLETED", cluster.describe(job)
    assert int(cluster.job_info(job)["Restarts"]) >= 1, cluster.describe(job)
    log = RunLog(str(run))
    assert log.status == "finished" and log.segments >= 2, (log.status, log.segments)
    assert victim not in {p["host"] for p in log.placement}, log.placement   # resumed elsewhere
    np.testing.assert_array_equal(log.final_params(), uninterrupted(tmp_path, LONG))
    assert_each_sample_once(log)
    assert log.redone["iterations"] == 0


def test_a_link_down_with_every_process_alive_is_named_and_the_logs_kept(cluster, tmp_path, reboot):
    """One node's link set down (both ends) with its processes alive, a BSP
    job across the three nodes: no process dies and MPI sees nothing, so the
    wait of a rank that needs the cut-off worker names it (rank and host)
    within the stall timeout and ends the job, which ends (Slurm's NODE_FAIL
    when it marks the node down first, else FAILED with exit status 1;
    requeueing is off here) rather than hanging; every rank's log on the
    nodes still up is readable and holds what it logged before the end
    (each worker's iterations in order, at least as many as the rounds
    the server applied)."""
    stall = 30   # less than the cluster's SlurmdTimeout: the job names the node before Slurm does
    run = tmp_path / "run"
    # mpirun's own keepalives (jobs/common.sh: about 40 s) would end the job too, without naming the
    # rank: made longer here than the stall timeout and the time the assertion below allows it
    env = {**LONG, "MPIPS_STALL_TIMEOUT": str(stall), "MPIPS_RUN_DIR": run, "MPIPS_REQUEUE": "0",
           "PRTE_MCA_oob_tcp_keepalive_time": str(stall + 30)}
    job = cluster.submit(BSP, env=env, args=["-N", "3", "-n", "5", "--no-requeue"], cwd=tmp_path)
    wait_until("second epoch", lambda: "mpips: epoch  1" in output(cluster, job), 300, lambda: cluster.describe(job))
    by_node = RunLog(str(run)).by_node()
    victim = next(host for host, ranks in by_node.items() if all(r["role"] == "worker" for r in ranks))
    cut_off = {r["rank"] for r in by_node[victim]}
    reboot(victim)
    cluster.network.link_down(cluster.network.node(victim))
    named = re.compile(rf"stalled \d+s \(stall_timeout\); waiting for .*= rank ({'|'.join(map(str, cut_off))}) "
                       rf"on {victim}\b")
    seconds = wait_until("stall naming the node", lambda: named.search(output(cluster, job)), stall + 120,
                         lambda: cluster.describe(job))
    assert seconds < stall + 30, f"named after {seconds:.0f} s"   # the stall timeout, and the polls around it
    state = cluster.wait(job, timeout=300)
    assert state == "NODE_FAIL" or (state, cluster.job_info(job)["ExitCode"]) == ("FAILED", "1:0"), \
        cluster.describe(job)
    # the cut-off node's processes see their peers gone once it is back (or are ended with it)
    cluster.network.link_up(cluster.network.node(victim))
    log = RunLog(str(run))
    up = {r["rank"] for host, ranks in by_node.items() if host != victim for r in ranks}
    assert not [p for p in log.problems if any(f"rank-{r}." in p for r in up)], log.problems
    steps = int(log.applies["step"].max())
    it = log.iterations
    for r in up:
        role = log.placement[r]
        if role["role"] != "worker":
            continue
        mine = np.sort(it["iteration"][it["worker"] == role["index"]])
        assert mine.tolist() == list(range(len(mine))), f"worker {role['index']}: iterations missing"
        assert len(mine) >= steps, f"worker {role['index']} logged {len(mine)} iterations, the server applied {steps} rounds"


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory) -> np.ndarray:
    return uninterrupted(tmp_path_factory.mktemp("reference"), LONG)


def test_a_preempted_job_across_nodes_checkpoints_once_and_resumes(cluster, tmp_path, never_stopped):
    """USR1 to the batch shell of a job on 3 nodes (what --signal=B:USR1@T
    sends): one checkpoint, exit 3, the job requeued, and resumed from it
    to the end: the parameters of a run never stopped, every sample once."""
    run = tmp_path / "run"
    settings = {k: v for k, v in LONG.items() if k != "MPIPS_CHECKPOINT_EVERY"}
    job = cluster.submit(BSP, env={**settings, "MPIPS_RUN_DIR": run}, args=["-N", "3", "-n", "5"], cwd=tmp_path)
    wait_until("first epoch", lambda: "mpips: epoch  1" in output(cluster, job), 300, lambda: cluster.describe(job))
    cluster.run("scancel", "--batch", "--signal=USR1", job)
    assert cluster.wait(job, timeout=600) == "COMPLETED", cluster.describe(job)
    assert cluster.job_info(job)["Restarts"] == "1", cluster.describe(job)
    out = output(cluster, job)
    assert "(preemption)" in out and "exiting with status 3" in out and "resuming from" in out, out
    log = RunLog(str(run))
    assert log.status == "finished" and log.segments == 2
    assert [e["reason"] for e in log.events("checkpoint")] == ["preemption"]
    assert len({p["host"] for p in log.placement}) == 3
    np.testing.assert_array_equal(log.final_params(), never_stopped)
    assert_each_sample_once(log)


def test_scancel_of_a_job_across_nodes_checkpoints_and_the_same_job_again_resumes(cluster, tmp_path, never_stopped):
    """`scancel` (TERM to every process of the job, on every node): the
    ranks checkpoint, the job is not requeued; the same job submitted again
    resumes from the checkpoint to the parameters of a run never stopped."""
    run = tmp_path / "run"
    settings = {**{k: v for k, v in LONG.items() if k != "MPIPS_CHECKPOINT_EVERY"}, "MPIPS_RUN_DIR": run}
    job = cluster.submit(BSP, env=settings, args=["-N", "3", "-n", "5"], cwd=tmp_path)
    wait_until("first epoch", lambda: "mpips: epoch  1" in output(cluster, job), 300, lambda: cluster.describe(job))
    cluster.run("scancel", job)
    assert cluster.wait(job, timeout=300) == "CANCELLED", cluster.describe(job)
    out = output(cluster, job)
    assert "requeueing" not in out and cluster.job_info(job)["Restarts"] == "0", out
    if not list((run / "checkpoints").glob("ckpt-*.h5")):   # (as on one node: the ranks may end before theirs)
        assert "stopped by SIGTERM without a checkpoint" in out, out
        pytest.skip("the ranks ended before their checkpoint (the launcher, signalled too, ended them)")
    assert "stopped by SIGTERM after a checkpoint" in out, out
    again = cluster.submit(BSP, env=settings, args=["-N", "3", "-n", "5"], cwd=tmp_path)
    assert cluster.wait(again, timeout=600) == "COMPLETED", cluster.describe(again)
    assert "resuming from" in output(cluster, again)
    log = RunLog(str(run))
    assert log.status == "finished" and log.segments == 2
    np.testing.assert_array_equal(log.final_params(), never_stopped)
    assert_each_sample_once(log)


def test_a_node_with_a_ten_times_slower_link(cluster, tmp_path, shaped):
    """Every link at 100 Mbit/s but one node's at 10: the job finishes, and
    its log shows the slow node's pulls and pushes longer than those of the
    workers on the other node the server is not on (69 KB each way an
    iteration: 55 ms at 10 Mbit/s, 5.5 at 100). LB-BSP with
    --lbbsp-transfer gives the slow node's workers fewer samples than the
    other remote node's, as it does a slower worker."""
    nodes = [n.name for n in cluster.nodes]
    slow = nodes[-1]   # Slurm fills the first node first: the server's is nodes[0]
    shaped({**{n: "100mbit" for n in nodes}, slow: "10mbit"})
    run = tmp_path / "run"
    job = cluster.submit(BSP, env={"MPIPS_EPOCHS": "2", "MPIPS_RUN_DIR": run}, args=["-N", "3", "-n", "5"],
                         cwd=tmp_path)
    assert cluster.wait(job, timeout=600) == "COMPLETED", cluster.describe(job)
    log = RunLog(str(run))
    by_node = log.by_node()
    assert by_node[nodes[0]][0]["role"] == "server" and all(r["role"] == "worker" for r in by_node[slow]), by_node
    it = log.iterations

    def transfer(node: str) -> float:   # median pull + push of the node's workers, seconds
        workers = [r["index"] for r in by_node[node] if r["role"] == "worker"]
        rows = it[np.isin(it["worker"], workers)]
        return float(np.median(rows["pull"] + rows["push"]))

    other = next(n for n in nodes[1:] if n != slow)
    assert transfer(slow) > 2 * transfer(other), (transfer(slow), transfer(other))

    # An emulated device of 40 ms a batch of 16: compute (2.5 ms a sample) to balance against
    # transfers of about 11 ms an iteration at 100 Mbit/s and 110 at 10 (a digits MLP's own
    # compute, about 1 ms a batch, would leave every remote worker at the floor of one sample).
    run = tmp_path / "lbbsp"
    job = cluster.submit(LBBSP, env={"MPIPS_EPOCHS": "2", "MPIPS_RUN_DIR": run,
                                     "MPIPS_ARGS": "--lbbsp-transfer --device-time 40ms"},
                         args=["-N", "3", "-n", "5"], cwd=tmp_path)
    assert cluster.wait(job, timeout=600) == "COMPLETED", cluster.describe(job)
    log = RunLog(str(run))
    by_node, it = log.by_node(), log.iterations
    later = it[it["clock"] >= 2]    # round 0 is even, round 1 rests on one measurement

    def batch(node: str) -> float:   # median batch of the node's workers
        workers = [r["index"] for r in by_node[node] if r["role"] == "worker"]
        return float(np.median(later[np.isin(later["worker"], workers)]["batch"]))

    assert batch(slow) < batch(other) / 2, (batch(slow), batch(other))
    rounds = np.bincount(it["clock"], weights=it["batch"])[:-1]   # the last: what the budget had left
    assert (rounds == 4 * int(log.config["batch_size"])).all(), rounds
