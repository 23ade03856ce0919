"""Looking inside a trained decoder: attention maps, head scores, ablations, first-token share.

Every function here runs a :class:`attnlib.TinyDecoder` (or a converted variant of it) on
token ids and measures something about its attention sublayers:

- :func:`attention_maps`: each layer's weights ``P = Z^-1 A`` per head, ``(B, H, N, N)``,
  recomputed from exactly what the layer's attention received;
- :func:`previous_token_score` and :func:`induction_score`: how much weight each head puts
  on position ``i - 1``, or on the tokens that followed earlier occurrences of token ``i``;
- :func:`ablate_heads`: a copy of the model with chosen heads zeroed (their rows of
  ``W_O``), and :func:`head_ablation`, the held-out loss with each head zeroed in turn;
- :func:`first_token_share`: the mean weight on position 0, the attention-sink statistic,
  next to :func:`uniform_first_token_share`, its value under uniform causal attention;
  :func:`gate_openness`: how far a gated model's output gates are open.

By default the model runs in float64 on a copy (``dtype=torch.float64``), so what a lesson
prints is the same on every CPU.

Lesson: 01_attention_as_lookup, 03_multi_head_attention, 09_frontier.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from attnlib._checks import check_positive_int, check_tensor, check_token_batch
from attnlib.core.functional import attention_weights
from attnlib.core.heads import repeat_kv, split_heads
from attnlib.layers.gates import GatedAttention
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.sliding import SlidingWindowAttention
from attnlib.models.train import evaluate

__all__ = [
    "ablate_heads",
    "attention_maps",
    "first_token_share",
    "gate_openness",
    "head_ablation",
    "induction_score",
    "previous_token_score",
    "uniform_first_token_share",
]


def _check_decoder(model: object) -> None:
    blocks = getattr(model, "blocks", None)
    if not isinstance(model, nn.Module) or not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"model must be an attnlib.TinyDecoder; got {type(model).__name__}")
    for i, block in enumerate(blocks):
        attn = block.attn
        if not isinstance(attn, GroupedQueryAttention) or isinstance(attn, SlidingWindowAttention):
            raise TypeError(
                f"model.blocks[{i}].attn must be a GroupedQueryAttention (MHA, GQA or a "
                f"gated variant) over every earlier token to read its weights; got "
                f"{type(attn).__name__}"
            )


def _as(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    return model if dtype is None else copy.deepcopy(model).to(dtype)


def _check_ids(model: nn.Module, ids: object) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must be integer token ids of shape (B, N); got {got}")
    vocab = getattr(model, "vocab_size", None)
    if ids.numel() and vocab is not None and not (0 <= int(ids.min()) <= int(ids.max()) < vocab):
        raise ValueError(f"ids must lie in [0, vocab_size) = [0, {vocab}); got values in "
                         f"[{int(ids.min())}, {int(ids.max())}]")


def _check_maps(P: object) -> None:
    check_tensor("P", P, min_dim=4)
    if P.dim() != 4 or P.shape[-1] != P.shape[-2]:
        raise ValueError(f"P must have shape (B, H, N, N); got {tuple(P.shape)}")


def _weights(attn: GroupedQueryAttention, X: torch.Tensor) -> torch.Tensor:
    """``P = softmax(Q K^T / sqrt(d_head))`` with the causal mask, from the layer's own steps."""
    Q, (K, _) = attn.project(X)  # (B, H, N, d_head), (B, G, N, d_head)
    rope = attn.rope_tables(None, X.shape[-2], 0, X.dtype, X.device)  # the layer's own
    if rope is not None:
        Q, (K, _) = attn.rotate(Q, (K, None), rope)
    K = repeat_kv(K, attn.n_heads)  # (B, H, N, d_head): head h reads its KV head
    return attention_weights(Q, K, causal=True)  # (B, H, N, N)


@torch.no_grad()
def attention_maps(
    model: nn.Module, ids: torch.Tensor, *, dtype: torch.dtype | None = torch.float64,
) -> list[torch.Tensor]:
    """The attention weights of every layer: a list of ``n_layers`` tensors ``(B, H, N, N)``.

    The model runs once on ``ids``; a forward pre-hook records what each block hands its
    attention sublayer (the normalised residual stream ``X``), and the weights
    ``P_h = softmax(Q_h K_g(h)^T / sqrt(d_head))`` are recomputed from it with the causal
    mask and, when the layer has it, RoPE at positions ``0 .. N - 1``. Row ``i`` of head
    ``h`` says how much each earlier position contributes to position ``i``'s output.

    Args:
        model: a :class:`attnlib.TinyDecoder` with GQA-family attention (MHA, GQA, gated).
        ids: ``(B, N)`` token ids.
        dtype: run a copy of the model in this dtype; ``None`` runs the model as it is.

    Returns:
        ``[P_0, ..., P_{L-1}]``, each ``(B, H, N, N)``, rows summing to 1.

    Equivalent to reading ``P`` out of each layer: ``(P @ V_h)`` merged and times ``W_O``
    is that layer's attention output.

    Lesson: 01_attention_as_lookup, 03_multi_head_attention.
    """
    _check_decoder(model)
    _check_ids(model, ids)
    model = _as(model, dtype)
    inputs = _attention_inputs(model, ids)
    return [_weights(b.attn, X) for b, X in zip(model.blocks, inputs, strict=True)]


def _attention_inputs(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """What each block hands its attention sublayer (``X``), recorded by forward hooks
    during one forward pass; the hooks are removed afterwards."""
    inputs: list[torch.Tensor] = []
    hooks = [b.attn.register_forward_pre_hook(lambda _, args: inputs.append(args[0]))
             for b in model.blocks]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs


def previous_token_score(P: torch.Tensor) -> torch.Tensor:
    """Mean weight on the previous position: ``mean_{b, i >= 1} P[b, h, i, i - 1]``, per head.

    Args:
        P: ``(B, H, N, N)`` causal attention weights of one layer.

    Returns:
        ``(H,)``; 1 for a head that always reads position ``i - 1``, about ``1 / i`` on
        average for uniform causal attention.

    Lesson: 03_multi_head_attention.
    """
    _check_maps(P)
    return P.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))


def _after_earlier(ids: torch.Tensor) -> torch.Tensor:
    """``(B, N, N)`` bool, True at ``[b, i, j + 1]`` when ``j < i`` and ``ids[j] == ids[i]``."""
    N = ids.shape[-1]
    same = ids[..., :, None] == ids[..., None, :]  # (B, N, N): same[i, j]
    earlier = torch.ones(N, N, dtype=torch.bool, device=ids.device).tril(-1)
    hits = same & earlier  # (B, N, N): j < i holds the same token as i
    return torch.nn.functional.pad(hits[..., :-1], (1, 0))  # shift j -> j + 1


def induction_score(P: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean weight on the tokens that followed earlier occurrences of the current token, per head.

    For each query ``i`` whose token ``ids[i]`` occurred before, the weight it puts on the
    positions ``j + 1`` with ``j < i`` and ``ids[j] == ids[i]`` (summed, when the token
    occurred more than once); the score averages this over those queries. An induction
    head ("find where this token was, read what came next") scores near 1; on a sequence
    repeated once, there is exactly one such position.

    Args:
        P: ``(B, H, N, N)`` causal attention weights of one layer.
        ids: ``(B, N)`` the tokens ``P`` was computed on.

    Returns:
        ``(H,)``.

    Lesson: 03_multi_head_attention.
    """
    _check_maps(P)
    if not isinstance(ids, torch.Tensor) or ids.shape != (P.shape[0], P.shape[-1]):
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must have shape (B, N) = {(P.shape[0], P.shape[-1])}, the "
                         f"rows and keys of P; got {got}")
    target = _after_earlier(ids)  # (B, N, N)
    has = target.any(dim=-1)  # (B, N): queries whose token occurred before
    w = (P * target[:, None]).sum(dim=-1)  # (B, H, N)
    return (w * has[:, None]).sum(dim=(0, -1)) / has.sum()


def ablate_heads(model: nn.Module, heads: Iterable[tuple[int, int]]) -> nn.Module:
    """A copy of ``model`` in which each ``(layer, head)`` in ``heads`` outputs zero.

    Head ``h`` reaches the residual stream only through rows ``h d_head .. (h+1) d_head - 1``
    of its layer's ``W_O``; zeroing those rows removes its contribution and nothing else.

    Lesson: 03_multi_head_attention.
    """
    heads = list(heads)
    _check_ablation(model, heads)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in heads:
            attn = out.blocks[layer].attn
            attn.W_O[head * attn.d_head:(head + 1) * attn.d_head] = 0.0
    return out


def _check_ablation(model: object, heads: list) -> None:
    _check_decoder(model)
    L = len(model.blocks)
    for pair in heads:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not all(isinstance(v, int) for v in pair)):
            raise TypeError(f"heads must hold (layer, head) pairs of ints; got {pair!r}")
        layer, head = pair
        if not 0 <= layer < L:
            raise ValueError(f"layer must lie in [0, n_layers) = [0, {L}); got {layer}")
        if not 0 <= head < model.blocks[layer].attn.n_heads:
            raise ValueError(f"head must lie in [0, n_heads) = "
                             f"[0, {model.blocks[layer].attn.n_heads}); got {head}")


def head_ablation(
    model: nn.Module, ids: torch.Tensor, targets: torch.Tensor,
    *, dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """Held-out loss with each head zeroed in turn: ``(n_layers, n_heads)``, nats per token.

    Entry ``[l, h]`` is :func:`attnlib.models.train.evaluate`'s loss of ``ablate_heads(model,
    [(l, h)])`` on ``(ids, targets)``; compare it with the loss of the intact model.

    Lesson: 03_multi_head_attention.
    """
    _check_decoder(model)
    _check_ids(model, ids)
    check_token_batch(ids, targets)
    model = _as(model, dtype)
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    losses = torch.empty(L, H, dtype=torch.float64)
    for layer in range(L):
        for head in range(H):
            ablated = ablate_heads(model, [(layer, head)])
            losses[layer, head] = evaluate(ablated, ids, targets, dtype=None)["loss"]
    return losses


@torch.no_grad()
def first_token_share(
    model: nn.Module, ids: torch.Tensor, *, dtype: torch.dtype | None = torch.float64
) -> torch.Tensor:
    """Mean weight on position 0 per layer and head: ``(n_layers, n_heads)``.

    ``mean_{b, i >= 1} P[b, h, i, 0]``; query 0 is left out, since it can see only itself.
    An attention sink shows as a share far above :func:`uniform_first_token_share`.

    Lesson: 09_frontier.
    """
    _check_decoder(model)
    _check_ids(model, ids)
    maps = attention_maps(model, ids, dtype=dtype)
    return torch.stack([P[..., 1:, 0].mean(dim=(0, -1)) for P in maps])


@torch.no_grad()
def gate_openness(
    model: nn.Module, ids: torch.Tensor, *, dtype: torch.dtype | None = torch.float64
) -> torch.Tensor:
    """Mean output gate ``sigmoid(X W_theta)`` per layer and head, ``(n_layers, n_heads)``.

    For a model built with ``attention="gated"`` (:class:`attnlib.layers.gates.GatedAttention`):
    the average, over rows, positions and a head's ``d_head`` coordinates, of the factor
    its output is multiplied by. Near 0 a head is mostly shut; near 1, open.

    Lesson: 09_frontier.
    """
    _check_decoder(model)
    if not all(isinstance(b.attn, GatedAttention) for b in model.blocks):
        raise TypeError("model must have gated attention in every block (attention='gated')")
    _check_ids(model, ids)
    model = _as(model, dtype)
    inputs = _attention_inputs(model, ids)
    out = []
    for block, X in zip(model.blocks, inputs, strict=True):
        gate = torch.sigmoid(X @ block.attn.W_theta)  # (B, N, H d_head)
        out.append(split_heads(gate, block.attn.n_heads).mean(dim=(0, 2, 3)))
    return torch.stack(out)


def uniform_first_token_share(n_tokens: int) -> float:
    """The first-token share of uniform causal attention: ``mean_{i=1}^{N-1} 1 / (i + 1)``.

    Query ``i`` sees ``i + 1`` keys, so uniform weights give position 0 a share ``1 / (i + 1)``;
    the mean leaves out query 0, as :func:`first_token_share` does.

    Lesson: 09_frontier.
    """
    check_positive_int("n_tokens", n_tokens)
    if n_tokens < 2:
        raise ValueError(f"n_tokens must be at least 2 (query 0 is left out); got {n_tokens}")
    return sum(1.0 / (i + 1) for i in range(1, n_tokens)) / (n_tokens - 1)
