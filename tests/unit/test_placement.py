"""Where a run's ranks ran: recorded at set-up (Layout.placement into
run.h5's layout), read back by node (RunLog.by_node), shown by `mpips
info`, `mpips summarize` and the timeline (rows grouped by node)."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
from test_analysis_tables import write_log

from mpips.analysis import plot, summarize
from mpips.analysis.placement import node_line, nodes_label
from mpips.cli import main
from mpips.config import Config
from mpips.io.log import RankLog, rank_file
from mpips.runtime.layout import make_layout

# a server and worker 1 on one node, worker 0 on another: hosts in the order of their first rank
HOSTS = ["nodeA", "nodeB", "nodeA"]


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
