"""Benchmark 3: greedy cached decoding, attnlib's TinyDecoder against Hugging Face's Llama.

Both models have the same shape (:data:`bench_decode.CONFIG`: vocabulary 256, width 128,
2 layers, 4 heads, SwiGLU 512, tied embeddings) and the same weights: TinyDecoder's are
copied into a ``LlamaForCausalLM`` (Hugging Face multiplies from the left, so
``q_proj.weight = W_Q.T``). Both decode greedily with a cache from the same prompt, and
they must produce identical tokens.

Hugging Face is timed two ways: ``generate(do_sample=False, use_cache=True)``, what a user
calls, and a hand-written greedy loop over ``forward`` with a ``DynamicCache`` and
``logits_to_keep=1``, its leanest cached path (``generate`` runs the same forward plus
logits processors and stopping criteria). The target compares attnlib with the loop.

A third reference, ``eager``, is the same model written out as straight-line PyTorch
(:func:`eager_greedy`): the tensor operations attnlib's cached step runs, in the same order
on the same weights, with no modules, no checks and no layer contract around them. It is
the least that eager PyTorch spends per token on this model on this machine, whoever writes
it; attnlib's time over it is what the library's structure costs, and its time over Hugging
Face's loop is the lowest ratio any eager decoder of this shape could reach here.

Every variant runs under ``torch.inference_mode()`` with the same threads, in the same
process, taking turns within each repeat.
"""

from __future__ import annotations

from functools import partial

import bench_decode
import torch
import torch.nn.functional as F
import transformers
from timing import median_seconds
from transformers import DynamicCache, GenerationConfig, LlamaConfig, LlamaForCausalLM

from attnlib.layers import TinyDecoder

PROMPT_LEN = 8


def llama_twin(model: TinyDecoder, pad_token_id: int | None = None) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` of ``model``'s shape (a grouped-query TinyDecoder with RoPE and
    tied embeddings), holding ``model``'s weights."""
    attn, ffn = model.blocks[0].attn, model.blocks[0].ffn
    config = LlamaConfig(
        vocab_size=model.vocab_size, hidden_size=model.d_model,
        num_hidden_layers=model.n_layers, num_attention_heads=attn.n_heads,
        num_key_value_heads=attn.n_kv_heads, head_dim=attn.d_head,
        intermediate_size=ffn.d_ff, hidden_act="silu",
        rms_norm_eps=1e-6,  # attnlib's RMSNorm default
        rope_theta=attn.rope_base,  # both pair channels (i, i + d/2)
        tie_word_embeddings=True, max_position_embeddings=4096,
        bos_token_id=None, eos_token_id=None, pad_token_id=pad_token_id,  # never stop early
    )
    hf = LlamaForCausalLM(config).to(model.E.device).eval()
    ported = {}

    def put(name: str, value: torch.Tensor) -> None:
        ported[name] = value

    put("model.embed_tokens.weight", model.E)  # lm_head.weight is the same tensor (tied)
    for i, block in enumerate(model.blocks):
        p = f"model.layers.{i}."
        put(p + "input_layernorm.weight", block.attn_norm.g)
        put(p + "self_attn.q_proj.weight", block.attn.W_Q.T)
        put(p + "self_attn.k_proj.weight", block.attn.W_K.T)
        put(p + "self_attn.v_proj.weight", block.attn.W_V.T)
        put(p + "self_attn.o_proj.weight", block.attn.W_O.T)
        put(p + "post_attention_layernorm.weight", block.ffn_norm.g)
        put(p + "mlp.gate_proj.weight", block.ffn.W_gate.T)
        put(p + "mlp.up_proj.weight", block.ffn.W_up.T)
        put(p + "mlp.down_proj.weight", block.ffn.W_down.T)
    put("model.norm.weight", model.final_norm.g)
    params = dict(hf.named_parameters())  # the tied lm_head.weight is listed once
    if set(params) != set(ported):
        raise RuntimeError(f"weights not ported: {sorted(set(params) ^ set(ported))}")
    with torch.no_grad():
        for name, value in ported.items():
            params[name].copy_(value)
    if hf.lm_head.weight is not hf.model.embed_tokens.weight:
        raise RuntimeError("LlamaForCausalLM did not tie lm_head to embed_tokens")
    return hf


def hf_greedy(hf: LlamaForCausalLM, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy cached decoding with ``forward``: prefill, then one token per step."""
    cache = DynamicCache(config=hf.config)
    logits = hf(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1).logits
    out = [prompt]
    for i in range(n):
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        out.append(next_id)
        if i + 1 < n:
            logits = hf(input_ids=next_id, cache=cache, use_cache=True, logits_to_keep=1).logits
    return torch.cat(out, dim=-1)


def eager_greedy(model: TinyDecoder, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy cached decoding of ``model`` (pre-norm RMSNorm, SwiGLU, half-split RoPE, tied
    embeddings: the benchmark's shape) as straight-line PyTorch: the operations of attnlib's
    step, without attnlib around them. Caches preallocated; the rotation tables of every
    position made once, by the layer, before the loop (``sin`` carries rotate-half's sign)."""
    attn0 = model.blocks[0].attn
    H, G, d = attn0.n_heads, attn0.n_kv_heads, attn0.d_head
    n_max = prompt.shape[-1] + n
    _, cos, sin = attn0.rope_tables(None, n_max, 0, model.E.dtype, prompt.device)  # (n_max, d)
    layers = [(b.attn_norm.g, b.attn.W_Q, b.attn.W_K, b.attn.W_V, b.attn.W_O, b.ffn_norm.g,
               b.ffn.W_gate, b.ffn.W_up, b.ffn.W_down) for b in model.blocks]
    eps = model.final_norm.eps
    B, D = prompt.shape[0], model.d_model
    caches = [(prompt.new_empty((B, G, n_max, d), dtype=model.E.dtype),
               prompt.new_empty((B, G, n_max, d), dtype=model.E.dtype)) for _ in layers]

    def heads(T: torch.Tensor, h: int) -> torch.Tensor:  # (B, N, h d) -> (B, h, N, d)
        return T.view(B, T.shape[1], h, d).transpose(1, 2)

    def rotate(T: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return T * c + T.roll(d // 2, dims=-1) * s

    out, step, held = [prompt], prompt, 0
    for _ in range(n):
        m = step.shape[1]
        c, s = cos[held:held + m], sin[held:held + m]
        x = model.E[step]  # (B, m, D)
        for (g1, W_Q, W_K, W_V, W_O, g2, W_gate, W_up, W_down), (K_all, V_all) in zip(
                layers, caches, strict=True):
            h = F.rms_norm(x, (D,), g1, eps)
            Q, K, V = heads(h @ W_Q, H), heads(h @ W_K, G), heads(h @ W_V, G)
            Q, K = rotate(Q, c, s), rotate(K, c, s)
            K_all[:, :, held:held + m] = K
            V_all[:, :, held:held + m] = V
            Y = F.scaled_dot_product_attention(
                Q, K_all[:, :, :held + m], V_all[:, :, :held + m], is_causal=m > 1,
                enable_gqa=G < H)
            x = x + Y.transpose(1, 2).reshape(B, m, H * d) @ W_O
            h = F.rms_norm(x, (D,), g2, eps)
            x = x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down
        logits = F.rms_norm(x[:, -1:], (D,), model.final_norm.g, eps) @ model.E.mT
        held += m
        step = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        out.append(step)
    return torch.cat(out, dim=-1)


def hf_generate(hf: LlamaForCausalLM, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy cached decoding with Hugging Face's ``generate``."""
    config = GenerationConfig(
        max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True,
        eos_token_id=None, pad_token_id=0,  # no padding happens: one sequence
    )
    return hf.generate(prompt, generation_config=config)


def _run(fn, out: dict, name: str) -> None:
    with torch.inference_mode():
        out[name] = fn()


def run(device: torch.device, n: int, repeats: int) -> dict:
    """Median seconds per new token (prefill included) of each decoder; tokens compared."""
    transformers.logging.set_verbosity_error()
    model = TinyDecoder(**bench_decode.CONFIG, seed=0, device=device).eval()
    hf = llama_twin(model)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.vocab_size, (1, PROMPT_LEN), generator=gen).to(device)
    decoders = {
        "attnlib": partial(model.generate, prompt, n, use_cache=True),
        "hf_loop": partial(hf_greedy, hf, prompt, n),
        "hf_generate": partial(hf_generate, hf, prompt, n),
        "eager": partial(eager_greedy, model, prompt, n),
    }
    out: dict[str, torch.Tensor] = {}
    fns = {name: partial(_run, fn, out, name) for name, fn in decoders.items()}
    seconds = median_seconds(fns, device, repeats=repeats)
    per_token = {name: s / n for name, s in seconds.items()}
    identical = all(torch.equal(out["attnlib"], out[k]) for k in ("hf_loop", "hf_generate",
                                                                   "eager"))
    return {
        "new_tokens": n,
        "prompt_tokens": PROMPT_LEN,
        "config": bench_decode.CONFIG,
        "transformers": transformers.__version__,
        "hf_attn_implementation": hf.config._attn_implementation,
        "seconds": seconds,
        "seconds_per_token": per_token,
        "attnlib_over_hf_loop": per_token["attnlib"] / per_token["hf_loop"],
        "attnlib_over_hf_generate": per_token["attnlib"] / per_token["hf_generate"],
        "attnlib_over_eager": per_token["attnlib"] / per_token["eager"],
        "eager_over_hf_loop": per_token["eager"] / per_token["hf_loop"],
        "tokens_identical": identical,
    }
