"""attnlib.gates.output_gate against an explicit loop over heads, rows and coordinates."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib.gates
from attnlib.gates import output_gate
from attnlib.heads import merge_heads


def test_module_is_reachable_as_attribute():
    assert attnlib.gates.output_gate is output_gate


def test_heads_by_a_loop(gen):
    H, N, d_head, d_in = 3, 4, 2, 5
    Y = torch.randn(H, N, d_head, generator=gen, dtype=torch.float64)
    X = torch.randn(N, d_in, generator=gen, dtype=torch.float64)
    W = torch.randn(d_in, H * d_head, generator=gen, dtype=torch.float64)
    out = output_gate(Y, X, W)
    for h in range(H):
        for n in range(N):
            for c in range(d_head):
                logit = sum(float(X[n, a] * W[a, h * d_head + c]) for a in range(d_in))
                gate = 1 / (1 + math.exp(-logit))
                assert math.isclose(float(out[h, n, c]), float(Y[h, n, c]) * gate, rel_tol=1e-12)
    # gating before or after the merge is the same map
    torch.testing.assert_close(merge_heads(out), merge_heads(Y) * torch.sigmoid(X @ W))


def test_single_head_batched(device, gen):
    Y = torch.randn(2, 4, 3, generator=gen).to(device)
    X = torch.randn(2, 4, 6, generator=gen).to(device)
    W = torch.randn(6, 3, generator=gen).to(device)
    torch.testing.assert_close(output_gate(Y, X, W), Y / (1 + torch.exp(-(X @ W))))


def test_gate_only_shrinks(gen):
    Y = torch.randn(2, 5, 4, generator=gen)
    out = output_gate(Y, torch.randn(5, 3, generator=gen), torch.randn(3, 8, generator=gen) * 5)
    assert (out.abs() <= Y.abs()).all() and (out.abs() < Y.abs()).any()


@pytest.mark.parametrize(
    ("thunk", "exc", "words"),
    [
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5), torch.randn(5, 2)),
            ValueError,
            ["W_theta", "(5, 3)", "(5, 2)"],
        ),
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5), torch.randn(6, 3)),
            ValueError,
            ["W_theta", "5 rows"],
        ),
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5).double(), torch.randn(5, 3)),
            TypeError,
            ["dtype", "float64"],
        ),
        (
            lambda: output_gate(torch.randn(2, 4, 3), torch.randn(3, 5), torch.randn(5, 6)),
            ValueError,
            ["N = 3", "(2, 4, 3)"],
        ),
    ],
)
def test_bad_input_is_named(thunk, exc, words):
    with pytest.raises(exc) as info:
        thunk()
    for w in words:
        assert w in str(info.value), str(info.value)
