"""Lesson 14's pieces as a reader writes them (the lesson's hidden solutions): each passes
its check, and the stubs the lesson commits are not implemented yet."""

from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def embed(E, ids):
    return E[ids]


def rms_norm(x, g, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * g


def rope(X, positions, base):
    d = X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=X.device) / d)
    angle = positions.to(torch.float64)[:, None] * theta  # (N, d/2)
    cos, sin = angle.cos().to(X.dtype), angle.sin().to(X.dtype)
    x, y = X[..., : d // 2], X[..., d // 2:]  # pair i is (i, i + d/2)
    return torch.cat((x * cos - y * sin, x * sin + y * cos), dim=-1)


def repeat_kv(K, H):
    return K.repeat_interleave(H // K.shape[-3], dim=-3)


def attend(Q, K, V):
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    n_q, n_kv = S.shape[-2:]
    hide = torch.ones(n_q, n_kv, dtype=torch.bool, device=Q.device).triu(1 + n_kv - n_q)
    return torch.softmax(S.masked_fill(hide, float("-inf")), dim=-1) @ V


def feed_forward(x, W_gate, W_up, W_down):
    return (torch.nn.functional.silu(x @ W_gate) * (x @ W_up)) @ W_down


class Cache:
    def __init__(self):
        self.K = self.V = None

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]

    def append(self, K, V):
        self.K = K if self.K is None else torch.cat((self.K, K), dim=-2)
        self.V = V if self.V is None else torch.cat((self.V, V), dim=-2)
        return self.K, self.V


def sample(logits, temperature, generator):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    P = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(P.reshape(-1, P.shape[-1]), 1,
                             generator=generator).reshape(*P.shape[:-1], 1)


SOLUTIONS = {"14.1": embed, "14.2": rms_norm, "14.3": rope, "14.4": repeat_kv,
             "14.5": attend, "14.6": feed_forward, "14.7": Cache, "14.8": sample}


@pytest.mark.parametrize("label", sorted(SOLUTIONS))
def test_the_lessons_solutions_are_correct(label):
    assert check(label, SOLUTIONS[label]).status == "correct"


def test_a_wrong_rope_pairing_is_named():
    def interleaved(X, positions, base):
        d = X.shape[-1]
        theta = base ** (-torch.arange(0, d, 2, dtype=X.dtype) / d)
        a = positions.to(X.dtype)[:, None] * theta
        x, y = X[..., 0::2], X[..., 1::2]
        return torch.stack((x * a.cos() - y * a.sin(), x * a.sin() + y * a.cos()), -1).flatten(-2)

    assert "rotate_half" in check("14.3", interleaved).message


# ---------------------------------------------------------------------------------------
# The holes a reader's first answers found: each now gets a message that names it
# ---------------------------------------------------------------------------------------


def _message(label, answer):
    result = check(label, answer)
    assert result.status == "incorrect", result.message
    return result.message


def test_a_cache_with_class_level_lists_is_told_its_caches_share():
    class Shared:
        Ks: list = []  # noqa: RUF012 (the mistake under test)
        Vs: list = []  # noqa: RUF012

        def append(self, K, V):
            Shared.Ks.append(K)
            Shared.Vs.append(V)
            return torch.cat(Shared.Ks, -2), torch.cat(Shared.Vs, -2)

        @property
        def n_tokens(self):
            return sum(k.shape[-2] for k in Shared.Ks)

    for _ in range(2):  # the lists grow from one run of the check to the next: refused both
        assert "two caches share their tensors" in _message("14.7", Shared)


def test_n_tokens_written_as_a_method_is_told_so():
    from attnlib.models.assemble import ReaderCache

    class Method(ReaderCache):
        def n_tokens(self):
            return 0 if self.K is None else self.K.shape[-2]

    assert "n_tokens is a method here" in _message("14.7", Method)


def test_eps_slips_are_named():
    outside = _message("14.2", lambda x, g, eps: x / ((x * x).mean(-1, keepdim=True).sqrt()
                                                        + eps) * g)
    assert "eps goes inside the square root" in outside
    ignored = _message("14.2", lambda x, g, eps: x * torch.rsqrt((x * x).mean(-1, keepdim=True))
                       * g)
    assert "use eps" in ignored


def test_float32_work_inside_a_float64_piece_is_told_to_keep_the_dtype():
    def via_float32(x, g, eps):
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * g.float()).double()

    assert "compute in the input's dtype, float64 here" in _message("14.2", via_float32)
    returned = _message("14.2", lambda x, g, eps: via_float32(x, g, eps).float())
    assert "expected torch.float64: compute in the inputs' dtype" in returned


def test_a_sampler_that_ignores_the_generator_is_told_to_pass_it():
    def unseeded(logits, T, generator):
        if T == 0:
            return logits.argmax(-1, keepdim=True)
        return torch.multinomial(torch.softmax(logits / T, -1), 1)

    assert "pass generator=generator to torch.multinomial" in _message("14.8", unseeded)
