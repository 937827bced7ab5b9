"""`--slowdown`'s compact form: FACTORxCOUNT items among plain factors, read
by the one parser (emulation.parse_slowdown) and shown by its formatter."""
from __future__ import annotations

import pytest

from mpips.analysis.summarize import heterogeneity
from mpips.config import Config, ConfigError
from mpips.heterogeneity import format_slowdown, parse_slowdown
from mpips.training.emulation import Slowdown


@pytest.mark.parametrize("text, factors", [
    ("", []),
    ("1,1,2,4", [1, 1, 2, 4]),
    ("1x48,2x12,4x4", [1] * 48 + [2] * 12 + [4] * 4),
    ("1,1,2x2", [1, 1, 2, 2]),
    ("2x2,1,1.5x3", [2, 2, 1, 1.5, 1.5, 1.5]),
    (" 1 x 2 , 3 ", [1, 1, 3]),
    ("4x1", [4]),
])
def test_items_expand_in_order_worker_0_first(text, factors):
    assert parse_slowdown(text) == factors
    assert parse_slowdown(text, len(factors) or None) == factors


@pytest.mark.parametrize("text", ["2x", "x3", "0x4", "-1", "1,-2x2", "nan", "1xnan", "inf", "infx2",
                                  "0.5", "fast", "1,,2", "1x0", "1x-1", "1x1.5", "1x2x3", "1X4", "2x+3"])
def test_a_bad_item_is_one_line_naming_the_field_and_the_forms(text):
    with pytest.raises(ConfigError) as e:
        Config(slowdown=text)
    assert e.value.field == "slowdown"
    message = str(e.value)
    assert "\n" not in message and "slowdown" in message
    assert ">= 1" in message and "FACTORxCOUNT" in message and "'1x6,4x2'" in message


@pytest.mark.parametrize("text, workers, given", [("1x4", 8, 4), ("1x48,2x12,4x4", 63, 64), ("1,1,2", 4, 3)])
def test_one_factor_per_worker_counts_the_expanded_list(text, workers, given):
    for check in (lambda: Config(slowdown=text).check_workers(workers),
                  lambda: Slowdown(Config(slowdown=text), 0, workers)):
        with pytest.raises(ConfigError) as e:
            check()
        assert e.value.field == "slowdown"
        message = str(e.value)
        assert "\n" not in message
        assert f"{given} factors for {workers} workers" in message and "one factor per worker" in message
        assert "FACTORxCOUNT" in message
    Config(slowdown=text).check_workers(given)


def test_a_worker_gets_its_factor_from_the_compact_form():
    cfg = Config(slowdown="1x12,2x4")
    assert [Slowdown(cfg, w, 16).persistent for w in (0, 11, 12, 15)] == [1, 1, 2, 2]


@pytest.mark.parametrize("factors, shown", [
    ([1] * 48 + [2] * 12 + [4] * 4, "1x48,2x12,4x4"),
    ([1, 1, 2, 4], "1,1,2,4"),                       # short lists stay as they are
    ([1, 1, 2], "1,1,2"),
    ([1, 1, 1, 1, 2, 2, 4, 4], "1x4,2,2,4,4"),       # runs of 3 or more only
    ([1.5, 1.5, 1.5, 2.5], "1.5x3,2.5"),
    ([1, 2, 2, 2, 1], "1,2x3,1"),                    # equal factors apart are runs apart
    ([], ""),
])
def test_runs_of_three_or_more_are_compressed(factors, shown):
    assert format_slowdown(factors) == shown


@pytest.mark.parametrize("text", ["1,1,2,4", "1x48,2x12,4x4", "1,1,2x2", "1.25x5,3", "1.1,1.1,1.1,2",
                                  ",".join(str(1 + (i % 4) * 0.5) for i in range(64)), "1.2345678901x3"])
def test_the_formatted_list_reads_back_the_same(text):
    factors = parse_slowdown(text)
    assert parse_slowdown(format_slowdown(factors)) == factors


def test_tables_show_the_short_form_whatever_was_given():
    assert heterogeneity(Config(slowdown=",".join(["1"] * 12 + ["2"] * 4)).to_dict()) == "slowdown 1x12,2x4"
    assert heterogeneity(Config(slowdown="1,1,2x2").to_dict()) == "slowdown 1,1,2,2"
    assert heterogeneity(Config(slowdown="1,1,2").to_dict()) == "slowdown 1,1,2"
