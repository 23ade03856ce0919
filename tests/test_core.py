"""attnlib.core against PyTorch's SDPA, closed forms and explicit loops."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import tolerances
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib
from attnlib import attention, attention_weights, causal_mask, row_normalise, similarity

DTYPES = [torch.float32, torch.float64]


def _qkv(shape_q, shape_kv, d_v=None, *, dtype=torch.float64, device="cpu", gen=None):
    *batch_q, n_q, d = shape_q
    *batch_kv, n_kv, _ = shape_kv
    d_v = d if d_v is None else d_v
    Q = torch.randn(*batch_q, n_q, d, dtype=dtype, generator=gen).to(device)
    K = torch.randn(*batch_kv, n_kv, d, dtype=dtype, generator=gen).to(device)
    V = torch.randn(*batch_kv, n_kv, d_v, dtype=dtype, generator=gen).to(device)
    return Q, K, V


def _loop_attention(Q, K, V, f, scale, allowed=None):
    """Y[i] = sum_j f(s_ij) V[j] / sum_j f(s_ij), one query and one key at a time."""
    n_q, n_kv = Q.shape[0], K.shape[0]
    Y = torch.zeros(n_q, V.shape[1], dtype=Q.dtype)
    for i in range(n_q):
        num = torch.zeros(V.shape[1], dtype=Q.dtype)
        den = 0.0
        for j in range(n_kv):
            if allowed is not None and not allowed[i, j]:
                continue
            w = f(torch.dot(Q[i], K[j]) * scale)
            num = num + w * V[j]
            den = den + w
        if den > 0:
            Y[i] = num / den
    return Y


def _row_by_row(Q, K, V, allowed):
    """Softmax over each query's allowed keys only, one (batch, query) row at a time.

    The keys a row may see are selected first; a row that may see none is left at zero,
    the documented result, by never computing it.
    """
    Y = torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    for b in range(Q.shape[0]):
        for i in range(Q.shape[1]):
            keys = [j for j in range(K.shape[1]) if allowed is None or allowed[i][j]]
            if keys:
                logits = Q[b, i] @ K[b, keys].T / math.sqrt(Q.shape[-1])
                Y[b, i] = torch.softmax(logits, dim=-1) @ V[b, keys]
    return Y


def test_seed_worked_example():
    """The classic 3-key example: weights (0.576, 0.284, 0.140), output about 15.6."""
    Q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    V = torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64)
    e = [math.exp(1 / math.sqrt(2)), 1.0, math.exp(-1 / math.sqrt(2))]
    p = torch.tensor([[x / sum(e) for x in e]], dtype=torch.float64)
    torch.testing.assert_close(attention_weights(Q, K), p)
    torch.testing.assert_close(attention_weights(Q, K), torch.tensor([[0.576, 0.284, 0.140]],
                               dtype=torch.float64), atol=5e-4, rtol=0)
    y = attention(Q, K, V, impl="explicit")
    torch.testing.assert_close(y, p @ V)
    assert round(y.item(), 1) == 15.6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", ["auto", "explicit"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(device, dtype, impl, causal, gen):
    Q, K, V = _qkv((2, 3, 7, 8), (2, 3, 7, 8), 5, dtype=dtype, device=device, gen=gen)
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
    out = attention(Q, K, V, causal=causal, impl=impl)
    torch.testing.assert_close(out, ref, **tolerances(dtype))


@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_boolean_mask_matches_sdpa(device, impl, gen):
    Q, K, V = _qkv((2, 4, 6, 8), (2, 4, 9, 8), dtype=torch.float32, device=device, gen=gen)
    mask = torch.rand(2, 1, 6, 9, generator=gen).to(device) > 0.3
    mask[..., 0] = True  # every row keeps a key, so SDPA has no NaN to compare against
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    out = attention(Q, K, V, mask=mask, impl=impl)
    torch.testing.assert_close(out, ref, **tolerances(torch.float32))


@pytest.mark.parametrize("impl", ["auto", "explicit"])
@pytest.mark.parametrize("n_q,n_kv", [(1, 9), (3, 9), (9, 9)])
def test_causal_fewer_queries_than_keys(device, impl, n_q, n_kv, gen):
    """Bottom-right alignment: the queries are the last n_q positions of the sequence."""
    Q, K, V = _qkv((2, n_q, 8), (2, n_kv, 8), dtype=torch.float64, device=device, gen=gen)
    offset = n_kv - n_q
    explicit = torch.tensor([[j <= i + offset for j in range(n_kv)] for i in range(n_q)])
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=explicit.to(device))
    torch.testing.assert_close(attention(Q, K, V, causal=True, impl=impl), ref)
    # The last query of a causal call with a prefix equals the last row of the full call.
    prefix = torch.randn(2, offset, 8, dtype=torch.float64, generator=gen).to(device)
    Qfull = torch.cat([prefix, Q], 1)
    full = attention(Qfull, K, V, causal=True, impl=impl)
    torch.testing.assert_close(attention(Q, K, V, causal=True, impl=impl), full[:, offset:])


def test_bfloat16_matches_float32_reference(device, gen):
    Q, K, V = _qkv((2, 4, 16, 32), (2, 4, 16, 32), dtype=torch.float32, device=device, gen=gen)
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    for impl in ("auto", "explicit"):
        out = attention(Q.bfloat16(), K.bfloat16(), V.bfloat16(), causal=True, impl=impl)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), ref, **tolerances(torch.bfloat16))


@pytest.mark.parametrize("name,f", [
    ("softmax", torch.exp),
    ("softplus", lambda s: torch.log1p(torch.exp(s))),
    ("sigmoid", lambda s: 1 / (1 + torch.exp(-s))),
    ("relu", lambda s: torch.clamp(s, min=0)),
])
def test_named_kernels_match_loop(name, f, gen):
    Q, K, V = _qkv((5, 4), (6, 4), 3, gen=gen)
    allowed = causal_mask(5, 6)
    ref = _loop_attention(Q, K, V, f, 0.5, allowed)
    out = attention(Q, K, V, kernel=name, mask=allowed, scale=0.5, impl="explicit")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(attention(Q, K, V, kernel=name, mask=allowed, scale=0.5), ref)


def test_callable_kernel_and_similarity(gen):
    Q, K, V = _qkv((4, 3), (5, 3), gen=gen)
    cube = lambda s: (1 + s) ** 2  # noqa: E731 - a positive polynomial kernel
    ref = _loop_attention(Q, K, V, lambda s: (1 + s) ** 2, 1 / math.sqrt(3))
    torch.testing.assert_close(attention(Q, K, V, kernel=cube), ref)
    A = similarity(Q, K, kernel=cube)
    torch.testing.assert_close(A, (1 + Q @ K.T / math.sqrt(3)) ** 2)
    torch.testing.assert_close(row_normalise(A) @ V, ref)


def test_weights_are_rows_of_softmax(gen):
    Q, K, _ = _qkv((3, 6, 8), (3, 10, 8), gen=gen)
    P = attention_weights(Q, K, scale=0.3)
    torch.testing.assert_close(P, torch.softmax(0.3 * Q @ K.transpose(-2, -1), dim=-1))
    torch.testing.assert_close(P.sum(-1), torch.ones(3, 6, dtype=torch.float64))


@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_fully_masked_rows_are_zero_not_nan(device, impl, gen):
    Q, K, V = _qkv((2, 5, 4), (2, 5, 4), dtype=torch.float32, device=device, gen=gen)
    mask = torch.ones(2, 5, 5, dtype=torch.bool, device=device)
    mask[0, 2] = False
    mask[1] = False
    Y = attention(Q, K, V, mask=mask, impl=impl)
    assert torch.isfinite(Y).all()
    assert (Y[0, 2] == 0).all() and (Y[1] == 0).all()
    ref = F.scaled_dot_product_attention(Q[0:1], K[0:1], V[0:1], attn_mask=mask[0:1])
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(Y[0, keep], ref[0, keep])
    P = attention_weights(Q, K, mask=mask)
    assert torch.isfinite(P).all() and (P[1] == 0).all()
    # More queries than keys with causal: the first rows see nothing.
    Y2 = attention(Q, K[:, :2], V[:, :2], causal=True, impl=impl)
    assert torch.isfinite(Y2).all() and (Y2[:, :3] == 0).all()


@pytest.mark.parametrize("impl", ["auto", "explicit"])
@pytest.mark.parametrize("magnitude", [1e2, 1e3, 1e4])
def test_huge_logits_stay_finite(impl, magnitude):
    Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]]) * magnitude
    K = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, -1.0]]) * magnitude
    V = torch.tensor([[1.0], [2.0], [3.0]])
    Y = attention(Q, K, V, scale=1.0, impl=impl)
    assert torch.isfinite(Y).all()
    # The largest logit wins outright: row 0 -> key 0, row 1 -> key 1.
    torch.testing.assert_close(Y, torch.tensor([[1.0], [2.0]]))
    P = attention_weights(Q, K, scale=1.0)
    assert torch.isfinite(P).all()


def test_default_scale_is_inverse_sqrt_d(gen):
    Q, K, V = _qkv((4, 16), (4, 16), gen=gen)
    torch.testing.assert_close(attention(Q, K, V), attention(Q, K, V, scale=0.25))


def test_row_normalise_zero_rows():
    A = torch.tensor([[2.0, 2.0], [0.0, 0.0]])
    torch.testing.assert_close(row_normalise(A), torch.tensor([[0.5, 0.5], [0.0, 0.0]]))


def test_kernels_registry_is_positive():
    s = torch.linspace(-30, 30, 101, dtype=torch.float64)
    for name, f in attnlib.KERNELS.items():
        values = f(s)
        assert (values >= 0).all(), name
        if name != "relu":
            assert (values > 0).all(), name


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3), n_q=st.integers(1, 9), n_kv=st.integers(1, 9), d=st.integers(1, 12),
    d_v=st.integers(1, 7), causal=st.booleans(), seed=st.integers(0, 2**16),
)
def test_property_random_shapes_match_sdpa(b, n_q, n_kv, d, d_v, causal, seed):
    g = torch.Generator().manual_seed(seed)
    Q, K, V = _qkv((b, n_q, d), (b, n_kv, d), d_v, gen=g)
    offset = n_kv - n_q  # bottom-right: query i sits at position i + offset
    allowed = [[j <= i + offset for j in range(n_kv)] for i in range(n_q)] if causal else None
    ref = _row_by_row(Q, K, V, allowed)
    if not causal:
        torch.testing.assert_close(ref, F.scaled_dot_product_attention(Q, K, V))
    for impl in ("auto", "explicit"):
        torch.testing.assert_close(attention(Q, K, V, causal=causal, impl=impl), ref)
