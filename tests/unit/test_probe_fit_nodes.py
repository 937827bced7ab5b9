"""The probe's per-node fit (mpips/experiments/probe.py's fit_links) on
made-up iteration rows with known links per node: what the simulator then
charges a worker of each node (mpips/runtime/transport/local.py) is what
the rows took; too few rows, servers on several nodes or ranks out of node
order fall back to one network, said; one node is the profile of before."""
import numpy as np
import pytest
from test_probe_fit import rows

from mpips.experiments import probe, profile
from mpips.io.log import APPLY
from mpips.node_links import NodeLinks
from mpips.runtime.layout import Layout
from mpips.runtime.transport.local import Network as SimNetwork

DENSE, SMALL = 40_000, 800
# (latency s, bandwidth bytes/s) of a transfer by a worker of each node: the
# servers' node within itself, then the links of two other nodes to it
WITHIN, FAST, SLOW = (20e-6, 5e9), (1e-4, 1.25e9), (2e-4, 1.25e8)
HOSTS = ["a", "a", "a", "b", "b", "c", "c"]   # server 0 and workers 0, 1; workers 2, 3; workers 4, 5
COST = [WITHIN, WITHIN, FAST, FAST, SLOW, SLOW]   # per worker


def runs(per_worker=50, cost=COST, jitter=0.0, seed=0):
    """The probe's transfers: a run of dense pushes and one of small (top-k) pushes, pulls dense."""
    rng = np.random.default_rng(seed)
    w = np.repeat(np.arange(len(cost)), per_worker)
    latency, bandwidth = np.array(cost).T[:, w]

    def took(nbytes):
        return latency + nbytes / bandwidth + (rng.exponential(jitter, w.size) if jitter else 0.0)

    return [rows(worker=w, pull=took(DENSE), push=took(sent), bytes_sent=np.full(w.size, sent),
                 bytes_dense=np.full(w.size, DENSE), iteration=np.tile(np.arange(per_worker), len(cost)))
            for sent in (DENSE, SMALL)]


def placement(hosts=HOSTS, servers=1):
    return Layout(servers, 0, len(hosts) - servers).placement(hosts)


def simulated(network, nodes, worker, nbytes):
    """The seconds the simulator charges this worker's pull of `nbytes` from server 0 (no jitter)."""
    sim = SimNetwork(network.latency, network.bandwidth, nodes=NodeLinks(nodes))
    return sim.link(0, "worker", worker, [("server", 0)], [(0, nbytes // 4)]).seconds(nbytes)


def test_each_node_s_link_is_fitted_and_the_simulator_charges_what_the_rows_took():
    said = []
    network, nodes = probe.fit_links(runs(), placement(), said.append)
    assert said == []
    assert [(n.servers, n.group_servers, n.workers) for n in nodes] == [(1, 0, 2), (0, 0, 2), (0, 0, 2)]
    assert (network.latency, network.bandwidth, network.jitter) == (
        pytest.approx(WITHIN[0]), pytest.approx(WITHIN[1]), 0.0)
    assert [(n.latency, n.bandwidth) for n in nodes[1:]] == [
        (pytest.approx(FAST[0]), pytest.approx(FAST[1])), (pytest.approx(SLOW[0]), pytest.approx(SLOW[1]))]
    # only the slower of two links is ever seen: the servers' node gets the fastest seen, exactly
    assert (nodes[0].latency, nodes[0].bandwidth) == (nodes[1].latency, nodes[1].bandwidth)
    for worker, (latency, bandwidth) in enumerate(COST):
        for nbytes in (SMALL, DENSE):
            assert simulated(network, nodes, worker, nbytes) == pytest.approx(latency + nbytes / bandwidth)


def test_with_jitter_the_links_come_back_within_five_percent():
    # exponential delays of mean 10 us on every transfer: the 10th percentiles
    # (the floors the fit draws through) rise by 1.05 us, a 1% at most of the
    # latencies here; 200 transfers per worker and kind
    network, nodes = probe.fit_links(runs(per_worker=200, jitter=10e-6, seed=3), placement(), print)
    for (latency, bandwidth), node in zip((FAST, SLOW), nodes[1:]):
        assert node.latency == pytest.approx(latency, rel=0.05) and node.bandwidth == pytest.approx(bandwidth, rel=0.05)
    assert network.bandwidth == pytest.approx(WITHIN[1], rel=0.05)
    assert min(nodes, key=lambda n: n.bandwidth) is nodes[2]
    assert 5e-6 < network.jitter < 15e-6


def test_a_node_with_too_few_transfers_takes_the_fit_of_all_and_is_named():
    its = runs()
    few = [it[(it["worker"] < 4) | (it["iteration"] < 2)] for it in its]   # node c: 4 dense, 4 small
    said = []
    network, nodes = probe.fit_links(few, placement(), said.append)
    common = probe.fit_network(few)
    assert len(said) == 1 and "node c" in said[0] and "fewer than 10" in said[0]
    assert (nodes[2].latency, nodes[2].bandwidth) == (common.latency, common.bandwidth)
    assert nodes[1].bandwidth == pytest.approx(FAST[1]) and network.bandwidth == pytest.approx(WITHIN[1])


def test_no_worker_on_the_servers_node_takes_the_fit_of_all_within_it():
    cost = [FAST, FAST, SLOW, SLOW]
    said = []
    network, nodes = probe.fit_links(runs(cost=cost), placement(["a", "b", "b", "c", "c"]), said.append)
    common = probe.fit_network(runs(cost=cost))
    assert len(said) == 1 and "servers' node a" in said[0]
    assert (network.latency, network.bandwidth) == (common.latency, common.bandwidth)
    assert [(n.servers, n.workers) for n in nodes] == [(1, 0), (0, 2), (0, 2)]
    for worker, (latency, bandwidth) in enumerate(cost):
        assert simulated(network, nodes, worker, DENSE) == pytest.approx(latency + DENSE / bandwidth)


@pytest.mark.parametrize("hosts, servers, why", [
    (["a", "b", "a", "a", "b", "b", "c", "c"], 2, "servers ran on 2 nodes"),
    (["a", "a", "b", "c", "b", "c", "a"], 1, "workers are not in the order"),
])
def test_servers_on_several_nodes_or_ranks_out_of_node_order_give_one_network(hosts, servers, why):
    its = runs(cost=[WITHIN] * (len(hosts) - servers))
    said = []
    assert probe.fit_links(its, placement(hosts, servers), said.append) == (probe.fit_network(its), ())
    assert len(said) == 1 and why in said[0]


class Log:
    """What fit() reads of a RunLog."""

    def __init__(self, its, hosts):
        self.layout = {"parameters": DENSE // 4, "workers": len(COST)}
        self.iterations, self.placement = its, placement(hosts) if hosts else None
        self.applies = np.zeros(4, APPLY)
        self.applies["pushes"], self.applies["apply"] = [1, 1, 2, 2], [3e-4, 3e-4, 4e-4, 4e-4]


def logs(hosts):
    out = []
    for k, b in enumerate((4, 8, 16)):
        it = runs(jitter=1e-5, seed=k)[k % 2]
        it["batch"], it["compute"] = b, 1e-3 * b * (1 + it["worker"])
        out.append(Log(it, hosts))
    return out


def test_one_node_is_the_profile_of_before_and_several_round_trip_through_the_file(tmp_path):
    before = probe.fit(logs(None))
    assert before.nodes == () and before.network == probe.fit_network([log.iterations for log in logs(None)])
    assert probe.fit(logs(["a"] * 7)) == before
    found = probe.fit(logs(HOSTS), say=pytest.fail)
    assert found.workers == before.workers and len(found.nodes) == 3
    assert found.nodes[2].bandwidth == pytest.approx(SLOW[1], rel=0.05)
    path = str(tmp_path / "cluster.yaml")
    profile.save(found, path)
    assert profile.load(path) == found
    nodes = NodeLinks.parse(found.settings(8)["sim_nodes"])
    assert nodes.nodes == found.nodes
    nodes.check(Layout(1, 0, 6))
