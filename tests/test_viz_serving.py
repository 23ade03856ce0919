"""attnlib.viz.serving: the step-through figure of lesson 11 follows the schedule."""

from __future__ import annotations

import math

import attnlib
from attnlib.examples import SERVING_REQUESTS
from attnlib.serving.streaming import kept_positions
from attnlib.viz import serving as vs


def test_schedule_holds_each_request_until_it_is_done():
    log = vs.schedule()
    ends = {r: P + T - 1 for r, (P, T, _) in enumerate(SERVING_REQUESTS)}
    for s in log:
        assert len(s["running"]) <= 3
        for r in s["running"]:  # blocks for what each request has written, no more
            assert len(s["blocks"][r]) == math.ceil(s["held"][r] / vs.BLOCK_SIZE)
    assert sorted(r for s in log for r in s["finished"]) == list(range(len(SERVING_REQUESTS)))
    assert all(log[-1]["held"][r] == ends[r] for r in ends)
    assert sorted(r for s in log for r in s["joined"]) == list(range(len(SERVING_REQUESTS)))


def test_figure_shows_the_blocks_and_the_kept_tokens():
    step = 5
    s = vs.schedule()[step]
    for n_sink in (0, 4):
        fig = vs.schedule_figure(step=step, n_sink=n_sink)
        pool, tokens = fig.data
        owners = [v for row in pool.z for v in row if v is not None]
        assert len(owners) == sum(len(b) for b in s["blocks"].values())
        for r in s["running"]:
            kept = [t for t, v in enumerate(tokens.z[r]) if v == 2]
            assert kept == kept_positions(s["held"][r] - 1, 8, n_sink)
        assert f"pass {step}" in fig.layout.title.text


def test_twin_steps_through_every_pass():
    values = [(k, n) for k in range(len(vs.schedule())) for n in (0, 4)]
    fig = attnlib.viz.twin(vs.schedule_figure, ("step", "n_sink"), values)
    assert len(fig.layout.sliders[0].steps) == len(values)


def test_every_control_shows_in_the_title():
    """The site's control test compares a figure's traces and title: the sinks control must
    change what it sees at every step, the first included (where nothing is evicted yet)."""
    last = len(vs.schedule()) - 1
    for step in (0, last):
        titles = {vs.schedule_figure(step, n).layout.title.text for n in (0, 4)}
        assert len(titles) == 2, step
