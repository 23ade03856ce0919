"""One token through the trained ``book`` model: every intermediate, read from the model.

The page "One token through the model" follows a prompt through the shipped character model
``book`` (:func:`attnlib.models.pretrained.load`) and shows what each step makes of it. Nothing
here recomputes the model beside it: :func:`trace` runs the model once with forward hooks
on each block, its norms, its attention and its feed-forward sublayer, and records what
each of them returned; inside attention it calls the layer's own public steps
(:meth:`~attnlib.layers.gqa.GroupedQueryAttention.project`, ``rope_tables``,
:meth:`~attnlib.layers.gqa.GroupedQueryAttention.rotate`, the attend step of
:data:`~attnlib.core.functional.ATTENTION_FUNCTIONS`,
:meth:`~attnlib.layers.gqa.GroupedQueryAttention.combine`) on the input its hook recorded, and
keeps the result only where it equals what the hook saw. :func:`decode` feeds the written
characters one at a time through the model's caches, with the same hooks.

Everything runs on a float64 copy of the model, so the printed digits are the same on every
CPU. The figures (:func:`attention_figure`, :func:`stream_figure`) draw a trace;
:func:`next_chars`, :func:`layer_table` and :func:`conversion_table` are the page's tables.

Lesson: 12_one_token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_nonnegative_int
from attnlib.core.functional import ATTENTION_FUNCTIONS, attention_weights
from attnlib.core.heads import repeat_kv
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.models import pretrained
from attnlib.models.tasks import book_tokenizer
from attnlib.viz.style import COLORS, HEIGHT, OKABE_ITO, rounded, style

__all__ = [
    "CONVERSIONS",
    "PROMPTS",
    "PROMPT_NAMES",
    "STEPS",
    "Trace",
    "attention_figure",
    "conversion_table",
    "decode",
    "layer_table",
    "logit_table",
    "load",
    "next_chars",
    "show_char",
    "stream_figure",
    "trace",
]

PROMPTS: tuple[str, ...] = ("The attention weig", "Each query reads the ke", "softmax of the lo")
"""The prompts the page's twins are precomputed for; the live explorer takes any text."""

PROMPT_NAMES: dict[str, str] = dict(zip(PROMPTS, ("attention", "query", "softmax"), strict=True))
"""Each prompt's short name, a whole word, as the twins' controls show it
(``attnlib.viz.twin(..., texts={"prompt": PROMPT_NAMES})``): the prompts end mid-word."""

STEPS: tuple[int, ...] = (0, 1, 2)
"""Decoding steps of the stream twin: 0 reads the prompt, ``k`` the ``k``-th written character."""

CONVERSIONS: tuple[tuple[str, dict], ...] = (
    ("book", {}),
    ("book", {"n_kv_heads": 2}),
    ("book", {"n_kv_heads": 1}),
    ("book-nope", {}),
    ("book-nope", {"d_latent": 32}),
)
"""The models of :func:`conversion_table`: ``book`` and its shipped grouped conversions
(``G = 2``, ``G = 1``, 100 steps of uptraining), ``book-nope`` and its latent conversion
(``d_L = 32``), each compared with the model it was converted from."""


@lru_cache(maxsize=8)
def _loaded(name: str, variant: tuple) -> torch.nn.Module:
    return pretrained.load(name, **dict(variant), dtype=torch.float64)


def load(name: str = "book", **variant: int) -> torch.nn.Module:
    """The shipped model ``name`` (or a shipped conversion of it) in float64, loaded once."""
    return _loaded(name, tuple(sorted(variant.items())))


def show_char(c: str) -> str:
    """A character as the page prints it: a space as ``␣``, a newline as ``⏎``."""
    return {" ": "␣", "\n": "⏎"}.get(c, c)


def _encode(text: str) -> torch.Tensor:
    if not isinstance(text, str) or not text:
        raise ValueError(f"text must be a non-empty string; got {text!r}")
    tok = book_tokenizer()
    return torch.tensor([tok.encode(text)], dtype=torch.int64)  # (1, N)


@dataclass
class Trace:
    """What the model computed on one prompt, each tensor read from the model itself.

    ``layers[l]`` holds, for block ``l`` (batch axis dropped; ``N`` characters, ``H``
    query heads, ``G`` key/value heads):

    - ``x_in (N, d)``: the residual stream entering the block (its forward pre-hook);
    - ``X (N, d)``: ``RMSNorm(x_in)``, what ``attn_norm`` returned;
    - ``Q (H, N, d_head)``, ``K``, ``V (G, N, d_head)``: ``project(X)``, before RoPE;
    - ``Q_rot``, ``K_rot``: after ``rotate``; ``angles (N, d_head / 2)``: the angle
      ``m theta_i`` of each pair at each position, from the layer's own ``rope_tables``;
    - ``S (H, N, N)``: the logits ``Q K^T / sqrt(d_head)`` (``-inf`` above the diagonal);
    - ``P (H, N, N)``: the weights ``Z^-1 A``, as
      :func:`attnlib.models.probes.attention_maps` has them;
    - ``Y (H, N, d_head)``: ``attend(Q_rot, K_rot, V)``;
    - ``attn (N, d)``: ``combine(Y, X) = concat(Y) W_O``, equal to what the sublayer returned;
    - ``x_mid (N, d)``: ``x_in + attn``; ``F_in (N, d)``: ``RMSNorm(x_mid)``;
      ``ffn (N, d)``: the feed-forward output; ``x_out (N, d)``: the block's output.

    ``E_rows (N, d)`` are the embedding rows, ``final (N, d)`` the final norm's output and
    ``logits (N, V)`` the model's own output.
    """

    text: str
    ids: torch.Tensor
    E_rows: torch.Tensor
    layers: list[dict[str, torch.Tensor]] = field(default_factory=list)
    final: torch.Tensor | None = None
    logits: torch.Tensor | None = None

    @property
    def chars(self) -> list[str]:
        return list(self.text)


class _Recorder:
    """Forward hooks on every block and sublayer of a decoder; removed on exit."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.seen, self.hooks = model, [], []

    def _keep(self, key: str, pre: bool = False):
        def hook(_module, args, out=None):
            self.seen[-1][key] = (args[0] if pre else out).detach()[0]
        return hook

    def __enter__(self) -> _Recorder:
        m = self.model
        for block in m.blocks:
            def start(_module, _args):
                self.seen.append({})
            self.hooks += [
                block.register_forward_pre_hook(start),
                block.register_forward_pre_hook(self._keep("x_in", pre=True)),
                block.attn_norm.register_forward_hook(self._keep("X")),
                block.attn.register_forward_hook(self._keep("attn")),
                block.ffn_norm.register_forward_pre_hook(self._keep("x_mid", pre=True)),
                block.ffn_norm.register_forward_hook(self._keep("F_in")),
                block.ffn.register_forward_hook(self._keep("ffn")),
                block.register_forward_hook(self._keep("x_out")),
            ]
        self.final = {}

        def final(_module, _args, out):
            self.final["final"] = out.detach()[0]
        self.hooks.append(m.final_norm.register_forward_hook(final))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.hooks:
            h.remove()


def _steps(attn: GroupedQueryAttention, X: torch.Tensor) -> dict[str, torch.Tensor]:
    """The layer's public steps on its recorded input ``X (N, d)``."""
    X = X[None]  # (1, N, d)
    N = X.shape[-2]
    Q, (K, V) = attn.project(X)  # (1, H, N, d_head), (1, G, N, d_head) x 2
    rope = attn.rope_tables(None, N, 0, X.dtype, X.device)
    Q_rot, (K_rot, _) = attn.rotate(Q, (K, V), rope)
    half = attn.d_head // 2  # half-split pairs: cos = (c | c), sin = (-s | s)
    angles = torch.atan2(rope.sin[..., half:], rope.cos[..., :half])  # (N, d_head / 2)
    K_h = repeat_kv(K_rot, attn.n_heads)  # (1, H, N, d_head): head h's keys
    S = Q_rot @ K_h.mT / math.sqrt(attn.d_head)  # (1, H, N, N)
    S = S.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    P = attention_weights(Q_rot, K_h, causal=True)  # (1, H, N, N)
    Y = ATTENTION_FUNCTIONS["auto"](Q_rot, K_rot, V, causal=True)  # (1, H, N, d_head)
    out = attn.combine(Y, X)  # (1, N, d)
    return {"Q": Q[0], "K": K[0], "V": V[0], "Q_rot": Q_rot[0], "K_rot": K_rot[0],
            "angles": angles, "S": S[0], "P": P[0], "Y": Y[0], "combined": out[0]}


@torch.no_grad()
def trace(text: str, model: torch.nn.Module | None = None) -> Trace:
    """Run ``model`` (default: ``book`` in float64) on ``text`` and record every step.

    The model runs once, with the hooks of :class:`Trace`; the attention steps are the
    layer's own methods applied to what its norm returned, and :func:`trace` refuses a
    result whose ``combine`` differs from the sublayer's recorded output.

    Example:
        >>> t = trace("The ")
        >>> [tuple(t.layers[0][k].shape) for k in ("Q", "P", "attn")]
        [(4, 4, 16), (4, 4, 4), (4, 128)]
    """
    model = load() if model is None else model
    ids = _encode(text)
    with _Recorder(model) as rec:
        logits = model(ids)  # (1, N, V)
    layers = []
    for block, seen in zip(model.blocks, rec.seen, strict=True):
        steps = _steps(block.attn, seen["X"])
        torch.testing.assert_close(steps.pop("combined"), seen["attn"], rtol=0, atol=1e-12)
        layers.append({**seen, **steps})
    return Trace(text, ids[0], model.E[ids[0]].detach(), layers, rec.final["final"],
                 logits[0])


def next_chars(logits: torch.Tensor, k: int = 5) -> pd.DataFrame:
    """The ``k`` likeliest next characters of one row of logits ``(V,)``: logit, probability."""
    tok = book_tokenizer()
    p = torch.softmax(logits.to(torch.float64), dim=-1)
    top = torch.topk(p, k)
    rows = [{"character": show_char(tok.decode([int(i)])), "id": int(i),
             "logit": round(float(logits[i]), 3), "probability": round(float(pi), 4)}
            for pi, i in zip(top.values, top.indices, strict=True)]
    return pd.DataFrame(rows, index=pd.RangeIndex(1, k + 1, name="rank"))


def layer_table(t: Trace, position: int = -1) -> pd.DataFrame:
    """Norms at one position through the blocks: the stream, each sublayer's output."""
    rows = {}
    for i, L in enumerate(t.layers):
        rows[i] = {"|x| in": L["x_in"][position].norm().item(),
                   "|attention out|": L["attn"][position].norm().item(),
                   "|x| after attention": L["x_mid"][position].norm().item(),
                   "|feed-forward out|": L["ffn"][position].norm().item(),
                   "|x| out": L["x_out"][position].norm().item()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("layer").round(3)


def logit_table(t: Trace, model: torch.nn.Module | None = None) -> pd.DataFrame:
    """Who writes the top logit at the last position: each term of the residual stream.

    The stream entering the final norm is the embedding row plus every sublayer's output,
    ``x = e + sum_l (a_l + f_l)``; RMSNorm divides it by one number, ``r = rms(x)``, and
    multiplies by the gains ``g``, so the logit of character ``c`` splits exactly into
    ``(term * g) . E_c / r`` per term. The rows sum to the model's logit.
    """
    model = load() if model is None else model
    c = int(t.logits[-1].argmax())
    x = t.layers[-1]["x_out"][-1]  # (d,)
    r = torch.sqrt(x.pow(2).mean() + model.final_norm.eps)
    u = (model.final_norm.g * model.E[c]).detach() / r  # (d,)
    terms = {"embedding": t.E_rows[-1]}
    for i, L in enumerate(t.layers):
        terms[f"layer {i} attention"] = L["attn"][-1]
        terms[f"layer {i} feed-forward"] = L["ffn"][-1]
    torch.testing.assert_close(sum(terms.values()), x, rtol=0, atol=1e-12)
    column = f"part of the logit of '{show_char(book_tokenizer().decode([c]))}'"
    rows = {k: {column: round(float(v @ u), 3)} for k, v in terms.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("term")


@torch.no_grad()
def decode(text: str, n_steps: int = 2, model: torch.nn.Module | None = None) -> list[dict]:
    """Read ``text``, then write ``n_steps`` characters greedily, one at a time, with caches.

    Step 0 runs the prompt through empty caches (the prefill); step ``k`` feeds the
    character written at step ``k - 1`` alone and reads every earlier key from the caches.
    Each entry holds what was read (``read``: the characters fed), the last position's
    residual norms through the blocks (``stages``: name -> norm), its ``logits (V,)``, the
    character written, and the caches' tokens and numbers before and after the step.
    """
    model = load() if model is None else model
    check_nonnegative_int("n_steps", n_steps)
    tok = book_tokenizer()
    caches = model.new_caches()
    step_ids, out = _encode(text), []
    for k in range(n_steps + 1):
        held = (caches[0].n_tokens, sum(c.nbytes for c in caches) // 8)
        with _Recorder(model) as rec:
            logits = model(step_ids, caches=caches)[0, -1]  # (V,)
        stages = {"embedding": rec.seen[0]["x_in"][-1].norm().item()}
        for i, seen in enumerate(rec.seen):
            stages[f"{i}: + attention"] = seen["x_mid"][-1].norm().item()
            stages[f"{i}: + feed-forward"] = seen["x_out"][-1].norm().item()
        written = int(logits.argmax())
        out.append({"step": k, "read": tok.decode(step_ids[0].tolist()), "stages": stages,
                    "logits": logits, "written": tok.decode([written]),
                    "held before": held,
                    "held after": (caches[0].n_tokens, sum(c.nbytes for c in caches) // 8)})
        step_ids = torch.tensor([[written]])
    return out


def _cache_numbers(model: torch.nn.Module, ids: torch.Tensor) -> tuple[str, int, torch.Tensor]:
    caches = model.new_caches()
    with torch.no_grad():
        logits = model(ids, caches=caches)[0, -1]
    c = caches[0]
    held = [(name, c.held(name)) for name in c.fields if c.held(name) is not None]
    holds = ", ".join(f"{name}: {T.shape[1]} x {T.shape[-1]}" if T.dim() == 4
                      else f"{name}: {T.shape[-1]}" for name, T in held)
    numbers = sum(ca.nbytes for ca in caches) // (8 * ids.shape[-1])  # float64: 8 bytes
    return holds, numbers, logits


def conversion_table(text: str = PROMPTS[0]) -> pd.DataFrame:
    """The same prompt through each of :data:`CONVERSIONS`: the cache and the next character.

    Columns: what one layer's cache holds per token (tensor, head axis, width), the numbers
    the caches of all layers hold per token and their bytes in float32, the likeliest next
    character and its probability, and the total variation distance
    ``1/2 sum |p - p_base|`` between its next-character distribution and its base model's.
    """
    ids = _encode(text)
    rows, base = {}, {}
    for name, variant in CONVERSIONS:
        model = load(name, **variant)
        holds, numbers, logits = _cache_numbers(model, ids)
        p = torch.softmax(logits, dim=-1)
        base.setdefault(name, p)
        top = int(p.argmax())
        label = name + "".join(f", {'G' if k == 'n_kv_heads' else 'd_L'} = {v}"
                               for k, v in variant.items())
        rows[label] = {"one layer's cache, per token": holds, "numbers per token": numbers,
                       "bytes per token (float32)": 4 * numbers,
                       "next": show_char(book_tokenizer().decode([top])),
                       "probability": round(float(p[top]), 4),
                       "distance to base": round(0.5 * float((p - base[name]).abs().sum()), 4)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


# --- figures -------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _trace(text: str) -> Trace:
    return trace(text)


def attention_figure(prompt: str = PROMPTS[0], layer: int = 0, head: int = 0) -> go.Figure:
    """The weights ``P_h = Z^-1 A`` of one head of one layer over the prompt, as a heatmap.

    Rows are queries (the prompt's characters, first on top), columns keys; each row sums
    to 1 and the causal mask leaves the upper triangle empty. The last row, the query of
    the character that writes the next one, is outlined, and the title names the key it
    weighs most and that weight.
    """
    check_choice("layer", layer, list(range(4)))
    check_choice("head", head, list(range(4)))
    t = _trace(prompt)
    P = t.layers[layer]["P"][head]  # (N, N)
    N = P.shape[-1]
    chars = [f"{show_char(c)}<sub>{i}</sub>" for i, c in enumerate(t.chars)]
    z = [[round(float(P[i, j]), 3) if j <= i else None for j in range(N)] for i in range(N)]
    j_max = int(P[-1].argmax())
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(N)), y=list(range(N)), zmin=0, zmax=1, colorscale="Blues",
        colorbar={"title": {"text": "weight", "side": "right"}, "thickness": 12},
        hovertemplate="query %{y}, key %{x}: %{z}<extra></extra>"))
    fig.add_shape(type="rect", x0=-0.5, x1=N - 0.5, y0=N - 1.5, y1=N - 0.5,
                  line={"color": COLORS["reference"], "width": 2})
    ticks = {"tickmode": "array", "tickvals": list(range(N)), "showgrid": False,
             "tickfont": {"size": 11}}
    fig.update_xaxes(**ticks, ticktext=[show_char(c) for c in t.chars], tickangle=0,
                     title_text="key")
    fig.update_yaxes(**ticks, ticktext=chars, autorange="reversed",
                     title_text="query (character, position)")
    style(fig, f"Layer {layer}, head {head}: the last query puts {float(P[-1, j_max]):.3f} on "
               f"'{show_char(t.chars[j_max])}' at position {j_max}", height=HEIGHT + 80)
    return fig


@lru_cache(maxsize=8)
def _decoded(prompt: str) -> tuple:
    return tuple(decode(prompt, max(STEPS)))


def stream_figure(prompt: str = PROMPTS[0], step: int = 0) -> go.Figure:
    """One decoding step: the last token's residual norm through the blocks, and what it writes.

    Left: ``|x|`` of the position being read after the embedding and after each sublayer
    adds its output. Right: the five likeliest next characters and their probabilities
    (the written one, the argmax, in the main colour). Step 0 reads the prompt; step
    ``k`` reads the ``k``-th written character through the caches.
    """
    check_choice("step", step, list(STEPS))
    s = _decoded(prompt)[step]
    top = next_chars(s["logits"])
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.12,
                        subplot_titles=["|x| of the position read", "next character"])
    names = list(s["stages"])
    fig.add_trace(go.Scatter(
        x=list(range(len(names))), y=rounded([s["stages"][n] for n in names], 3),
        mode="lines+markers", line={"color": COLORS["main"]}, name="|x|",
        hovertemplate="%{text}: %{y}<extra></extra>", text=names), row=1, col=1)
    colors = [COLORS["main"]] + [OKABE_ITO["sky blue"]] * (len(top) - 1)
    fig.add_trace(go.Bar(x=list(top["character"]), y=list(top["probability"]),
                         marker_color=colors, name="probability",
                         hovertemplate="'%{x}': %{y}<extra></extra>"), row=1, col=2)
    short = ["E"] + [f"{n.split(':')[0]}{'a' if 'attention' in n else 'f'}" for n in names[1:]]
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(names))), ticktext=short,
                     title_text="after (a: attention, f: feed-forward)", row=1, col=1)
    fig.update_yaxes(title_text="norm", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="probability", range=[0, 1], row=1, col=2)
    fig.update_layout(showlegend=False)
    n_held, _ = s["held before"]
    read = show_char(s["read"][-1])
    style(fig, f"Step {step}: reads '{read}' at position {n_held + len(s['read']) - 1} "
               f"(cache held {n_held}), writes '{show_char(s['written'])}' "
               f"with {top['probability'].iloc[0]:.3f}")
    return fig
