"""The closed-form and tiled backward of softmax attention against autograd (float64).

The reference is attention one query row at a time (``attnlib_testing.attention_loop``),
itself checked against SDPA; autograd through it gives the reference gradients. With causal
attention and more queries than keys, the first ``N - M`` rows see no key: every
implementation gives them zeros, ``L = -inf``, and zero gradients, never NaN.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import attention_loop

from attnlib.kernels.backward import (
    FlashAttentionTorch,
    attention_backward,
    attention_forward,
    tiled_backward,
    tiled_forward,
)

# (H, G, N, M, d): plain, grouped-query with N not a multiple of 8 or 16, more keys than
# queries, more queries than keys (causal: rows with no key), one key
SHAPES = [(2, 2, 16, 16, 4), (4, 2, 19, 19, 8), (2, 1, 7, 12, 4), (4, 2, 20, 7, 8),
          (2, 1, 9, 1, 4)]


def _qkv(shape, device, seed=0):
    H, G, N, M, d = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).to(device)  # noqa: E731
    return (make(2, H, N, d).requires_grad_(), make(2, G, M, d).requires_grad_(),
            make(2, G, M, d).requires_grad_())


@pytest.mark.parametrize("causal", [False, True])
def test_the_loop_reference_is_sdpa(causal, device):
    """Where every row sees a key, attention row by row is SDPA with the bottom-right mask."""
    Q, K, V = _qkv((4, 2, 7, 12, 4), device)
    mask = torch.ones(7, 12, dtype=torch.bool, device=device).tril(12 - 7) if causal else None
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(attention_loop(Q, K, V, causal=causal), ref)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_closed_form_and_tiled_backward_match_autograd(shape, causal, device):
    Q, K, V = _qkv(shape, device)
    O = attention_loop(Q, K, V, causal=causal)
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


@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (16, 16)])
def test_rows_with_no_key_give_zeros_and_zero_gradients(blocks, device):
    """Causal, 6 queries over 2 keys: queries 0 to 3 sit before the first key."""
    Q, K, V = _qkv((2, 1, 6, 2, 4), device)
    dO = torch.ones(Q.shape, dtype=torch.float64, device=device)
    O_naive, P = attention_forward(Q, K, V, causal=True)
    O, L = tiled_forward(Q, K, V, causal=True, block_m=blocks[0], block_n=blocks[1])
    assert (O_naive[..., :4, :] == 0).all() and (P[..., :4, :] == 0).all()
    assert (O[..., :4, :] == 0).all() and (O[..., 4:, :] != 0).all()
    assert (L[..., :4] == float("-inf")).all() and L[..., 4:].isfinite().all()
    for grads in (attention_backward(Q, K, V, O, dO, causal=True),
                  tiled_backward(Q, K, V, O, dO, L, causal=True, block_m=blocks[0],
                                 block_n=blocks[1]),
                  torch.autograd.grad(FlashAttentionTorch.apply(Q, K, V, True, None, *blocks),
                                      (Q, K, V), dO)):
        assert all(g.isfinite().all() for g in grads)
        assert (grads[0][..., :4, :] == 0).all()  # dQ of a row that sees nothing


def test_the_log_sum_exp_is_that_of_the_scores(device):
    Q, K, V = _qkv((2, 2, 13, 13, 4), device)
    _, L = tiled_forward(Q, K, V, block_m=4, block_n=8)
    S = Q @ K.transpose(-1, -2) / 2.0
    torch.testing.assert_close(L, torch.logsumexp(S, -1), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("N", "M", "causal"), [(5, 5, False), (5, 5, True), (7, 3, True)])
def test_gradcheck_of_the_tiled_function(N, M, causal, device):
    Q, K, V = _qkv((2, 1, N, M, 3), device)
    Q, K, V = (x.detach()[:1].requires_grad_() for x in (Q, K, V))
    assert torch.autograd.gradcheck(
        lambda q, k, v: FlashAttentionTorch.apply(q, k, v, causal, None, 2, 4), (Q, K, V))


def test_non_contiguous_inputs(device):
    """Heads split from a (B, N, H, d) projection are a view with strides, read in place."""
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(2, 11, 4 + 2 + 2, 8, generator=gen, dtype=torch.float64).to(device)
    Q, K, V = (x.transpose(1, 2) for x in X.split([4, 2, 2], dim=2))
    assert not Q.is_contiguous()
    O, _ = tiled_forward(Q, K, V, causal=True, block_m=4, block_n=4)
    torch.testing.assert_close(O, attention_loop(Q, K, V, causal=True), atol=1e-12, rtol=1e-12)


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
    with pytest.raises(ValueError, match=r"block_m must be a positive int \(>= 1\); got 0"):
        tiled_forward(Q, Q, Q, block_m=0)
    with pytest.raises(ValueError, match="dO must have Q's shape"):
        attention_backward(Q, Q, Q, Q, Q[..., :2])
    with pytest.raises(ValueError, match="Q and K must share the last dimension"):
        attention_forward(Q, K[..., :4], K[..., :4])
    with pytest.raises(ValueError, match=r"L must have shape \(1, 3, 4\)"):
        tiled_backward(Q, Q, Q, Q, Q, Q)
    with pytest.raises(ValueError, match="scale must be a finite positive number"):
        attention_forward(Q, Q, Q, scale=-1.0)
