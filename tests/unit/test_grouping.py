"""GSSP grouping (no MPI)."""
import pytest

from mpips.config import Config, ConfigError
from mpips.paradigms.grouping import group_by_speed, make_groups, parse_assignment, validate_layout


def test_slow_workers_go_together():
    assert group_by_speed([1, 1, 4, 4], 2) == [[0, 1], [2, 3]]
    assert group_by_speed([4, 1, 4, 1], 2) == [[1, 3], [0, 2]]
    assert group_by_speed([4, 1, 4, 1], 2, "kmeans") == [[1, 3], [0, 2]]


def test_equally_fast_workers_group_in_worker_order_whatever_the_noise():
    """Profiled under MPI (ms): six workers at 20 ms differ by tens of
    microseconds, and which of them joined the slow workers' group changed
    from run to run; within 5% they are equal, in worker order."""
    profiled = [20.042, 20.053, 20.042, 20.04, 20.064, 20.048, 40.07, 80.06]
    assert group_by_speed(profiled, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert group_by_speed([20.031, 20.03, 20.04, 20.031, 20.035, 20.031, 40.035, 80.038], 2) == \
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert group_by_speed(profiled, 3, "kmeans") == [[0, 1, 2, 3, 4, 5], [6], [7]]
    # 6% apart is not equal
    assert group_by_speed([1.06, 1.0, 1.06, 1.0], 2) == [[1, 3], [0, 2]]


def test_equal_sizes_differ_by_at_most_one_fastest_first():
    times = [5, 3, 8, 1, 9, 2, 7]
    groups = group_by_speed(times, 3)
    assert [len(g) for g in groups] == [3, 2, 2]
    assert sorted(w for g in groups for w in g) == list(range(7))
    means = [sum(times[w] for w in g) / len(g) for g in groups]
    assert means == sorted(means)
    assert groups[0] == [1, 3, 5]


def test_kmeans_follows_the_gaps():
    times = [1.0, 1.1, 0.9, 5.0, 5.2, 20.0]
    assert group_by_speed(times, 3, "kmeans") == [[0, 1, 2], [3, 4], [5]]
    assert group_by_speed(times, 2, "kmeans") == [[0, 1, 2, 3, 4], [5]]


@pytest.mark.parametrize("times,g", [([1, 1, 1, 1], 3), ([2, 2, 2, 9], 4), ([1], 1),
                                    ([3, 1, 2, 3, 1, 2, 7, 7], 5)])
def test_kmeans_groups_are_never_empty(times, g):
    groups = group_by_speed(times, g, "kmeans")
    assert len(groups) == g and all(groups)
    assert sorted(w for grp in groups for w in grp) == list(range(len(times)))
    assert groups == group_by_speed(times, g, "kmeans")   # deterministic


def test_unknown_times_rank_slowest():
    nan = float("nan")
    assert group_by_speed([nan, 1, 2, 3], 2) == [[1, 2], [0, 3]]
    assert group_by_speed([nan, 1, 1, 2], 2, "kmeans")[-1] == [0]


def test_layout_errors():
    with pytest.raises(ConfigError) as e:
        validate_layout(3, 4)
    assert "groups" in str(e.value) and "must be <= workers (3)" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError):
        group_by_speed([1, 2], 3)
    with pytest.raises(ConfigError) as e:
        group_by_speed([1, 2], 1, "median")
    assert e.value.field == "grouping"


def test_parse_assignment():
    assert parse_assignment("0,1;2,3", 4, 2) == [[0, 1], [2, 3]]
    assert parse_assignment(" 3 ; 0, 2 ,1 ", 4, 2) == [[3], [0, 2, 1]]


@pytest.mark.parametrize("text,why", [
    ("0,1;2", "in no group"),             # worker 3 missing
    ("0,1;1,2,3", "appears twice"),
    ("0,1;2,4", "does not exist"),
    ("0,1,2,3", "has 1 groups"),
    ("0,1;;2,3", "has 3 groups"),
    ("0,1,2,3;", "group 1 is empty"),
    ("0,a;2,3", "not a worker index"),
    ("0,1;2,-3", "does not exist"),
])
def test_parse_assignment_errors(text, why):
    with pytest.raises(ConfigError) as e:
        parse_assignment(text, 4, 2)
    msg = str(e.value)
    assert e.value.field == "group_assignment" and why in msg and "\n" not in msg


def test_make_groups_prefers_the_explicit_assignment():
    cfg = Config(paradigm="gssp", groups=2, group_assignment="2,3;0,1")
    assert make_groups(cfg, 4, [1, 1, 4, 4]) == [[2, 3], [0, 1]]
    cfg = Config(paradigm="gssp", groups=2, grouping="kmeans")
    assert make_groups(cfg, 4, [4, 4, 1, 1]) == [[2, 3], [0, 1]]
