"""Helpers shared by attnlib's tests (imported as a plain module, not a conftest)."""

from __future__ import annotations

import torch


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """``assert_close`` tolerances fitting each dtype's precision."""
    return {
        torch.float64: {"atol": 1e-10, "rtol": 1e-10},
        torch.float32: {"atol": 1e-5, "rtol": 1e-5},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    }[dtype]


def attention_loop(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, causal: bool = False,
                   scale: float | None = None) -> torch.Tensor:
    """Softmax attention one query row at a time, with no mask and no infinity: row ``i`` takes
    the keys it sees (all ``M``, or causal the first ``i + M - N + 1``: the queries are the last
    ``N`` positions), their softmax weights and the weighted sum of their values; a row that
    sees no key is zeros. ``Q (..., H, N, d)``, ``K (..., G, M, d)``, ``V (..., G, M, d_V)``,
    query head ``h`` reading kv head ``h // (H // G)``. Differentiable, for reference gradients.
    """
    H, G, N, M = Q.shape[-3], K.shape[-3], Q.shape[-2], K.shape[-2]
    s = Q.shape[-1] ** -0.5 if scale is None else scale
    K, V = (x.repeat_interleave(H // G, dim=-3) for x in (K, V))
    rows = []
    for i in range(N):
        seen = min(M, i + M - N + 1) if causal else M
        if seen <= 0:
            rows.append(Q.new_zeros((*Q.shape[:-2], V.shape[-1])))
            continue
        w = torch.softmax(s * Q[..., i:i + 1, :] @ K[..., :seen, :].mT, dim=-1)
        rows.append((w @ V[..., :seen, :]).squeeze(-2))
    return torch.stack(rows, dim=-2)


def assert_correct(label: str, answer: object, capsys) -> None:
    """``exercises.check(label, answer)`` accepts the answer and prints exactly that."""
    from attnlib import exercises

    result = exercises.check(label, answer)
    assert result.status == "correct" and result
    assert capsys.readouterr().out == f"{label}: correct.\n"


def assert_hint(label: str, answer: object, hint: str, capsys) -> None:
    """``exercises.check(label, answer)`` rejects the answer; its printed message holds ``hint``."""
    from attnlib import exercises

    result = exercises.check(label, answer)
    assert result.status == "incorrect" and not result
    out = capsys.readouterr().out
    assert out == result.message + "\n" and out.startswith(f"{label}: "), out
    assert hint in out, out


def randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Replace every parameter with random numbers, so gains of 1 and biases of 0 hide nothing."""
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device)
            p.copy_(0.5 * noise + (1.0 if p.dim() == 1 else 0.0))


@torch.no_grad()
def hold_weights(model, hf) -> None:
    """Copy a ``TinyDecoder``'s weights into a Hugging Face Llama-family causal LM of its
    shape (Llama, Mistral): embeddings, norms, attention and SwiGLU. The norms' gains are
    drawn in [0.5, 1.5] first, on both sides, so that gains of 1 hide nothing; Hugging Face
    multiplies from the left, so ``q_proj.weight = W_Q.T``."""
    hf.model.embed_tokens.weight.copy_(model.E)  # a tied lm_head shares this tensor
    hf.model.norm.weight.uniform_(0.5, 1.5)
    model.final_norm.g.copy_(hf.model.norm.weight)
    for block, layer in zip(model.blocks, hf.model.layers, strict=True):
        for norm, hf_norm in ((block.attn_norm, layer.input_layernorm),
                              (block.ffn_norm, layer.post_attention_layernorm)):
            hf_norm.weight.uniform_(0.5, 1.5)
            norm.g.copy_(hf_norm.weight)
        attn, mlp = layer.self_attn, layer.mlp
        for W, linear in ((block.attn.W_Q, attn.q_proj), (block.attn.W_K, attn.k_proj),
                          (block.attn.W_V, attn.v_proj), (block.attn.W_O, attn.o_proj),
                          (block.ffn.W_gate, mlp.gate_proj), (block.ffn.W_up, mlp.up_proj),
                          (block.ffn.W_down, mlp.down_proj)):
            linear.weight.copy_(W.T)
