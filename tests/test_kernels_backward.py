"""The closed-form and tiled backward of softmax attention against autograd (float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib.kernels.backward import (
    FlashAttentionTorch,
    attention_backward,
    attention_forward,
    tiled_backward,
    tiled_forward,
)

# (H, G, N, M, d): plain, grouped-query with N not a multiple of 8 or 16, more keys than queries
SHAPES = [(2, 2, 16, 16, 4), (4, 2, 19, 19, 8), (2, 1, 7, 12, 4)]


def _qkv(shape, device, seed=0):
    H, G, N, M, d = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).to(device)  # noqa: E731
    return (make(2, H, N, d).requires_grad_(), make(2, G, M, d).requires_grad_(),
            make(2, G, M, d).requires_grad_())


def _reference(Q, K, V, causal):
    """SDPA on the kv heads repeated for each query head, the causal mask aligned at the end."""
    H, G, N, M = Q.shape[1], K.shape[1], Q.shape[2], K.shape[2]
    mask = torch.ones(N, M, dtype=torch.bool, device=Q.device).tril(M - N) if causal else None
    return F.scaled_dot_product_attention(Q, K.repeat_interleave(H // G, 1),
                                          V.repeat_interleave(H // G, 1), attn_mask=mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_closed_form_and_tiled_backward_match_autograd(shape, causal, device):
    Q, K, V = _qkv(shape, device)
    O = _reference(Q, K, V, causal)
    dO = torch.randn(O.shape, generator=torch.Generator().manual_seed(1),
                     dtype=torch.float64).to(device)
    expected = torch.autograd.grad(O, (Q, K, V), dO)
    O_naive, _ = attention_forward(Q, K, V, causal=causal)
    torch.testing.assert_close(O_naive, O, atol=1e-12, rtol=1e-12)
    closed = attention_backward(Q, K, V, O.detach(), dO, causal=causal)
    O_tiled, L = tiled_forward(Q, K, V, causal=causal, block_m=8, block_n=16)
    torch.testing.assert_close(O_tiled, O, atol=1e-12, rtol=1e-12)
    tiled = tiled_backward(Q, K, V, O_tiled, dO, L, causal=causal, block_m=8, block_n=16)
    for got_closed, got_tiled, want in zip(closed, tiled, expected, strict=True):
        torch.testing.assert_close(got_closed, want, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(got_tiled, want, atol=1e-12, rtol=1e-12)


def test_the_log_sum_exp_is_that_of_the_scores(device):
    Q, K, V = _qkv((2, 2, 13, 13, 4), device)
    _, L = tiled_forward(Q, K, V, block_m=4, block_n=8)
    S = Q @ K.transpose(-1, -2) / 2.0
    torch.testing.assert_close(L, torch.logsumexp(S, -1), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_of_the_tiled_function(causal, device):
    Q, K, V = _qkv((2, 1, 5, 5, 3), device)
    Q, K, V = (x.detach()[:1].requires_grad_() for x in (Q, K, V))
    assert torch.autograd.gradcheck(
        lambda q, k, v: FlashAttentionTorch.apply(q, k, v, causal, None, 2, 4), (Q, K, V))


def test_forgetting_the_rowsum_term_breaks_the_gradient(device):
    """The term D = rowsum(dO * O) matters: without it dQ and dK are wrong."""
    Q, K, V = _qkv((2, 2, 6, 6, 4), device)
    O, P = attention_forward(Q, K, V)
    dO = torch.ones_like(O) + O.detach()
    dQ, _, _ = attention_backward(Q, K, V, O.detach(), dO)
    s = 0.5
    wrong = s * (P * (dO @ V.transpose(-1, -2))) @ K
    assert (wrong - dQ).abs().max() > 1e-3


def test_bad_shapes_name_the_rule():
    Q, K = torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"G must divide the query heads H.*H=3, G=2"):
        attention_backward(Q, K, K, Q, Q)
    with pytest.raises(ValueError, match="K and V must have the same shape"):
        tiled_forward(Q, K, K[..., :4])
    with pytest.raises(ValueError, match="block_m must be a positive int; got 0"):
        tiled_forward(Q, Q, Q, block_m=0)
    with pytest.raises(ValueError, match="dO must have Q's shape"):
        attention_backward(Q, Q, Q, Q, Q[..., :2])
