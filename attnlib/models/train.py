"""Training and evaluating :class:`attnlib.TinyDecoder`: a short, readable loop.

The objective is the mean next-token cross-entropy over the positions that have a target::

    loss = -(1 / |T|) sum_{(b, i) in T} log softmax(logits[b, i])[targets[b, i]],

in nats per token, where ``T`` holds the positions whose target is not ``-100``. The loop
is AdamW (decoupled weight decay on the matrices, none on the norm gains), a learning rate
that warms up linearly and then stays constant or follows a cosine to zero, and gradient
clipping by the global norm. Everything it draws comes from the ``data`` callable, so a
seeded generator inside it makes the run repeatable.

:data:`RECIPES` holds the recipe of every model that :mod:`attnlib.models.pretrained` ships;
``python -m attnlib.models.train NAME`` re-creates model ``NAME`` from scratch and writes its
weights and card into the package (``make models`` runs every recipe).

Lesson: 01_attention_as_lookup, 03_multi_head_attention, 06_gqa, 07_mla.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnlib._checks import (
    check_choice,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
    check_token_batch,
)
from attnlib.models.tasks import IGNORE

__all__ = [
    "CARD_DECIMALS",
    "EVAL_MODEL",
    "FINETUNES",
    "HELD_OUT_SEED",
    "RECIPES",
    "SCHEDULES",
    "Finetune",
    "Recipe",
    "attention_parameters",
    "eval_loss",
    "eval_set",
    "evaluate",
    "evaluation_set",
    "finetune_file",
    "held_out",
    "main",
    "make",
    "learning_rate",
    "masked_logits",
    "next_token_loss",
    "position_losses",
    "recipe_config",
    "recipe_data",
    "train",
    "window_losses",
]

SCHEDULES = ("cosine", "constant")
"""Learning-rate schedules of :func:`train` (both after a linear warm-up)."""

Batch = tuple[torch.Tensor, torch.Tensor]


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) over the positions whose target is not ``-100``.

    Args:
        logits: ``(..., N, vocab_size)``.
        targets: ``(..., N)`` token ids, ``-100`` where nothing is predicted.

    Returns:
        A scalar tensor.

    Equivalent to ``F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=-100)``.
    """
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


def learning_rate(step: int, *, steps: int, lr: float, warmup: int = 0,
                  schedule: str = "cosine") -> float:
    """The learning rate at ``step`` (0-based): linear warm-up, then constant or cosine.

    ``lr (step + 1) / warmup`` for ``step < warmup``; afterwards ``lr`` (``"constant"``) or
    ``lr (1 + cos(pi t)) / 2`` with ``t = (step - warmup) / (steps - warmup)`` (``"cosine"``).
    """
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    t = (step - warmup) / max(1, steps - warmup)
    return lr * 0.5 * (1.0 + math.cos(math.pi * t))


def train(
    model: nn.Module,
    data: Callable[[], Batch],
    *,
    steps: int,
    lr: float = 3e-3,
    schedule: str = "cosine",
    warmup: int = 0,
    weight_decay: float = 0.1,
    clip: float = 1.0,
    parameters: Iterable[nn.Parameter] | None = None,
    log_every: int = 0,
) -> list[float]:
    """Train ``model`` in place for ``steps`` steps of AdamW on ``next_token_loss``.

    Each step draws one batch ``(ids, targets) = data()``, computes the loss of
    ``model(ids)``, clips the gradient to global norm ``clip`` and takes one AdamW step
    (``betas = (0.9, 0.95)``) at :func:`learning_rate`. Weight decay applies to the
    parameters with two or more dimensions (weight matrices, the embedding), not to norm
    gains and biases.

    Args:
        model: a :class:`attnlib.TinyDecoder` (or any module from ids to logits).
        data: called once per step; returns ``(ids, targets)`` of one batch, for example
            ``lambda: attnlib.models.tasks.induction(batch_size=32, generator=g)``.
        steps: number of optimiser steps.
        lr: peak learning rate.
        schedule: one of :data:`SCHEDULES`.
        warmup: steps of linear warm-up.
        weight_decay: AdamW's decoupled weight decay.
        clip: largest global gradient norm.
        parameters: the parameters to train; ``None`` means all of ``model``'s. The others
            are left untouched (a short fine-tune of one part of a model).
        log_every: print the loss every this many steps (0: never).

    Returns:
        The training loss of every step (floats).

    Example:
        >>> import attnlib
        >>> g = torch.Generator().manual_seed(0)
        >>> model = attnlib.TinyDecoder(32, d_model=32, n_layers=2, n_heads=2, seed=0)
        >>> losses = train(model, lambda: attnlib.models.tasks.induction(batch_size=8, generator=g,
        ...                                                        n_tokens=32), steps=5)
        >>> len(losses)
        5

    Lesson: 06_gqa (uptraining), 07_mla (fine-tuning).
    """
    check_positive_int("steps", steps)
    check_positive_float("lr", lr)
    check_choice("schedule", schedule, SCHEDULES)
    check_nonnegative_int("warmup", warmup)
    check_nonnegative_int("log_every", log_every)
    if not callable(data):
        raise TypeError(f"data must be a callable returning (ids, targets); got {data!r}")
    params = [p for p in (model.parameters() if parameters is None else parameters)
              if p.requires_grad]
    if not params:
        raise ValueError("parameters must hold at least one parameter that requires grad")
    trained = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in trained and p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=(0.9, 0.95))
    for p in frozen:  # no gradient is computed for what is not trained
        p.requires_grad_(False)
    model.train()
    losses = []
    try:
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = learning_rate(step, steps=steps, lr=lr, warmup=warmup,
                                            schedule=schedule)
            ids, targets = data()
            loss = next_token_loss(model(ids), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            losses.append(loss.item())
            if log_every and (step + 1) % log_every == 0:
                print(f"step {step + 1:5d}  loss {losses[-1]:.4f}", flush=True)
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.eval()
    return losses


def attention_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of every attention sublayer of a decoder (``blocks[i].attn``).

    ``W_Q, W_K, W_V, W_O`` for GQA (and ``W_theta`` with a gate), ``W_L, W_LK, W_LV,
    W_LQQ, W_O`` for MLA: what a conversion changes, with the queries and ``W_O`` that read
    it. Pass them as ``parameters=`` to :func:`train` for a short fine-tune of attention alone.
    """
    return [p for n, p in model.named_parameters() if ".attn." in n]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    ids: torch.Tensor,
    targets: torch.Tensor,
    *,
    dtype: torch.dtype | None = torch.float64,
    batch_size: int = 64,
) -> dict[str, float]:
    """Held-out loss and accuracy: ``{"loss": nats per token, "accuracy": ..., "tokens": n}``.

    The loss is :func:`next_token_loss` over every position with a target; the accuracy is
    the share of those positions where the largest logit is the target. With
    ``dtype=torch.float64`` (the default) a copy of the model runs in float64, so the
    result is the same to the printed digit on every CPU (float32 sums of thousands of
    terms differ in their last digits between kernels); ``None`` evaluates the model as
    it is.

    Args:
        model: maps ids ``(B, N)`` to logits ``(B, N, vocab_size)``.
        ids: ``(B, N)``.
        targets: ``(B, N)``, ``-100`` where nothing is predicted.
        dtype: the dtype to evaluate in; ``None`` keeps the model's.
        batch_size: rows per forward pass.

    Returns:
        A dict with ``"loss"``, ``"accuracy"`` and ``"tokens"`` (the positions counted).
    """
    _check_evaluate(ids, targets, batch_size)
    nll, hit = _token_scores(model, ids, targets, dtype=dtype, batch_size=batch_size)
    count = int((targets != IGNORE).sum())
    return {"loss": nll.sum().item() / count, "accuracy": int(hit.sum()) / count,
            "tokens": count}


def masked_logits(model: nn.Module, ids: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """The logits of decoder ``model`` when each query may read only the keys ``key_mask`` allows.

    ``key_mask`` is a bool ``(N, N)``, True where query ``i`` may attend to key ``j``; every
    layer applies it on top of the causal mask, with the RoPE positions ``0 .. N - 1`` of
    the full sequence. This is what a cache that evicts tokens computes: a window of ``w``
    tokens is ``attnlib.core.masks.sliding_window_mask(N, window=w)``, and keeping the first
    tokens too ("attention sinks") adds their columns. An all-True mask gives ``model(ids)``.

    Args:
        model: an :class:`attnlib.TinyDecoder`.
        ids: ``(B, N)`` token ids.
        key_mask: bool ``(N, N)``.

    Returns:
        ``(B, N, vocab_size)`` logits.

    Lesson: 05_kv_cache, 08_rope.
    """
    n = ids.shape[-1]
    if key_mask.dtype != torch.bool or tuple(key_mask.shape) != (n, n):
        raise ValueError(f"key_mask must be a bool tensor of shape ({n}, {n}); got "
                         f"{key_mask.dtype} {tuple(key_mask.shape)}")
    x = model.E[ids]  # (B, N, d_model)
    if model.norm == "peri":
        x = model.emb_norm(x)
    for block in model.blocks:
        x = block(x, causal=True, mask=key_mask)
    if model.norm != "post":
        x = model.final_norm(x)
    return x @ model.output_weights()  # (B, N, vocab_size)


def _token_scores(
    model: nn.Module, ids: torch.Tensor, targets: torch.Tensor, *, dtype: torch.dtype | None,
    batch_size: int, key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's cross-entropy ``(B, N)`` float64 (0 where the target is ``-100``) and
    whether its largest logit is the target (False there), on the CPU."""
    if dtype is not None:
        model = copy.deepcopy(model).to(dtype)
    was_training = model.training
    model.eval()
    nll, hit = [], []
    try:
        for start in range(0, ids.shape[0], batch_size):
            rows = ids[start:start + batch_size]
            logits = (model(rows) if key_mask is None
                      else masked_logits(model, rows, key_mask)).to(torch.float64)
            t = targets[start:start + batch_size]
            keep = t != IGNORE
            logp = torch.log_softmax(logits, dim=-1).gather(-1, t.clamp(min=0)[..., None])
            nll.append(torch.where(keep, -logp[..., 0], 0.0).cpu())  # (b, N)
            hit.append(((logits.argmax(dim=-1) == t) & keep).cpu())  # (b, N)
    finally:
        model.train(was_training)
    return torch.cat(nll), torch.cat(hit)


def _check_evaluate(ids: object, targets: object, batch_size: object) -> None:
    """The arguments of :func:`evaluate`: a token batch with at least one target."""
    check_positive_int("batch_size", batch_size)
    check_token_batch(ids, targets)
    if not (targets != IGNORE).any():
        raise ValueError("targets must have at least one position that is not -100; got none")


@torch.no_grad()
def position_losses(
    model: nn.Module,
    ids: torch.Tensor,
    targets: torch.Tensor,
    *,
    dtype: torch.dtype | None = torch.float64,
    batch_size: int = 16,
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss at each position, averaged over the rows: ``(N,)`` float64, nats per token.

    Entry ``i`` is the mean cross-entropy of the predictions made at position ``i`` (over
    the rows whose target there is not ``-100``; NaN where no row has one). Evaluated like
    :func:`evaluate`, on a float64 copy by default. Averaging blocks of positions shows
    what happens past the length a model was trained on (lesson 08). With ``key_mask``
    (bool ``(N, N)``), every layer lets query ``i`` read only the keys it allows, on top
    of the causal mask (:func:`masked_logits`): the loss of a cache that evicts tokens.
    """
    check_positive_int("batch_size", batch_size)
    check_token_batch(ids, targets)
    nll, _ = _token_scores(model, ids, targets, dtype=dtype, batch_size=batch_size,
                           key_mask=key_mask)
    return nll.sum(dim=0) / (targets != IGNORE).sum(dim=0).cpu()  # (N,): NaN where none


# ---------------------------------------------------------------------------------------
# The recipes of the shipped models
# ---------------------------------------------------------------------------------------

HELD_OUT_SEED = 20_260_000
"""Seed of the generator that draws the synthetic tasks' held-out sets (training uses others)."""


@dataclass(frozen=True)
class Recipe:
    """How one shipped model is made: task, architecture, optimiser, steps and seeds.

    ``config`` is passed to :class:`attnlib.TinyDecoder` (its ``seed`` draws the initial
    weights); ``data_seed`` seeds the generator of the training batches; ``task_kw`` goes to
    the task's generator; ``mix_induction`` adds that many :func:`attnlib.models.tasks.induction`
    rows of the same length to every batch (see ``"recall"``); ``weights_dtype="float16"``
    stores the trained weights rounded to float16 (half the bytes; the card reports the loss
    of the rounded weights, which are what ship, and ``held_out_float32`` the loss before).
    """

    task: str
    config: dict
    steps: int
    batch_size: int
    lr: float
    warmup: int = 100
    schedule: str = "cosine"
    weight_decay: float = 0.1
    clip: float = 1.0
    data_seed: int = 1
    task_kw: dict = field(default_factory=dict)
    mix_induction: int = 0
    description: str = ""
    weights_dtype: str = "float32"


@dataclass(frozen=True)
class Finetune:
    """A conversion of a shipped model, then a short fine-tune of its attention sublayers.

    For each value in ``values``, :func:`attnlib.models.pretrained.to_gqa` (``conversion =
    "n_kv_heads"``) or :func:`attnlib.models.pretrained.to_mla` (``"d_latent"``) converts model
    ``base``; then :func:`train` runs ``steps`` steps on the base's task, training only the
    attention parameters (``W_Q, W_K, W_V, W_O``, or MLA's ``W_L, W_LK, W_LV, W_LQQ, W_O``)
    and leaving the embedding, norms and feed-forward networks as they were. Only those
    tensors are saved, so a variant costs a few hundred kilobytes.

    A value that changes nothing (``n_kv_heads`` equal to the base's, ``d_latent`` at full
    rank) makes a *control*: the same fine-tune applied to the unconverted model, which
    measures what the recipe itself does to the loss. The saved files are named
    ``BASE-gqaG`` or ``BASE-mlaD``, with ``-STEPS`` appended when ``steps`` is not 100
    (:func:`finetune_file`). ``weights_dtype`` is as in :class:`Recipe`.
    """

    base: str
    conversion: str
    values: tuple[int, ...]
    steps: int
    lr: float
    warmup: int = 10
    schedule: str = "cosine"
    weight_decay: float = 0.1
    clip: float = 1.0
    data_seed: int = 2
    weights_dtype: str = "float32"


_BOOK = {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_head": 16, "d_ff": 256, "seed": 0}
_BOOK_TRAINING = {"steps": 2000, "batch_size": 16, "lr": 2e-3, "task_kw": {"n_tokens": 128}}
_INDUCTION = {"vocab_size": 32, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128,
              "seed": 0}
_INDUCTION_TRAINING = {"steps": 3000, "batch_size": 32, "lr": 1e-3,
                       "task_kw": {"n_tokens": 64, "vocab_size": 32, "max_period": 32}}

RECIPES: dict[str, Recipe] = {
    "recall": Recipe(
        "associative_recall",
        {"vocab_size": 32, "d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 128, "seed": 0},
        steps=3000, batch_size=64, lr=1e-3, task_kw={"n_pairs": 8, "n_queries": 8},
        mix_induction=32,
        description="associative recall of 8 key-value pairs (16 keys, 16 values); every "
                    "batch also holds 32 induction rows, without which training stays on "
                    "a plateau near the accuracy of guessing among the row's values",
    ),
    "induction": Recipe(
        "induction", {**_INDUCTION}, **_INDUCTION_TRAINING,
        description="a random segment of 4 to 32 distinct tokens, repeated to 64 tokens; RoPE",
    ),
    "induction-nope": Recipe(
        "induction", {**_INDUCTION, "rope_base": None}, **_INDUCTION_TRAINING,
        description="as 'induction', without positions (no RoPE): the causal mask is the "
                    "only source of order",
    ),
    "book": Recipe(
        "book", {**_BOOK}, **_BOOK_TRAINING,
        description="a character-level model of the book's own text; RoPE, n_kv_heads = n_heads",
    ),
    "book-nope": Recipe(
        "book", {**_BOOK, "rope_base": None}, **_BOOK_TRAINING,
        description="as 'book', without positions (no RoPE), so that its [W_K | W_V] can be "
                    "factored into MLA (chapter 07)",
    ),
    "book-gated": Recipe(
        "book", {**_BOOK, "attention": "gated"}, **_BOOK_TRAINING,
        description="as 'book' (same data, steps and seeds), with the output gate of "
                    "chapter 09 on every head",
    ),
    # The controls of chapters 06 and 07: the same recipe at a second initial seed (the
    # noise of one training run), and the grouped layouts trained as such from the start.
    **{f"book-seed{seed}": Recipe(
        "book", {**_BOOK, "seed": seed}, **_BOOK_TRAINING, weights_dtype="float16",
        description=f"as 'book' with initial seed {seed} (same data and steps): with 'book' "
                    "and the other seeds, the noise of one training run (attnlib.analysis."
                    "intervals.seed_interval)",
    ) for seed in range(1, 5)},
    "book-scratch-gqa2": Recipe(
        "book", {**_BOOK, "n_kv_heads": 2}, **_BOOK_TRAINING, weights_dtype="float16",
        description="as 'book' (same data, steps and seeds), trained as GQA with G = 2 "
                    "from the start",
    ),
    # The draft of speculative decoding (chapter 11): the same data and steps, a model
    # about a tenth of the size, so that proposing a character costs little.
    "book-draft": Recipe(
        "book", {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_head": 16, "d_ff": 128,
                 "seed": 0}, **_BOOK_TRAINING, weights_dtype="float16",
        description="a small draft of 'book' for speculative decoding: 2 layers of width 64 "
                    "(4 heads of width 16), the same data, steps and seeds",
    ),
    "book-scratch-gqa1": Recipe(
        "book", {**_BOOK, "n_kv_heads": 1}, **_BOOK_TRAINING, weights_dtype="float16",
        description="as 'book' (same data, steps and seeds), trained as MQA (G = 1) from "
                    "the start",
    ),
    # MLA trained from the start with the 'book' recipe and its positions (decoupled RoPE,
    # d_R = 8), at the cache of MQA (d_L + d_R = 32 numbers per token and layer, as 2 d_head)
    # and at the cache of G = 2 (64): the from-scratch points of chapter 07.
    "book-scratch-mla24": Recipe(
        "book", {**_BOOK, "attention": "mla", "d_latent": 24, "d_rope": 8},
        **_BOOK_TRAINING, weights_dtype="float16",
        description="as 'book' (same data, steps and seeds), trained as MLA from the start: "
                    "d_L = 24 and a decoupled RoPE key of d_R = 8, 32 cached numbers per "
                    "token and layer, as many as MQA",
    ),
    "book-scratch-mla56": Recipe(
        "book", {**_BOOK, "attention": "mla", "d_latent": 56, "d_rope": 8},
        **_BOOK_TRAINING, weights_dtype="float16",
        description="as 'book' (same data, steps and seeds), trained as MLA from the start: "
                    "d_L = 56 and a decoupled RoPE key of d_R = 8, 64 cached numbers per "
                    "token and layer, as many as GQA with G = 2",
    ),
}

FINETUNES: dict[str, Finetune] = {
    "book-gqa": Finetune("book", "n_kv_heads", (2, 1), steps=100, lr=3e-3),
    "book-nope-mla": Finetune("book-nope", "d_latent", (16, 32, 64), steps=100, lr=3e-3),
    # The same recipe on the unconverted models (G = H; the exact, full-rank latent), and
    # every conversion again with four times the budget.
    "book-gqa-control": Finetune("book", "n_kv_heads", (4,), steps=100, lr=3e-3,
                                 weights_dtype="float16"),
    "book-nope-mla-control": Finetune("book-nope", "d_latent", (128,), steps=100, lr=3e-3,
                                      weights_dtype="float16"),
    "book-gqa-400": Finetune("book", "n_kv_heads", (4, 2, 1), steps=400, lr=3e-3,
                             weights_dtype="float16"),
    "book-nope-mla-400": Finetune("book-nope", "d_latent", (128, 64, 32, 16), steps=400,
                                  lr=3e-3, weights_dtype="float16"),
}


def _book_vocab() -> int:
    from attnlib.models.tasks import book_tokenizer

    return book_tokenizer().vocab_size


def recipe_config(name: str) -> dict:
    """The full :class:`attnlib.TinyDecoder` keyword arguments of recipe ``name``."""
    recipe = RECIPES[check_choice("name", name, list(RECIPES))]
    config = dict(recipe.config)
    if recipe.task == "book":
        config["vocab_size"] = _book_vocab()
    return config


def recipe_data(name: str, generator: torch.Generator,
                device: torch.device | str | None = None) -> Callable[[], Batch]:
    """The training batches of recipe ``name``, drawn from ``generator``."""
    from attnlib.models import tasks

    recipe = RECIPES[check_choice("name", name, list(RECIPES))]
    kw = {"batch_size": recipe.batch_size, "generator": generator, "device": device,
          **recipe.task_kw}
    if recipe.task == "book":
        return lambda: tasks.book_windows(**kw)
    if recipe.task == "induction":
        return lambda: tasks.induction(**kw)

    def recall() -> Batch:
        ids, targets = tasks.associative_recall(**kw)
        if not recipe.mix_induction:
            return ids, targets
        vocab = recipe.task_kw.get("n_keys", 16) + recipe.task_kw.get("n_values", 16)
        more = tasks.induction(batch_size=recipe.mix_induction, generator=generator,
                               n_tokens=ids.shape[1], vocab_size=vocab, device=device)
        return torch.cat((ids, more[0])), torch.cat((targets, more[1]))

    return recall


def held_out(name: str, *, device: torch.device | str | None = None, **overrides) -> Batch:
    """The held-out set that model ``name``'s card reports: ``(ids, targets)``.

    ``"recall"``: 2,000 rows with one query each; ``"induction"`` and ``"induction-nope"``:
    256 rows of 64 tokens; the ``"book"`` models: :func:`attnlib.models.tasks.book_held_out`, the
    first 64 windows of 128 characters (8,192 characters; ``n_windows=16`` is a quicker
    subset, ``n_windows=None`` all of the held-out text). The synthetic sets are drawn from
    ``torch.Generator().manual_seed(HELD_OUT_SEED)``, a stream training never reads.
    ``overrides`` change the task's keywords (for example ``n_tokens=256``, past the
    training length, or ``batch_size``, or ``n_windows`` for the book).
    """
    from attnlib.models import tasks

    recipe = RECIPES[check_choice("name", name, list(RECIPES))]
    if recipe.task == "book":
        return tasks.book_held_out(**{"n_tokens": 128, "n_windows": 64, **overrides},
                                   device=device)
    g = torch.Generator().manual_seed(HELD_OUT_SEED)
    if recipe.task == "induction":
        kw = {**recipe.task_kw, "batch_size": 256, **overrides}
        return tasks.induction(generator=g, device=device, **kw)
    kw = {k: v for k, v in recipe.task_kw.items() if k != "n_queries"}
    return tasks.associative_recall(generator=g, device=device,
                                    **{**kw, "batch_size": 2000, **overrides})


EVAL_MODEL = "book"
"""The recipe whose held-out set is :func:`eval_set`: every ``book`` model is scored on it."""


@cache
def _eval_set() -> Batch:
    return held_out(EVAL_MODEL)


def eval_set() -> Batch:
    """THE evaluation set of the book models: ``(ids, targets)``, 64 windows of 128 characters.

    The first 8,192 characters of held-out text, ``held_out("book")``: what every card of a
    model trained on the book reports (``"held_out"``), and what lessons 05 to 09 score
    every number they compare on. One set, so that no two compared numbers come from
    different text. Computed once; the tensors are new copies each call.

    Example:
        >>> ids, targets = eval_set()
        >>> tuple(ids.shape), int((targets != -100).sum())
        ((64, 128), 8192)
    """
    ids, targets = _eval_set()
    return ids.clone(), targets.clone()


def eval_loss(model: nn.Module) -> float:
    """Held-out loss of a book model on :func:`eval_set`, in nats per character (float64).

    ``evaluate(model, *eval_set())["loss"]``: the number its card records as
    ``held_out["loss"]`` when ``model`` is a shipped model. Lessons 05 to 09 compare only
    numbers computed this way.
    """
    ids, targets = _eval_set()
    return evaluate(model, ids, targets)["loss"]


@torch.no_grad()
def window_losses(model: nn.Module, ids: torch.Tensor | None = None,
                  targets: torch.Tensor | None = None) -> torch.Tensor:
    """Each evaluation window's mean loss: ``(W,)`` float64, nats per character.

    Row ``w`` of ``ids`` (by default :func:`eval_set`'s 64 windows of 128 characters) is
    scored as :func:`evaluate` scores it, in float64, and averaged over its targets; with
    the windows all the same length, the mean of the result is :func:`eval_loss`. Two
    models' window losses on the same windows are the pairs that
    :func:`attnlib.analysis.intervals.paired_bootstrap` resamples.

    Example:
        >>> import attnlib
        >>> per = window_losses(attnlib.models.pretrained.load("book"))
        >>> tuple(per.shape), round(per.mean().item(), 3)
        ((64,), 1.306)

    Lesson: 06_gqa, 07_mla, 11_serving.
    """
    if ids is None and targets is None:
        ids, targets = _eval_set()
    else:
        check_token_batch(ids, targets)
    nll, _ = _token_scores(model, ids, targets, dtype=torch.float64, batch_size=64)
    counts = (targets != IGNORE).sum(dim=1).cpu()  # (W,)
    if not bool((counts > 0).all()):
        raise ValueError("targets must have a target in every window (row); got a row of "
                         "-100 only")
    return nll.sum(dim=1) / counts


CARD_DECIMALS = 5
"""Decimals of the metrics a card records (the tests reproduce them to this precision)."""


def _metrics(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> dict:
    m = evaluate(model, ids, targets)
    return {"loss": round(m["loss"], CARD_DECIMALS),
            "accuracy": round(m["accuracy"], CARD_DECIMALS), "tokens": m["tokens"]}


def evaluation_set(name: str) -> str:
    """What the ``"held_out"`` metrics on model ``name``'s card were measured on, in words."""
    recipe = RECIPES[check_choice("name", name, list(RECIPES))]
    if recipe.task == "book":
        return ("attnlib.models.train.eval_set(): held_out('book'), the first 64 windows of 128 "
                "held-out characters (8,192)")
    ids, _ = held_out(name)
    return (f"held_out({name!r}): {ids.shape[0]:,} rows of {ids.shape[1]} tokens drawn "
            f"from torch.Generator().manual_seed({HELD_OUT_SEED})")


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make(name: str, out: str | Path | None = None, *, log_every: int = 250) -> dict:
    """Re-create shipped model ``name`` from scratch; write ``NAME.pt`` and ``NAME.json``.

    ``name`` is a key of :data:`RECIPES` (trains a model) or of :data:`FINETUNES`
    (converts a model already in ``out`` and fine-tunes each conversion). ``out`` defaults
    to the package's ``attnlib/weights``. Returns the card (or the list of cards).
    """
    from attnlib.layers.blocks import TinyDecoder
    from attnlib.models import pretrained, tasks

    out = Path(pretrained.WEIGHTS if out is None else out)
    out.mkdir(parents=True, exist_ok=True)
    if name in FINETUNES:
        return _make_finetunes(name, out, log_every=log_every)
    recipe = RECIPES[check_choice("name", name, [*RECIPES, *FINETUNES])]
    config = recipe_config(name)
    model = TinyDecoder(**config)
    ids, targets = held_out(name)
    at_init = _metrics(model, ids, targets)
    data = recipe_data(name, torch.Generator().manual_seed(recipe.data_seed))
    start, cpu = time.perf_counter(), time.process_time()
    losses = train(model, data, steps=recipe.steps, lr=recipe.lr, schedule=recipe.schedule,
                   warmup=recipe.warmup, weight_decay=recipe.weight_decay, clip=recipe.clip,
                   log_every=log_every)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    state, float32 = _stored(model, recipe.weights_dtype, ids, targets)
    card = {
        "name": name, "task": recipe.task, "description": recipe.description,
        "config": config, "steps": recipe.steps, "seed": config["seed"],
        "data_seed": recipe.data_seed,
        "recipe": {k: v for k, v in asdict(recipe).items() if k not in ("config", "description")},
        "evaluation_set": evaluation_set(name),
        "held_out": _metrics(model, ids, targets), "held_out_at_init": at_init,
        "final_train_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "parameters": _n_params(model), "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu, 1),
        "torch_version": torch.__version__, "threads": torch.get_num_threads(),
    }
    if float32 is not None:
        card.update(weights_dtype=recipe.weights_dtype, held_out_float32=float32)
    if recipe.task == "book":
        card["corpus_sha256"] = tasks.book_sha256()
    torch.save(state, out / f"{name}.pt")
    (out / f"{name}.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    return card


def _stored(model: nn.Module, weights_dtype: str, ids: torch.Tensor, targets: torch.Tensor,
            keep: Callable[[str], bool] = lambda key: True) -> tuple[dict, dict | None]:
    """The state dict to save (the keys ``keep`` accepts) in ``weights_dtype``.

    For float16, ``model`` takes the rounded values in place (so that what the card then
    measures is what ships), and the second result is the held-out metrics before rounding.
    """
    check_choice("weights_dtype", weights_dtype, ("float32", "float16"))
    state = {k: v for k, v in model.state_dict().items() if keep(k)}
    if weights_dtype == "float32":
        return state, None
    before = _metrics(model, ids, targets)
    state = {k: v.to(torch.float16) for k, v in state.items()}
    model.load_state_dict(state, strict=False)  # copies, casting back to float32
    return state, before


def finetune_file(base: str, conversion: str, value: int, steps: int) -> str:
    """The file name (no suffix) of a fine-tuned conversion: ``book-gqa2``, ``book-gqa2-400``."""
    kind = "gqa" if conversion == "n_kv_heads" else "mla"
    return f"{base}-{kind}{value}" + ("" if steps == 100 else f"-{steps}")


def _make_finetunes(name: str, out: Path, *, log_every: int) -> list[dict]:
    from attnlib.layers.blocks import TinyDecoder
    from attnlib.models import pretrained

    ft = FINETUNES[name]
    base_card = json.loads((out / f"{ft.base}.json").read_text(encoding="utf-8"))
    base = TinyDecoder(**base_card["config"])
    base.load_state_dict(torch.load(out / f"{ft.base}.pt", weights_only=True))
    convert = pretrained.to_gqa if ft.conversion == "n_kv_heads" else pretrained.to_mla
    ids, targets = held_out(ft.base)
    cards = []
    for value in ft.values:
        model = convert(base, value)
        before = _metrics(model, ids, targets)
        params = attention_parameters(model)
        data = recipe_data(ft.base, torch.Generator().manual_seed(ft.data_seed))
        start, cpu = time.perf_counter(), time.process_time()
        train(model, data, steps=ft.steps, lr=ft.lr, schedule=ft.schedule, warmup=ft.warmup,
              weight_decay=ft.weight_decay, clip=ft.clip, parameters=params,
              log_every=log_every)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        state, float32 = _stored(model, ft.weights_dtype, ids, targets,
                                 keep=lambda key: ".attn." in key)
        file = finetune_file(ft.base, ft.conversion, value, ft.steps)
        card = {
            "name": file, "base": ft.base, "variant": {ft.conversion: value},
            "config": model.card["config"], "steps": ft.steps, "seed": ft.data_seed,
            "recipe": {k: v for k, v in asdict(ft).items() if k != "values"},
            "evaluation_set": evaluation_set(ft.base),
            "held_out_converted": before, "held_out": _metrics(model, ids, targets),
            "held_out_base": base_card["held_out"],
            "parameters": _n_params(model),
            "trained_parameters": sum(p.numel() for p in params),
            "train_seconds": round(seconds, 1), "train_cpu_seconds": round(cpu, 1),
            "torch_version": torch.__version__,
        }
        if float32 is not None:
            card.update(weights_dtype=ft.weights_dtype, held_out_float32=float32)
        torch.save(state, out / f"{file}.pt")
        (out / f"{file}.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
        cards.append(card)
    return cards


def main(argv: list[str] | None = None) -> None:
    """``python -m attnlib.models.train NAME [NAME ...] [--out DIR] [--threads T]``."""
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.models.train",
        description="Re-create attnlib's shipped models from scratch.")
    parser.add_argument("names", nargs="+", metavar="NAME",
                        help=f"one of {[*RECIPES, *FINETUNES]}, or 'all'")
    parser.add_argument("--out", default=None,
                        help="folder for NAME.pt and NAME.json (default: the package's)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: these models are small, and one "
                             "thread is fastest on a shared machine)")
    args = parser.parse_args(argv)
    names = [*RECIPES, *FINETUNES] if args.names == ["all"] else args.names
    for name in names:
        check_choice("NAME", name, [*RECIPES, *FINETUNES])
    torch.set_num_threads(args.threads)
    for name in names:
        print(f"== {name}", flush=True)
        made = make(name, args.out)
        for card in made if isinstance(made, list) else [made]:
            print(f"{card['name']}: held-out {card['held_out']}, "
                  f"{card['train_seconds']} s", flush=True)


if __name__ == "__main__":
    main()
