"""attnlib.core.masks against explicit double loops and PyTorch's own conventions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib import attention, causal_mask, key_padding_mask, sliding_window_mask
from attnlib.core.masks import position_ids


@pytest.mark.parametrize("n_q,n_kv", [(1, 1), (4, 4), (2, 6), (6, 2), (5, 9)])
def test_causal_mask_bottom_right(device, n_q, n_kv):
    ref = torch.tensor([[j <= i + (n_kv - n_q) for j in range(n_kv)] for i in range(n_q)])
    m = causal_mask(n_q, n_kv, device=device)
    assert m.dtype == torch.bool and m.device.type == device.type
    assert torch.equal(m.cpu(), ref)


def test_square_causal_is_torch_tril_and_sdpa_is_causal():
    assert torch.equal(causal_mask(5), torch.ones(5, 5, dtype=torch.bool).tril())
    Q, K, V = (torch.randn(1, 5, 4, dtype=torch.float64) for _ in range(3))
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    torch.testing.assert_close(attention(Q, K, V, mask=causal_mask(5)), ref)


def test_last_query_sees_every_key():
    assert causal_mask(1, 7).all()
    assert causal_mask(3, 7)[-1].all()


@pytest.mark.parametrize("window", [1, 2, 3, 10])
@pytest.mark.parametrize("n_q,n_kv", [(6, 6), (2, 6)])
def test_sliding_window(window, n_q, n_kv):
    off = n_kv - n_q
    ref = torch.tensor(
        [[i + off - window < j <= i + off for j in range(n_kv)] for i in range(n_q)]
    )
    m = sliding_window_mask(n_q, n_kv, window=window)
    assert torch.equal(m, ref)
    assert (m.sum(-1) <= window).all()
    if window >= n_kv:
        assert torch.equal(m, causal_mask(n_q, n_kv))


def test_key_padding_mask_matches_loop_and_multihead_attention_convention(device):
    lengths = torch.tensor([3, 1, 5], device=device)
    m = key_padding_mask(lengths, 5)
    assert m.shape == (3, 1, 5) and m.device.type == device.type
    ref = torch.tensor([[j < n for j in range(5)] for n in [3, 1, 5]])
    assert torch.equal(m[:, 0].cpu(), ref)
    # nn.MultiheadAttention's key_padding_mask uses the opposite convention (True = pad).
    mha_style = torch.arange(5, device=device)[None, :] >= lengths[:, None]
    assert torch.equal(~m[:, 0], mha_style)


def test_padding_mask_ignores_padded_keys(gen):
    Q = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    K = torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
    V = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    Y = attention(Q, K, V, mask=key_padding_mask([4, 6], 6))
    torch.testing.assert_close(Y[0], attention(Q[0], K[0, :4], V[0, :4]))
    torch.testing.assert_close(Y[1], attention(Q[1], K[1], V[1]))


def test_combined_causal_and_padding(gen):
    Q = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    V = torch.randn(2, 5, 2, generator=gen, dtype=torch.float64)
    pad = key_padding_mask([3, 5], 5)
    both = attention(Q, Q, V, mask=pad, causal=True, impl="explicit")
    explicit = attention(Q, Q, V, mask=pad & causal_mask(5), impl="explicit")
    torch.testing.assert_close(both, explicit)


def test_position_ids_count_real_tokens_only(device):
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1], [1, 1, 0, 1, 0]],
                        device=device)
    ref = []
    for row in mask.tolist():  # an explicit loop: the count of real tokens so far, minus 1
        seen, out = 0, []
        for real in row:
            seen += real
            out.append(seen - 1 if real else 0)
        ref.append(out)
    assert ref[1] == [0, 0, 0, 1, 2]  # lesson 04's left-padded row
    for m in (mask, mask.bool()):
        assert torch.equal(position_ids(m).cpu(), torch.tensor(ref))
    assert position_ids(mask).dtype == torch.long


@pytest.mark.parametrize(
    "mask,error,words",
    [([1, 1], TypeError, "torch.Tensor"), (torch.tensor([0.0, 1.0]), TypeError, "float32"),
     (torch.tensor([1, 2]), ValueError, "got the value 2"),
     (torch.tensor(1), ValueError, "scalar")],
)
def test_position_ids_refuse_a_mask_that_is_not_bools_or_0_and_1(mask, error, words):
    with pytest.raises(error, match=f"attention_mask must .*{words}"):
        position_ids(mask)
