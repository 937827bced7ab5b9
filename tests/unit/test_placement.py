"""Where a run's ranks run: chosen by host (`--placement`, role_order),
recorded at set-up (Layout.placement into run.h5's layout), read back by
node (RunLog.by_node), shown by `mpips info`, `mpips summarize` and the
timeline (rows grouped by node)."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest
from test_analysis_tables import write_log

from mpips.analysis import plot, summarize
from mpips.analysis.placement import node_line, nodes_label
from mpips.cli import main
from mpips.config import PLACEMENTS, Config, ConfigError
from mpips.io.log import RankLog, rank_file
from mpips.runtime.layout import make_layout
from mpips.runtime.placement import placed_order, role_order

# a server and worker 1 on one node, worker 0 on another: hosts in the order of their first rank
HOSTS = ["nodeA", "nodeB", "nodeA"]


def placed(hosts, placement, **settings):
    """Each rank's (role, index, host) once the launched ranks on `hosts` are placed."""
    layout = make_layout(Config(**settings), len(hosts))
    order = role_order(hosts, layout, placement)
    assert sorted(order) == list(range(len(hosts)))   # each launched rank takes one role
    return [(p["role"], p["index"], p["host"]) for p in layout.placement([hosts[r] for r in order])]


# Slurm's block distribution of 6 ranks on 3 nodes
BLOCK = ["n0", "n0", "n1", "n1", "n2", "n2"]


def test_packed_keeps_the_launchers_order():
    assert role_order(BLOCK, make_layout(Config(servers=3), 6), "packed") == list(range(6))
    assert [h for role, _, h in placed(BLOCK, "packed", servers=3) if role == "server"] == ["n0", "n0", "n1"]


def test_spread_puts_one_server_on_each_node_and_the_workers_node_by_node():
    assert placed(BLOCK, "spread", servers=3) == [
        ("server", 0, "n0"), ("server", 1, "n1"), ("server", 2, "n2"),
        ("worker", 0, "n0"), ("worker", 1, "n1"), ("worker", 2, "n2")]
    # the launcher's cyclic order (--map-by node): the workers still node by node
    cyclic = ["n0", "n1", "n2", "n0", "n1", "n2"]
    assert role_order(cyclic, make_layout(Config(servers=1), 6), "spread") == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_one_node_is_the_launchers_order_whatever_the_placement(placement):
    for settings in ({"servers": 3}, {"paradigm": "gssp", "groups": 2, "evaluator": True}):
        assert role_order(["h"] * 7, make_layout(Config(**settings), 7), placement) == list(range(7))


def test_spread_wraps_when_there_are_more_servers_than_nodes():
    hosts = ["a", "a", "a", "b", "b", "b"]
    assert [h for role, _, h in placed(hosts, "spread", servers=4)] == ["a", "b", "a", "b", "a", "b"]
    # a node whose ranks are all servers already is skipped; the uneven node keeps its ranks
    uneven = ["a", "b", "b", "b", "b"]
    assert placed(uneven, "spread", servers=3) == [
        ("server", 0, "a"), ("server", 1, "b"), ("server", 2, "b"), ("worker", 0, "b"), ("worker", 1, "b")]


def test_spread_gives_gssp_a_group_per_node():
    """The GSSP job of tests/nodes (7 ranks on 3 nodes: 3, 2, 2 under the
    block distribution): packed puts every group server on the first two
    nodes; spread puts group server g with worker g on node g (equal
    speeds cut the workers into groups in index order)."""
    hosts = ["n0", "n0", "n0", "n1", "n1", "n2", "n2"]
    settings = {"paradigm": "gssp", "groups": 3}
    assert [h for role, _, h in placed(hosts, "packed", **settings) if role == "group_server"] == ["n0", "n0", "n1"]
    got = placed(hosts, "spread", **settings)
    assert [h for role, _, h in got if role == "group_server"] == ["n0", "n1", "n2"]
    assert [h for role, _, h in got if role == "worker"] == ["n0", "n1", "n2"]
    assert got[0] == ("server", 0, "n0")


def test_the_evaluator_takes_what_is_left():
    got = placed(BLOCK, "spread", servers=2, evaluator=True)
    assert [(role, h) for role, _, h in got] == [
        ("server", "n0"), ("server", "n1"), ("worker", "n0"), ("worker", "n1"), ("worker", "n2"),
        ("evaluator", "n2")]


def test_a_placement_is_checked():
    layout = make_layout(Config(servers=1), 3)
    with pytest.raises(ConfigError, match="placement.*allowed: spread, packed"):
        role_order(["a", "b", "c"], layout, "scattered")
    with pytest.raises(ConfigError, match="placement"):
        Config(placement="scattered")
    with pytest.raises(ConfigError, match="ranks"):
        role_order(["a", "b"], layout, "spread")
    # a layout the job refuses (one rank): the launcher's order, and the layout's own check speaks
    assert placed_order(Config(), ["a"]) == [0]
    assert placed_order(Config(servers=2), BLOCK) == [0, 1, 2, 3, 4, 5]   # packed, the default
    assert placed_order(Config(servers=2, placement="spread"), BLOCK) == [0, 2, 1, 3, 4, 5]


def test_the_layout_places_each_rank_with_its_role():
    layout = make_layout(Config(paradigm="gssp", servers=1, groups=2, evaluator=True), 6)
    placed = layout.placement(["a", "a", "b", "a", "b", "c"])
    assert [(p["rank"], p["host"], p["role"], p["index"]) for p in placed] == [
        (0, "a", "server", 0), (1, "a", "group_server", 0), (2, "b", "group_server", 1),
        (3, "a", "worker", 0), (4, "b", "worker", 1), (5, "c", "evaluator", 0)]
    assert json.loads(json.dumps(placed)) == placed   # run.h5 keeps it as JSON


def test_the_layout_by_node_in_words():
    placed = make_layout(Config(servers=1), 3).placement(HOSTS)
    by_node = {"nodeA": [placed[0], placed[2]], "nodeB": [placed[1]]}
    assert node_line(by_node["nodeA"]) == "server 0 (rank 0), worker 1 (rank 2)"
    assert nodes_label(by_node) == "2 nodes: S+W, W"
    assert nodes_label({"x": placed}) == "1 node" and nodes_label({}) == "-"


def test_info_and_summarize_show_the_layout_by_node(tmp_path, capsys):
    log = write_log(tmp_path / "run", varying=False, placement=make_layout(Config(servers=1), 3).placement(HOSTS))
    RankLog(rank_file(log.run_dir, 1), 1).close()   # (write_log writes rank 0's file alone)
    assert list(log.by_node()) == ["nodeA", "nodeB"]
    assert [r["rank"] for r in log.by_node()["nodeA"]] == [0, 2]
    assert main(["info", log.run_dir]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    assert ["placement", "nodeA:", *"server 0 (rank 0), worker 1 (rank 2)".split()] in lines, out
    assert ["nodeB:", *"worker 0 (rank 1)".split()] in lines, out
    assert main(["info", log.run_dir, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["nodes"] == 2 and [p["host"] for p in info["placement"]] == HOSTS
    assert summarize.table([log.run_dir], 0.5)["nodes"].tolist() == ["2 nodes: S+W, W"]
    # a run whose log has no placement (simulated, older): nothing to show
    bare = write_log(tmp_path / "bare", varying=False)
    assert bare.by_node() == {} and bare.summary()["nodes"] is None
    assert summarize.table([bare.run_dir], 0.5)["nodes"].tolist() == ["-"]


def test_the_timeline_groups_its_rows_by_node(tmp_path):
    log = write_log(tmp_path / "run", varying=False, placement=make_layout(Config(servers=1), 3).placement(HOSTS))
    fig, ax = plt.subplots()
    labels = plot._draw_workers(ax, log, 0.0, 2.0)
    plt.close(fig)
    assert labels == ["worker 1 @ nodeA", "worker 0 @ nodeB"]   # nodeA first: it holds rank 0
    assert [(name, ws.tolist()) for name, ws in plot.node_groups(log)] == [
        ("nodeA (1 worker)", [1]), ("nodeB (1 worker)", [0])]
    bare = write_log(tmp_path / "bare", varying=False)
    assert plot.worker_nodes(bare) == {}
    assert [name for name, _ in plot._groups(bare)] == [name for name, _ in plot.speed_classes(bare)]
