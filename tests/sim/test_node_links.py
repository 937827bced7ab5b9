"""The simulator's network per node (`--sim-nodes`, mpips/node_links.py):
a worker on a node with a slow link pulls and pushes for the model's time
exactly (virtual time, no jitter), one node is the network without nodes
bit for bit, and several servers' shards take the slowest of their paths."""
from __future__ import annotations

import numpy as np
import pytest

from mpips.cli import main
from mpips.io.log import RunLog
from mpips.node_links import NodeLinks
from mpips.runtime.state import shard_bounds
from mpips.runtime.transport.local import Network
from tests.sim.test_simulator import push_ends

INTRA = (20e-6, 10e9)   # --sim-latency, --sim-bandwidth: within a node


def simulate(run_dir, *flags: str) -> RunLog:
    assert main(["simulate", "--run-dir", str(run_dir), "--eval-every", "100", "--sim-jitter", "0",
                 "--iterations", "4", *flags]) == 0
    return RunLog(str(run_dir))


def test_a_worker_on_a_slow_node_pulls_and_pushes_for_the_slower_links_time(tmp_path):
    nodes = "servers=1,workers=1,latency=1e-4,bandwidth=1e9; workers=1,latency=3e-4,bandwidth=1e8; " \
            "workers=1,latency=5e-5,bandwidth=2e9"
    log = simulate(tmp_path / "run", "--paradigm", "bsp", "--workers", "3", "--sim-nodes", nodes)
    it = log.iterations
    nbytes = int(it["bytes_sent"][0])   # the flat model's float32s, pulled and pushed whole
    expected = {0: INTRA[0] + nbytes / INTRA[1],      # on the server's node: the intra-node path
                1: 3e-4 + nbytes / 1e8,                # its own link is the slower
                2: 1e-4 + nbytes / 1e9}                # the server's node's link is the slower
    for worker, seconds in expected.items():
        mine = it[it["worker"] == worker]
        assert len(mine) == 4
        for column in ("pull", "push"):   # the log's float32 of the virtual clock's difference
            assert mine[column] == pytest.approx(np.full(4, seconds), rel=1e-6), (worker, column)
    hosts = {(p["role"], p["index"]): p["host"] for p in log.placement}
    assert hosts == {("server", 0): "node1", ("worker", 0): "node1", ("worker", 1): "node2",
                     ("worker", 2): "node3"}


def test_one_node_is_the_network_without_nodes_bit_for_bit(tmp_path):
    flags = ("--paradigm", "ssp", "--workers", "3", "--servers", "2", "--slowdown", "1,1,3",
             "--sim-jitter", "1e-4")
    a = simulate(tmp_path / "a", *flags)
    b = simulate(tmp_path / "b", *flags, "--sim-nodes", "servers=2,workers=3,latency=1,bandwidth=1")
    assert np.array_equal(a.final_params(), b.final_params())
    assert a.iterations.tobytes() == b.iterations.tobytes()


def test_shards_on_several_nodes_end_with_the_slowest_path_and_the_own_link_carries_them_all():
    n, servers = 1000, [("server", 0), ("server", 1)]
    bounds = shard_bounds(n, 2)
    nodes = NodeLinks.parse("servers=1,latency=1e-3,bandwidth=1e6; servers=1,latency=1e-3,bandwidth=1e6; "
                            "workers=1,latency=2e-3,bandwidth=4e5; workers=1,latency=1e-4,bandwidth=1e9")
    net = Network(latency=INTRA[0], bandwidth=INTRA[1], nodes=nodes)
    slow = net.link(0, "worker", 0, servers, bounds)
    # 2000 bytes to each server's node over a 4e5 link: 5 ms each, but its own link carries 4000: 10 ms
    assert slow.seconds(4 * n) == pytest.approx(2e-3 + 4 * n / 4e5, rel=1e-12)
    fast = net.link(0, "worker", 1, servers, bounds)
    # each server's link (1e6) carries its half: 1 ms + 2 ms; its own fast link 1e-4 + 4 us
    assert fast.seconds(4 * n) == pytest.approx(1e-3 + 2 * n / 1e6, rel=1e-12)
    beside = net.link(0, "server", 1, servers, bounds)   # a rank on server 1's node: half of it intra-node
    assert beside.seconds(4 * n) == pytest.approx(1e-3 + 2 * n / 1e6, rel=1e-12)


def test_servers_the_nodes_leave_out_go_one_per_node_as_placement_spread_puts_them(tmp_path):
    """A profile measured with one server (a probe's `nodes`) still simulates
    a candidate with more servers, or GSSP's group servers: server or group
    server k on node k mod the nodes (--placement spread)."""
    nodes = "servers=1,workers=2,latency=1e-4,bandwidth=1e9; workers=2,latency=1e-4,bandwidth=1e9; " \
            "workers=2,latency=1e-4,bandwidth=1e9"
    gssp = simulate(tmp_path / "gssp", "--paradigm", "gssp", "--groups", "3", "--workers", "6",
                    "--sim-nodes", nodes)
    hosts = {(p["role"], p["index"]): p["host"] for p in gssp.placement}
    assert [hosts[("group_server", g)] for g in range(3)] == ["node1", "node2", "node3"], hosts
    assert [hosts[("worker", j)] for j in range(6)] == ["node1", "node1", "node2", "node2", "node3", "node3"]
    two = simulate(tmp_path / "two", "--paradigm", "bsp", "--servers", "2", "--workers", "6", "--sim-nodes", nodes)
    assert {(p["role"], p["index"]): p["host"] for p in two.placement if p["role"] == "server"} == \
        {("server", 0): "node1", ("server", 1): "node2"}


@pytest.mark.parametrize("nodes, says", [
    ("servers=1,workers=1,latency=1e-4,bandwidth=1e9", "places 1 workers; the job has 2"),
    ("servers=2,workers=2,latency=1e-4,bandwidth=1e9", "places 2 servers; the job has 1"),
    ("servers=1,workers=2,latency=1e-4", "needs bandwidth"),
    ("servers=1,workers=2,latency=1e-4,bandwidth=0", "node 0.bandwidth='0': a finite number of bytes/s >= 1"),
    ("servers=1,workers=2,latency=1e-4,bandwidth=1e9,gpus=1", "node 0.gpus='1': unknown field; allowed:"),
    ("servers=1,2", "items 'servers=S,"),
])
def test_bad_nodes_are_one_line_errors_naming_the_setting(tmp_path, capsys, nodes, says):
    assert main(["simulate", "--run-dir", str(tmp_path / "run"), "--workers", "2", "--sim-nodes", nodes]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mpips: error: invalid sim_nodes=") and says in err[0], err
    assert not (tmp_path / "run").exists()


# Two nodes of two workers on fast links (the server on the first) and a third
# whose link is a thousand times slower: its workers' pulls and pushes take
# longer than a whole round's compute elsewhere.
SLOW_THIRD = ("servers=1,workers=2,latency=2e-5,bandwidth=1e10; workers=2,latency=2e-5,bandwidth=1e10; "
              "workers=2,latency=1e-3,bandwidth=1e7")


def test_backup_workers_drop_the_slow_links_pushes_and_lbbsp_with_transfer_gives_them_fewer_samples(tmp_path):
    """A slow link is a slow worker to BSP with backup workers: with as many
    backups as workers behind it, every dropped push is theirs and no other
    worker's is ever dropped. LB-BSP by default balances the part of a round
    that grows with the batch (its speeds are batch / compute seconds), so a
    slow link moves no samples; with --lbbsp-transfer it balances compute
    plus pull and push, and the slow link's workers get fewer samples (here
    the floor, one: their transfer alone outlasts the others' whole round),
    which shortens every round by the compute they no longer do."""
    flags = ("--workers", "6", "--sim-nodes", SLOW_THIRD, "--device-time", "5ms", "--iterations", "12")
    backup = simulate(tmp_path / "backup", "--paradigm", "backup", "--backup-workers", "2", *flags)
    dropped = [e["worker"] for e in backup.events("dropped_push")]
    assert len(dropped) >= 6 and set(dropped) == {4, 5}, dropped   # 8 here
    compute_only = simulate(tmp_path / "lbbsp", "--paradigm", "lbbsp", *flags)
    it = compute_only.iterations
    assert set(it["batch"].tolist()) == {int(compute_only.config["batch_size"])}, np.unique(it["batch"])
    balanced = simulate(tmp_path / "transfer", "--paradigm", "lbbsp", "--lbbsp-transfer", *flags)
    it = balanced.iterations
    later = it[it["clock"] >= 2]     # round 0 is even; round 1's split rests on one measurement
    slow, fast = later[np.isin(later["worker"], [4, 5])], later[later["worker"] < 4]
    assert (slow["batch"] == 1).all() and (fast["batch"] > int(balanced.config["batch_size"])).all()
    assert (np.bincount(it["clock"], weights=it["batch"]) == 6 * int(balanced.config["batch_size"])).all()

    def round_seconds(log) -> float:   # the mean time between round 2's first push and the last round's
        ends = push_ends(log.iterations)
        clocks = log.iterations["clock"]
        return float((ends[clocks == 11].max() - ends[clocks == 2].max()) / 9)

    # The slow link's transfer (16 ms) still bounds a round; what the move saves is
    # its workers' compute, 5 ms on 16 samples against 5/16 ms on one.
    saved = round_seconds(compute_only) - round_seconds(balanced)
    assert saved == pytest.approx(5e-3 * 15 / 16, rel=0.02)


def test_gssp_with_a_group_per_node_keeps_the_slow_link_off_its_workers_pushes(tmp_path):
    """GSSP groups by compute speed, so a slow link does not regroup it; with
    a group server on each node (as --placement spread puts them) the slow
    node's workers push to the group server beside them, and only the group
    server's exchanges with the global server cross the slow link, where
    SSP's every pull and push of those workers does."""
    flags = ("--workers", "6", "--sim-nodes", SLOW_THIRD, "--device-time", "5ms", "--iterations", "12")
    gssp = simulate(tmp_path / "gssp", "--paradigm", "gssp", "--groups", "3", *flags)
    ssp = simulate(tmp_path / "ssp", "--paradigm", "ssp", *flags)

    def transfer(log, workers) -> float:   # median pull + push, seconds
        it = log.iterations
        rows = it[np.isin(it["worker"], workers)]
        return float(np.median(rows["pull"] + rows["push"]))

    nbytes = int(gssp.iterations["bytes_sent"][0])
    assert transfer(gssp, [4, 5]) == pytest.approx(2 * (INTRA[0] + nbytes / INTRA[1]), rel=1e-3)
    assert transfer(ssp, [4, 5]) == pytest.approx(2 * (1e-3 + nbytes / 1e7), rel=1e-3)
