"""The cluster profile (mpips/experiments/profile.py): its file, its checks,
the simulate settings it stands for; and the per-worker random stragglers
those settings may need (mpips/training/emulation.py)."""
import pytest

from mpips.config import Config, ConfigError, load
from mpips.experiments import profile
from mpips.heterogeneity import parse_device_time, parse_random_stragglers
from mpips.node_links import NodeLinks
from mpips.training.emulation import Slowdown

TWO_KINDS = {
    "workers": [
        {"device_time": {"a": 0.002, "c": 0.001, "p": 1.0}, "count": 3},
        {"device_time": {"a": 0.002, "c": 0.001}, "slowdown": 4,
         "stragglers": {"rate": 0.02, "length": 5, "factor": 3}},
    ],
    "network": {"latency": 1e-4, "bandwidth": 1e9, "jitter": 1e-4},
    "apply": {"fixed": 3e-4, "per_push": 5e-5},
}


def test_a_profile_stands_for_simulate_settings_that_a_config_takes():
    p = profile.parse(TWO_KINDS)
    s = p.settings(batch_size=16)
    assert s["workers"] == 4 and s["slowdown"] == "1x3,4"
    assert s["random_stragglers"] == "0.0:1.0:1.0,0.0:1.0:1.0,0.0:1.0:1.0,0.02:5.0:3.0"
    assert (s["sim_latency"], s["sim_bandwidth"], s["sim_jitter"]) == (1e-4, 1e9, 1e-4)
    assert (s["sim_apply"], s["sim_apply_per_push"]) == (3e-4, 5e-5)
    config = load(None, {**s, "batch_size": 16})
    model = config.device_time_model()
    for w, worker in enumerate(p.workers):   # every worker's time, as the emulation makes it
        emulated = Slowdown(config, w, 4).persistent * model.seconds(16)
        assert emulated == pytest.approx(worker.seconds(16), rel=1e-12)


def test_workers_of_other_models_are_slowdowns_of_the_fastest_at_the_batch_size():
    data = {"workers": [{"device_time": {"a": 0.01, "c": 0.001}},       # 26 ms at 16
                        {"device_time": {"a": 0.0, "c": 0.00125}},      # 20 ms at 16
                        {"device_time": {"a": 0.0, "c": 0.001}, "slowdown": 2.5}]}   # 40 ms
    s = profile.parse(data).settings(batch_size=16)
    assert parse_device_time(s["device_time"], 16).seconds(16) == pytest.approx(0.020)
    assert [float(f) for f in s["slowdown"].split(",")] == pytest.approx([1.3, 1.0, 2.0])
    assert s["random_stragglers"] == ""


def test_nodes_stand_for_the_sim_nodes_setting_and_read_back_the_same(tmp_path):
    nodes = [{"servers": 1, "workers": 3, "latency": 5e-5, "bandwidth": 1.25e9},
             {"workers": 1, "latency": 5e-5, "bandwidth": 1.25e8}]
    p = profile.parse({**TWO_KINDS, "nodes": nodes})
    s = p.settings(batch_size=16)
    assert s["sim_nodes"] == "servers=1,workers=3,latency=5e-05,bandwidth=1250000000.0; " \
                             "workers=1,latency=5e-05,bandwidth=125000000.0"
    assert NodeLinks.parse(load(None, {**s, "batch_size": 16}).sim_nodes).nodes == p.nodes
    assert profile.parse(TWO_KINDS).settings(16)["sim_nodes"] == ""   # none: one node
    path = str(tmp_path / "cluster.yaml")
    profile.save(p, path)
    assert profile.load(path) == p and profile.load(path).to_dict()["nodes"] == nodes


def test_a_profile_written_reads_back_the_same(tmp_path):
    p = profile.parse(TWO_KINDS)
    path = str(tmp_path / "cluster.yaml")
    profile.save(p, path, comment="measured here")
    assert profile.load(path) == p
    assert profile.load(path).to_dict()["workers"][0]["count"] == 3


@pytest.mark.parametrize("change, field, allowed", [
    (lambda d: d.update(networks={}), "networks", "allowed: workers, network, nodes, apply"),
    (lambda d: d.update(workers=[]), "workers", "at least one worker"),
    (lambda d: d["workers"][1].update(slowdown=0.5), "workers[1].slowdown", ">= 1"),
    (lambda d: d["workers"][1]["stragglers"].update(rate=1.5), "workers[1].stragglers.rate", "in [0, 1]"),
    (lambda d: d["workers"][0].update(count=0), "workers[0].count", "an integer >= 1"),
    (lambda d: d["workers"][0].update(device_time={"a": 0, "c": 0}), "workers[0].device_time", "a + c"),
    (lambda d: d["workers"][0].update(device_time={"a": 0.1, "q": 1}), "workers[0].device_time.q",
     "allowed: a, c, p"),
    (lambda d: d["network"].update(bandwidth=0), "network.bandwidth", "> 0"),
    (lambda d: d["apply"].update(fixed="fast"), "apply.fixed", "finite number"),
    (lambda d: d.update(nodes=[{"workers": 4, "latency": 1e-4}]), "nodes[0]", "needs bandwidth"),
    (lambda d: d.update(nodes=[{"workers": 3, "latency": 1e-4, "bandwidth": 1e9}]), "nodes",
     "places 3 workers; the profile has 4"),
    (lambda d: d.update(nodes=[{"workers": 4, "latency": -1, "bandwidth": 1e9}]), "nodes[0].latency",
     "seconds in [0, 3600]"),
    (lambda d: d.update(nodes=[{"workers": 4.5, "latency": 0, "bandwidth": 1e9}]), "nodes[0].workers",
     "an integer in [0, 100000]"),
])
def test_a_bad_field_is_one_line_naming_it_and_what_is_allowed(tmp_path, change, field, allowed):
    import copy

    import yaml

    data = copy.deepcopy(TWO_KINDS)
    change(data)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        profile.load(str(path))
    message = str(e.value)
    assert "\n" not in message and f"{field}=" in message and allowed in message and str(path) in message


def test_random_stragglers_one_for_all_or_one_per_worker():
    assert parse_random_stragglers("0.01:10:4") == [(0.01, 10.0, 4.0)]
    assert parse_random_stragglers("0:1:1,0.5:2:3", 2)[1] == (0.5, 2.0, 3.0)
    with pytest.raises(ConfigError, match="3 items for 2 workers"):
        Config(random_stragglers="0:1:1,0:1:1,0:1:1").check_workers(2)
    # the per-worker form draws each worker's own: only worker 1 straggles here
    cfg = Config(random_stragglers="0:1:1,0.5:2:3", seed=3)
    assert not [s for s in (Slowdown(cfg, 0, 2).starting(i) for i in range(200)) if s]
    assert [s for s in (Slowdown(cfg, 1, 2).starting(i) for i in range(200)) if s]
