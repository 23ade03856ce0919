"""Speculative decoding: a small draft proposes ``k`` tokens, the target checks them in one pass.

Decoding one token per forward pass reads the whole model for one token. A *draft* model,
much cheaper than the *target*, proposes ``x_1 .. x_k`` one at a time, with distributions
``q_1 .. q_k``; the target then runs once over the last token and the ``k`` proposals and
gives its own distributions ``p_1 .. p_{k+1}`` at every position (Leviathan et al. 2023;
Chen et al. 2023). Proposals are checked in order:

* greedy: keep ``x_i`` while ``x_i = argmax p_i``; at the first mismatch emit
  ``argmax p_i`` instead; if all ``k`` pass, emit ``argmax p_{k+1}`` as well. The output
  is the target's greedy output, token for token;
* sampling: keep ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first
  rejection draw a token from the residual ``max(0, p_i - q_i)``, normalised, and stop; if
  all pass, draw one from ``p_{k+1}``. Each emitted token is then distributed exactly as
  the target's own draw: ``P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y)))
  max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y)) = min(p, q)(x) + max(0, p - q)(x)
  = p(x)``.

Every round emits between 1 and ``k + 1`` tokens for one target pass; a proposal is kept
with probability ``sum_x min(p(x), q(x)) = 1 - TV(p, q)`` (greedy: when the two argmaxes
agree). The caches of both models are cut back to the kept tokens after each round
(:class:`RollbackKVCache`).

Lesson: 11_serving.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlib._checks import check_nonnegative_int, check_positive_int, check_tensor
from attnlib.serving.cache import KVCache

__all__ = ["RollbackKVCache", "SpeculativeResult", "accept_reject", "speculative_generate"]


class RollbackKVCache(KVCache):
    """A growing :class:`~attnlib.serving.cache.KVCache` that can forget its newest tokens.

    ``crop(n)`` keeps the first ``n`` tokens: what a rejected proposal wrote is dropped,
    and the next token is at position ``n`` again.

    Example:
        >>> cache = RollbackKVCache()
        >>> _ = cache.append(torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4))
        >>> cache.crop(3); cache.n_tokens, tuple(cache.K.shape)
        (3, (1, 2, 3, 4))
    """

    def __init__(self, max_tokens: int | None = None) -> None:
        super().__init__(None)

    def crop(self, n: int) -> None:
        """Keep the first ``n`` tokens (``0 <= n <= n_tokens``)."""
        if not 0 <= n <= self._n:
            raise ValueError(f"n must lie in [0, {self._n}] (the tokens held); got {n}")
        for name in self.fields:
            T = self._held[name]
            if T is not None:
                self._held[name] = T[..., :n, :]
        self._n = n


def accept_reject(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, *,
                  generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the sampling rule, row by row: keep ``x ~ q`` with ``min(1, p(x)/q(x))``.

    Args:
        p: ``(R, V)`` the target's probabilities.
        q: ``(R, V)`` the draft's probabilities, from which ``x`` was drawn.
        x: ``(R,)`` the proposed tokens.
        generator: for the uniform draws and the residual draws.

    Returns:
        ``(token, accepted)``: ``(R,)`` the emitted token (``x`` where accepted, a draw from
        the normalised ``max(0, p - q)`` where not) and ``(R,)`` bools.

    Example:
        >>> p = torch.tensor([[0.5, 0.5, 0.0]]); q = torch.tensor([[0.0, 0.5, 0.5]])
        >>> g = torch.Generator().manual_seed(0)
        >>> accept_reject(p, q, torch.tensor([2]), generator=g)   # p(2) = 0: always rejected
        (tensor([0]), tensor([False]))
    """
    check_tensor("p", p, min_dim=2)
    check_tensor("q", q, min_dim=2)
    if p.shape != q.shape or x.shape != p.shape[:-1]:
        raise ValueError(f"p and q must be (R, V) and x (R,); got {tuple(p.shape)}, "
                         f"{tuple(q.shape)}, {tuple(x.shape)}")
    rows = torch.arange(p.shape[0], device=p.device)
    p_x, q_x = p[rows, x], q[rows, x]
    u = torch.rand(p.shape[0], generator=generator, dtype=p.dtype).to(p.device)
    accepted = u * q_x < p_x  # u < p(x) / q(x), without dividing by a q(x) of 0
    residual = (p - q).clamp_min(0)
    empty = residual.sum(-1) <= 0  # p = q: nothing is ever rejected, any row will do
    residual[empty] = p[empty]
    redraw = torch.multinomial(residual, 1, generator=generator)[:, 0]
    return torch.where(accepted, x, redraw), accepted


class SpeculativeResult(NamedTuple):
    """The generated ids and the counts of a speculative run."""

    ids: torch.Tensor
    n_new: int
    target_passes: int
    draft_passes: int
    proposed: int
    accepted: int

    @property
    def acceptance_rate(self) -> float:
        """Kept proposals over proposals made."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def passes_per_token(self) -> float:
        """Target decoding passes per generated token (1 for plain decoding)."""
        return self.target_passes / self.n_new if self.n_new else 0.0


def _probs(logits: torch.Tensor, temperature: float, top_k, top_p, min_p) -> torch.Tensor:
    from attnlib.serving.sampling import warp

    z = warp(logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    return torch.softmax(z.double(), dim=-1)


@torch.no_grad()
def speculative_generate(target, draft, ids: torch.Tensor, max_new_tokens: int, *, k: int = 4,
                         do_sample: bool = False, temperature: float = 1.0,
                         top_k: int | None = None, top_p: float | None = None,
                         min_p: float | None = None, generator: torch.Generator | None = None
                         ) -> SpeculativeResult:
    """Generate ``max_new_tokens`` tokens from ``target``, proposed ``k`` at a time by ``draft``.

    Args:
        target, draft: :class:`~attnlib.layers.blocks.TinyDecoder` s of one vocabulary whose
            attention keeps ``K, V``.
        ids: ``(1, N)`` or ``(N,)`` the prompt (one sequence).
        max_new_tokens: tokens to generate (>= 0).
        k: proposals per round (>= 1); fewer in the last round when fewer tokens remain.
        do_sample: the sampling rule (True) or the greedy one (False, the default).
        temperature, top_k, top_p, min_p: the warpers of :func:`attnlib.serving.sampling.warp`,
            applied to both models' logits when sampling.
        generator: a seeded ``torch.Generator`` for the draft's draws, the accept tests and
            the residual draws.

    Returns:
        A :class:`SpeculativeResult`: ``ids`` ``(1, N + max_new_tokens)`` (greedy: equal to
        ``target.generate(ids, max_new_tokens)``), the target's and the draft's decoding
        passes (the prompt's prefill not counted), proposals made and kept.

    Example:
        >>> from attnlib.layers.blocks import TinyDecoder
        >>> target = TinyDecoder(vocab_size=12, d_model=16, n_layers=2, n_heads=2, seed=0)
        >>> draft = TinyDecoder(vocab_size=12, d_model=8, n_layers=1, n_heads=1, seed=1)
        >>> prompt = torch.tensor([[1, 2, 3]])
        >>> res = speculative_generate(target, draft, prompt, 10, k=3)
        >>> torch.equal(res.ids, target.generate(prompt, 10))
        True
    """
    check_tensor("ids", ids, min_dim=1, floating=False)
    check_nonnegative_int("max_new_tokens", max_new_tokens)
    check_positive_int("k", k)
    if (ids.dim() == 2 and ids.shape[0] != 1) or ids.dim() > 2 or ids.shape[-1] < 1:
        raise ValueError(f"ids must be one prompt, (1, N) or (N,) with N >= 1; got "
                         f"{tuple(ids.shape)}")
    if target.E.shape[0] != draft.E.shape[0]:
        raise ValueError(f"draft must share the target's vocabulary ({target.E.shape[0]}); "
                         f"got {draft.E.shape[0]}")
    if do_sample:
        from attnlib.serving.sampling import check_options
        check_options(temperature, top_k, top_p, min_p, generator)
    prompt = ids.reshape(1, -1)
    device = target.E.device
    seq = prompt[0].tolist()
    t_caches = [RollbackKVCache() for _ in target.blocks]
    d_caches = [RollbackKVCache() for _ in draft.blocks]
    if len(seq) > 1:  # prefill everything but the last token, which each round feeds
        target(prompt[:, :-1].to(device), caches=t_caches)
        draft(prompt[:, :-1].to(draft.E.device), caches=d_caches)
    warp_kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    t_passes = d_passes = proposed = kept = 0
    n_end = len(seq) + max_new_tokens
    while len(seq) < n_end:
        k_now = min(k, n_end - len(seq) - 1)  # the round emits at most k_now + 1 tokens
        xs, qs = [], []
        for _ in range(k_now):  # the draft proposes, one token per pass
            behind = seq[d_caches[0].n_tokens:] if not xs else [xs[-1]]
            feed = torch.tensor([behind], device=draft.E.device)
            z = draft(feed, caches=d_caches)[0, -1]  # (V,)
            d_passes += 1
            if do_sample:
                q = _probs(z, **warp_kw)
                x = int(torch.multinomial(q.float(), 1, generator=generator))
                qs.append(q)
            else:
                x = int(z.argmax())
            xs.append(x)
        n_before = len(seq)
        feed = torch.tensor([seq[t_caches[0].n_tokens:] + xs], device=device)
        z = target(feed, caches=t_caches)[0, -(k_now + 1):]  # (k_now + 1, V)
        t_passes += 1
        proposed += k_now
        new = []
        for i, x in enumerate(xs):
            if do_sample:
                p = _probs(z[i], **warp_kw)
                tok, ok = accept_reject(p[None], qs[i][None], torch.tensor([x]),
                                        generator=generator)
                tok, ok = int(tok[0]), bool(ok[0])
            else:
                tok = int(z[i].argmax())
                ok = tok == x
            new.append(tok)
            if not ok:
                break
            kept += 1
        else:  # every proposal kept: the target's next token comes free
            if do_sample:
                p = _probs(z[k_now], **warp_kw)
                new.append(int(torch.multinomial(p.float(), 1, generator=generator)))
            else:
                new.append(int(z[k_now].argmax()))
        seq.extend(new)
        n_keep = n_before + len(new) - 1  # every token but the newest is in the caches
        for cache in t_caches:
            cache.crop(min(cache.n_tokens, n_keep))
        for cache in d_caches:
            cache.crop(min(cache.n_tokens, n_keep))
    out = torch.tensor([seq[:n_end]], device=prompt.device, dtype=prompt.dtype)
    return SpeculativeResult(out.reshape(*ids.shape[:-1], -1), max_new_tokens, t_passes,
                             d_passes, proposed, kept)
