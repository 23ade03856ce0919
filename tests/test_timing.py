"""attnlib.analysis.timing: interleaved repeats, medians with their range, per-repeat ratios."""

from __future__ import annotations

import statistics
import time

import pytest

from attnlib.analysis import timing


def test_each_function_is_timed_once_per_round_taking_turns():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    t = timing.time_side_by_side(fns, repeats=3, warmup=2)
    assert order == ["a", "b"] * 5  # two untimed rounds, then three timed ones
    assert {name: x.repeats for name, x in t.items()} == {"a": 3, "b": 3}


def test_median_low_and_high_are_those_of_the_repeats():
    t = timing.time_side_by_side({"sleep": lambda: time.sleep(0.002)}, repeats=5)["sleep"]
    assert len(t.seconds) == 5
    assert t.median == statistics.median(t.seconds)
    assert (t.low, t.high) == (min(t.seconds), max(t.seconds))
    assert t.low >= 0.002
    assert "median of 5" in str(t) and "ms" in str(t)


def test_a_ratio_is_taken_repeat_by_repeat():
    t = {"a": timing.Timing(2.0, 1.0, 3.0, 3, (1.0, 2.0, 3.0)),
         "b": timing.Timing(1.0, 1.0, 1.0, 3, (1.0, 1.0, 1.0))}
    r = timing.ratio(t, "a", "b")
    assert r == timing.Ratio(2.0, 1.0, 3.0, 3)
    assert str(r) == "2 (range 1-3 over 3 interleaved repeats)"
    t["b"] = timing.Timing(2.0, 1.0, 3.0, 3, (1.0, 2.0, 3.0))
    assert timing.ratio(t, "a", "b") == timing.Ratio(1.0, 1.0, 1.0, 3)  # same rounds, same load


@pytest.mark.parametrize("kwargs,match", [
    ({"fns": {}}, "fns must name at least one"),
    ({"repeats": 0}, "repeats must be an int >= 1; got 0"),
    ({"repeats": True}, "repeats must be an int >= 1; got True"),
    ({"warmup": -1}, "warmup must be an int >= 0; got -1"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = {"fns": {"a": lambda: None}, **kwargs}
    with pytest.raises(ValueError, match=match):
        timing.time_side_by_side(**args)


def test_an_unknown_name_in_a_ratio_is_named():
    t = timing.time_side_by_side({"a": lambda: None}, repeats=1)
    with pytest.raises(ValueError, match="'b' must be one of the timed names"):
        timing.ratio(t, "a", "b")


def test_the_machine_is_named_with_threads_and_torch():
    text = timing.machine("cpu")
    assert "thread" in text and "torch" in text
