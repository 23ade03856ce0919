"""Figures of lesson 11: the cache of a continuous batch, step by step.

:func:`schedule_figure` replays the continuous-batching schedule of
:data:`attnlib.examples.SERVING_REQUESTS` (prefill in chunks, then one character a step)
and shows, after each forward pass, the paged cache's block pool (which request holds
each block, which blocks are free), the requests that joined and left, and, for each
request, which of its tokens a rolling cache of ``window`` tokens with ``n_sink`` sinks
would still hold.
"""

from __future__ import annotations

from functools import lru_cache

import plotly.graph_objects as go

from attnlib.examples import SERVING_REQUESTS
from attnlib.layers.blocks import TinyDecoder
from attnlib.serving.batching import Request, continuous_batching
from attnlib.serving.streaming import kept_positions
from attnlib.viz.style import HEIGHT, OKABE_ITO, style

__all__ = ["N_BLOCKS", "BLOCK_SIZE", "schedule", "schedule_figure"]

N_BLOCKS = 24
"""Blocks in the figure's pool."""
BLOCK_SIZE = 4
"""Tokens per block in the figure's pool."""

_REQUEST_COLOURS = [OKABE_ITO[c] for c in ("blue", "orange", "bluish green", "reddish purple",
                                           "vermillion", "sky blue")]


@lru_cache(maxsize=4)
def schedule(max_batch: int = 3, chunk: int = 8) -> tuple[dict, ...]:
    """The step log of the schedule, with the tokens each request holds after each pass.

    The schedule depends on the lengths and arrivals only, not on the characters, so a
    small random decoder runs it.
    """
    model = TinyDecoder(vocab_size=8, d_model=8, n_layers=1, n_heads=1, seed=0)
    # each prompt of its own character, so that no request finds another's blocks to share
    requests = [Request([r + 1] * P, T, a) for r, (P, T, a) in enumerate(SERVING_REQUESTS)]
    res = continuous_batching(model, requests, max_batch=max_batch, n_blocks=N_BLOCKS,
                              block_size=BLOCK_SIZE, chunk=chunk)
    held = [0] * len(requests)
    out, before = [], []
    for s in res.steps:
        for r, n in zip(s["running"], s["n_new"], strict=True):
            held[r] += n
        done = [r for r in s["running"]
                if held[r] == len(requests[r].prompt) + requests[r].max_new_tokens - 1]
        out.append({**s, "held": list(held), "joined": [r for r in s["running"]
                                                        if r not in before],
                    "finished": done})
        before = [r for r in s["running"] if r not in done]
    return tuple(out)


def schedule_figure(step: int = 0, n_sink: int = 4, *, window: int = 8) -> go.Figure:
    """The block pool and each request's rolling-cache view after forward pass ``step``.

    Args:
        step: the forward pass (0 is the first prefill).
        n_sink: sinks a rolling cache would keep beside its last ``window`` tokens.
        window: the rolling cache's window.
    """
    log = schedule()
    s = log[min(max(step, 0), len(log) - 1)]
    owner = {b: r for r, blocks in s["blocks"].items() for b in blocks}
    cols = 12
    z = [[owner.get(row * cols + c) for c in range(cols)] for row in range(N_BLOCKS // cols)]
    text = [[("" if v is None else f"r{v}") for v in line] for line in z]
    n_req = len(SERVING_REQUESTS)
    scale = [[i / (n_req - 1), _REQUEST_COLOURS[i]] for i in range(n_req)]
    longest = max(P + T - 1 for P, T, _ in SERVING_REQUESTS)
    state = []  # None: not written, 1: evicted or released, 2: kept
    for r in range(n_req):
        n = s["held"][r]
        kept = set(kept_positions(n - 1, window, n_sink)) if n else set()
        live = r in s["running"]
        state.append([None if t >= n else (2 if (t in kept and live) else 1)
                      for t in range(longest)])
    pool = go.Heatmap(z=z, text=text, texttemplate="%{text}", zmin=0, zmax=n_req - 1,
                      colorscale=scale, showscale=False, xgap=2, ygap=2, xaxis="x", yaxis="y",
                      hovertemplate="block %{x}: request %{z}<extra></extra>")
    tokens = go.Heatmap(z=state, x=list(range(longest)), y=[f"r{r}" for r in range(n_req)],
                        zmin=1, zmax=2, colorscale=[[0, "#DDDDDD"], [1, OKABE_ITO["blue"]]],
                        showscale=False, xgap=1, ygap=2, xaxis="x2", yaxis="y2",
                        hovertemplate="request %{y}, token %{x}<extra></extra>")
    titles = (f"block pool: {len(owner)} of {N_BLOCKS} blocks held ({BLOCK_SIZE} tokens each)",
              f"tokens each request holds; a rolling cache of {window} with {n_sink} sinks "
              f"keeps the dark ones")
    annotations = [dict(text=t, x=0.5, y=y, xref="paper", yref="paper", xanchor="center",
                        yanchor="bottom", showarrow=False, font={"size": 14})
                   for t, y in zip(titles, (1.0, 0.55), strict=True)]
    fig = go.Figure(data=[pool, tokens], layout=dict(
        xaxis=dict(visible=False, anchor="y"), yaxis=dict(visible=False, autorange="reversed",
                                                          domain=[0.72, 1.0]),
        xaxis2=dict(title_text="token position", anchor="y2"),
        yaxis2=dict(autorange="reversed", domain=[0.0, 0.55 - 0.08]),
        annotations=annotations))
    running = ", ".join(f"r{r} +{n}" for r, n in zip(s["running"], s["n_new"], strict=True))
    joined = ", ".join(f"r{r}" for r in s["joined"]) or "none"
    left = ", ".join(f"r{r}" for r in s["finished"]) or "none"
    style(fig, f"pass {step}: running {running}<br><sup>joined: {joined}; done after this "
               f"pass: {left}; sinks: {n_sink}</sup>", height=HEIGHT + 120)
    fig.update_layout(margin={"t": 130, "l": 60, "r": 30, "b": 60})
    return fig
