"""attnlib against Hugging Face's attention modules: ``LlamaAttention`` and ``DeepseekV3Attention``.

Each test builds a tiny random configuration (nothing is downloaded), instantiates the
Hugging Face module directly, and ports its weights into attnlib with attnlib's own
converters, ``attnlib.models.convert.from_hf_llama_attention`` and
``attnlib.models.convert.mla_from_deepseek``
(attnlib multiplies from the right, so ``W_Q = q_proj.weight.T`` and so on). The outputs
must agree to float32 precision.

Hugging Face runs its ``"eager"`` attention (an explicit softmax), fed an additive 4-D
causal mask built here: ``0`` where a query may attend, the most negative float32
elsewhere. That is what ``eager_attention_forward`` adds to the logits. The last test
compares a whole ``TinyDecoder`` with ``LlamaForCausalLM``, which builds its own mask.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("transformers")  # the references; installed from requirements.txt

from attnlib_testing import hold_weights
from transformers import DeepseekV3Config, DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaRotaryEmbedding,
)

from attnlib import GroupedQueryAttention, KVCache, LatentCache, TinyDecoder
from attnlib.models.convert import from_hf_llama_attention, mla_from_deepseek

# rtol 2e-5 is the target precision. atol covers entries that come out near zero through
# cancellation: such an entry sums terms of size ~0.1 to 1 with float32 rounding
# (eps = 1.2e-7) in each, so its absolute error is a few 1e-7 while its relative error is
# unbounded. 1e-6 is about 8 float32 ulps of 1.0, a few times the largest absolute
# difference seen here (3e-7) and far below the outputs' size (entries up to ~1).
TOL = {"rtol": 2e-5, "atol": 1e-6}
BATCH, N_TOKENS, N_PREFILL = 2, 9, 5
ROPE_THETA = 10000.0


def additive_causal_mask(n_q: int, n_kv: int, device: torch.device) -> torch.Tensor:
    """``(1, 1, n_q, n_kv)``: 0 where query ``i`` may see key ``j``, float32 min elsewhere.

    Bottom-right aligned: the queries are the last ``n_q`` of ``n_kv`` tokens, so query
    ``i`` sees keys ``j <= i + n_kv - n_q``.
    """
    allowed = torch.ones(n_q, n_kv, dtype=torch.bool, device=device).tril(n_kv - n_q)
    mask = torch.zeros(n_q, n_kv, device=device).masked_fill(~allowed, torch.finfo().min)
    return mask[None, None]


def position_ids(start: int, n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, start + n, device=device).expand(BATCH, n)


# ---------------------------------------------------------------------------------------
# Llama: grouped-query attention with RoPE
# ---------------------------------------------------------------------------------------

LLAMA = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}


def half_split_to_interleaved(d: int) -> torch.Tensor:
    """Source columns that rewrite one head's half-split layout in the interleaved one.

    Half-split RoPE (Hugging Face) rotates the pair ``(i, i + d/2)`` by ``theta_i``;
    interleaved RoPE (Meta's original code) rotates ``(2i, 2i + 1)`` by ``theta_i``. The
    same rotation in the other layout therefore needs column ``2i`` to hold half-split
    column ``i`` and column ``2i + 1`` to hold column ``i + d/2``:
    ``(0, d/2, 1, d/2 + 1, ..., d/2 - 1, d - 1)``. Queries and keys move together, so
    every dot product, and hence every logit, is unchanged.
    """
    i = torch.arange(d // 2)
    return torch.stack((i, i + d // 2), dim=-1).flatten()


def permute_columns(W: torch.Tensor, n_heads: int, src: torch.Tensor) -> torch.Tensor:
    """Reorder the columns of each head's block of ``W (d_in, n_heads * d)`` by ``src``."""
    d_in, width = W.shape
    return W.reshape(d_in, n_heads, width // n_heads)[..., src].reshape(d_in, width)


def meta_to_hf(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``permute`` of Hugging Face's ``convert_llama_weights_to_hf.py``, on ``(out, in)``."""
    dim1, dim2 = w.shape
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def llama(device: torch.device) -> tuple[LlamaConfig, LlamaAttention, LlamaRotaryEmbedding]:
    config = LlamaConfig(**LLAMA, rope_theta=ROPE_THETA, attn_implementation="eager")
    hf = LlamaAttention(config, layer_idx=0).to(device).eval()
    return config, hf, LlamaRotaryEmbedding(config).to(device)


def port_llama(hf: LlamaAttention, src: torch.Tensor | None = None) -> GroupedQueryAttention:
    """attnlib GQA with ``hf``'s weights (``from_hf_llama_attention``); with ``src``, in the
    interleaved RoPE layout, each head's query and key columns reordered by ``src``."""
    attn = from_hf_llama_attention(hf)
    if src is None:
        return attn
    H, G = attn.n_heads, attn.n_kv_heads
    interleaved = GroupedQueryAttention(attn.d_in, H, G, attn.d_head, rope_base=attn.rope_base,
                                        rope_interleaved=True, device=attn.W_Q.device)
    interleaved.load_state_dict(attn.state_dict())
    with torch.no_grad():
        interleaved.W_Q.copy_(permute_columns(attn.W_Q, H, src))
        interleaved.W_K.copy_(permute_columns(attn.W_K, G, src))
    return interleaved


def run_hf(
    hf: LlamaAttention | DeepseekV3Attention,
    rotary: LlamaRotaryEmbedding | DeepseekV3RotaryEmbedding,
    X: torch.Tensor,
    start: int = 0,
    cache: DynamicCache | None = None,
) -> torch.Tensor:
    """Hugging Face's causal forward of ``X``, the tokens at positions ``start, start + 1, ...``."""
    n = X.shape[-2]
    cos_sin = rotary(X, position_ids(start, n, X.device))
    mask = additive_causal_mask(n, start + n, X.device)
    # the cache's keyword: past_key_values in transformers 5.0 (Colab's), cache later
    name = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
    return hf(X, position_embeddings=cos_sin, attention_mask=mask, **{name: cache})[0]


@torch.no_grad()
def test_llama_attention_half_split(device):
    config, hf, rotary = llama(device)
    attn = port_llama(hf)  # Hugging Face's rotate_half pairs (i, i + d/2)
    X = torch.randn(BATCH, N_TOKENS, config.hidden_size, device=device)
    Y_hf = run_hf(hf, rotary, X)
    assert_close(attn(X, causal=True), Y_hf, **TOL)
    assert_close(attn(X, causal=True, impl="explicit"), Y_hf, **TOL)


@torch.no_grad()
def test_llama_attention_interleaved_through_the_column_permutation(device):
    config, hf, rotary = llama(device)
    H, d = config.num_attention_heads, config.head_dim
    src = half_split_to_interleaved(d)
    # The permutation is the inverse of the one Hugging Face's Meta -> HF conversion
    # applies to the rows of q_proj.weight: converting the interleaved weights back
    # must give Hugging Face's weights exactly.
    W_Q_meta = permute_columns(hf.q_proj.weight.T, H, src)
    assert torch.equal(meta_to_hf(W_Q_meta.T, H), hf.q_proj.weight)

    X = torch.randn(BATCH, N_TOKENS, config.hidden_size, device=device)
    Y_hf = run_hf(hf, rotary, X)
    assert_close(port_llama(hf, src)(X, causal=True), Y_hf, **TOL)
    # With d = 8 the permutation is not its own inverse: the other direction and the
    # identity both pair the wrong coordinates and miss by far more than the tolerance.
    for wrong in (torch.argsort(src), torch.arange(d)):
        assert not torch.equal(wrong, src)
        Y_wrong = port_llama(hf, wrong)(X, causal=True)
        assert (Y_wrong - Y_hf).abs().max() > 1e3 * TOL["atol"]


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@torch.no_grad()
def test_llama_attention_cached(device, interleaved):
    """Prefill, then one token at a time: attnlib's KVCache against a DynamicCache."""
    config, hf, rotary = llama(device)
    assert config.num_key_value_heads < config.num_attention_heads  # grouped, not MHA
    src = half_split_to_interleaved(config.head_dim) if interleaved else None
    attn = port_llama(hf, src)
    X = torch.randn(BATCH, N_TOKENS, config.hidden_size, device=device)
    hf_cache, cache = DynamicCache(config=config), KVCache()
    pieces = [(0, N_PREFILL)] + [(t, t + 1) for t in range(N_PREFILL, N_TOKENS)]
    outputs = []
    for a, b in pieces:
        Y_hf = run_hf(hf, rotary, X[:, a:b], start=a, cache=hf_cache)
        Y = attn(X[:, a:b], causal=True, cache=cache)
        assert_close(Y, Y_hf, **TOL)
        outputs.append(Y)
    assert cache.n_tokens == hf_cache.get_seq_length() == N_TOKENS
    assert_close(torch.cat(outputs, dim=1), run_hf(hf, rotary, X), **TOL)


# ---------------------------------------------------------------------------------------
# DeepSeek-V3: multi-head latent attention with decoupled RoPE
# ---------------------------------------------------------------------------------------

DEEPSEEK = {
    "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 4,
    "kv_lora_rank": 10, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6,
}


def deepseek(
    device: torch.device, q_lora_rank: int | None, rope_interleave: bool = True
) -> tuple[DeepseekV3Config, DeepseekV3Attention, DeepseekV3RotaryEmbedding]:
    config = DeepseekV3Config(
        **DEEPSEEK, q_lora_rank=q_lora_rank, rope_interleave=rope_interleave,
        rope_theta=ROPE_THETA, attn_implementation="eager",
    )
    hf = DeepseekV3Attention(config, layer_idx=0).to(device).eval()
    with torch.no_grad():  # the RMSNorm gains start at 1; random gains test their mapping
        # transformers 5.0 has no q_a_layernorm without a query latent; later releases, None
        for norm in (hf.kv_a_layernorm, getattr(hf, "q_a_layernorm", None)):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    # No rope_scaling, hence no YaRN mscale: the softmax scale is 1/sqrt(d_head + d_R).
    assert hf.scaling == pytest.approx(1 / math.sqrt(config.qk_head_dim), rel=1e-12)
    return config, hf, DeepseekV3RotaryEmbedding(config).to(device)


Q_LORA = pytest.mark.parametrize("q_lora_rank", [12, None], ids=["q_latent", "no_q_latent"])
ABSORBED = pytest.mark.parametrize("absorbed", [False, True], ids=["naive", "absorbed"])


@Q_LORA
@ABSORBED
@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleave", "rotate_half"])
@torch.no_grad()
def test_deepseek_v3_attention(device, q_lora_rank, absorbed, rope_interleave):
    config, hf, rotary = deepseek(device, q_lora_rank, rope_interleave)
    mla = mla_from_deepseek(hf)
    X = torch.randn(BATCH, N_TOKENS, config.hidden_size, device=device)
    assert_close(mla(X, causal=True, absorbed=absorbed), run_hf(hf, rotary, X), **TOL)


@Q_LORA
@ABSORBED
@torch.no_grad()
def test_deepseek_v3_attention_cached(device, q_lora_rank, absorbed):
    """Prefill, then one token at a time: attnlib's LatentCache against a DynamicCache."""
    config, hf, rotary = deepseek(device, q_lora_rank)
    mla = mla_from_deepseek(hf)
    X = torch.randn(BATCH, N_TOKENS, config.hidden_size, device=device)
    hf_cache, cache = DynamicCache(config=config), LatentCache()
    pieces = [(0, N_PREFILL)] + [(t, t + 1) for t in range(N_PREFILL, N_TOKENS)]
    outputs = []
    for a, b in pieces:
        Y_hf = run_hf(hf, rotary, X[:, a:b], start=a, cache=hf_cache)
        Y = mla(X[:, a:b], causal=True, cache=cache, absorbed=absorbed)
        assert_close(Y, Y_hf, **TOL)
        outputs.append(Y)
    # Both caches hold the latent and the one rotated key, d_L + d_R numbers per token.
    assert cache.n_tokens == hf_cache.get_seq_length() == N_TOKENS
    assert cache.L.shape[-1] + cache.k_R.shape[-1] == config.kv_lora_rank + config.qk_rope_head_dim
    assert_close(torch.cat(outputs, dim=1), run_hf(hf, rotary, X), **TOL)


# ---------------------------------------------------------------------------------------
# A whole decoder: TinyDecoder against LlamaForCausalLM
# ---------------------------------------------------------------------------------------


def _llama_holding(model: TinyDecoder) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` of ``model``'s shape holding its weights (the norms' gains drawn
    in [0.5, 1.5] first, so that gains of 1 hide nothing); eager attention."""
    block0 = model.blocks[0]
    config = LlamaConfig(
        vocab_size=model.vocab_size, hidden_size=model.d_model,
        num_hidden_layers=model.n_layers, num_attention_heads=block0.attn.n_heads,
        num_key_value_heads=block0.attn.n_kv_heads, intermediate_size=block0.ffn.d_ff,
        hidden_act="silu", rms_norm_eps=1e-6, rope_theta=block0.attn.rope_base,
        tie_word_embeddings=True, attn_implementation="eager",
        bos_token_id=None, eos_token_id=None, pad_token_id=0,  # generate never stops early
    )
    hf = LlamaForCausalLM(config).to(model.E.device).eval()
    hold_weights(model, hf)
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    return hf


@torch.no_grad()
def test_tiny_decoder_matches_llama_for_causal_lm(device):
    """Same weights, same logits: pre-norm RMSNorm blocks, SwiGLU, RoPE, tied embeddings."""
    model = TinyDecoder(64, 32, 2, 4, n_kv_heads=2, d_ff=48, rope_base=ROPE_THETA, seed=0,
                        device=device)
    hf = _llama_holding(model)
    ids = torch.randint(0, 64, (BATCH, N_TOKENS), device=device)
    # Hugging Face builds its own causal mask from the (absent) attention_mask.
    assert_close(model(ids), hf(input_ids=ids).logits, **TOL)


@torch.no_grad()
def test_left_padded_batch_matches_llama_for_causal_lm(device):
    """A left-padded batch with Hugging Face's attention_mask: the same logits at the real
    tokens, and the same tokens from greedy generate (Hugging Face's own loop and cache)."""
    model = TinyDecoder(64, 32, 2, 4, n_kv_heads=2, d_ff=48, rope_base=ROPE_THETA, seed=1,
                        device=device)
    hf = _llama_holding(model)
    lengths = torch.tensor([9, 5, 2], device=device)
    ids = torch.randint(1, 64, (3, 9), device=device)
    mask = (torch.arange(9, device=device) >= 9 - lengths[:, None]).long()  # left padding
    ids = ids * mask  # pads are id 0
    real = mask.bool()
    assert_close(model(ids, attention_mask=mask)[real],
                 hf(input_ids=ids, attention_mask=mask).logits[real], **TOL)
    ours = model.generate(ids, 12, attention_mask=mask)
    theirs = hf.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert torch.equal(ours, theirs)
    assert not torch.equal(model.generate(ids, 12), theirs)  # without the mask: other tokens


# Serving: Hugging Face's continuous batching against attnlib's, on the trained model
# ---------------------------------------------------------------------------------------


def _llama_of(model: TinyDecoder) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` holding exactly ``model``'s weights (nothing redrawn)."""
    attn, ffn = model.blocks[0].attn, model.blocks[0].ffn
    config = LlamaConfig(
        vocab_size=model.vocab_size, hidden_size=model.d_model,
        num_hidden_layers=model.n_layers, num_attention_heads=attn.n_heads,
        num_key_value_heads=attn.n_kv_heads, head_dim=attn.d_head, intermediate_size=ffn.d_ff,
        hidden_act="silu", rms_norm_eps=1e-6, rope_theta=attn.rope_base,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )
    hf = LlamaForCausalLM(config).to(model.E.device).eval()
    hf.model.embed_tokens.weight.copy_(model.E)
    hf.model.norm.weight.copy_(model.final_norm.g)
    for block, layer in zip(model.blocks, hf.model.layers, strict=True):
        layer.input_layernorm.weight.copy_(block.attn_norm.g)
        layer.post_attention_layernorm.weight.copy_(block.ffn_norm.g)
        a, mlp = layer.self_attn, layer.mlp
        for W, linear in ((block.attn.W_Q, a.q_proj), (block.attn.W_K, a.k_proj),
                          (block.attn.W_V, a.v_proj), (block.attn.W_O, a.o_proj),
                          (block.ffn.W_gate, mlp.gate_proj), (block.ffn.W_up, mlp.up_proj),
                          (block.ffn.W_down, mlp.down_proj)):
            linear.weight.copy_(W.T)
    return hf


@torch.no_grad()
def test_hf_continuous_batching_gives_attnlib_continuous_batching_tokens(device):
    """Chapter 11's six requests, served by Hugging Face's ``generate_batch`` (its paged
    cache and scheduler) on the trained ``book`` model converted to ``LlamaForCausalLM``,
    and by ``attnlib.serving.batching.continuous_batching``: every request gets the same greedy
    characters, which are also those of the request run alone."""
    import transformers
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    import attnlib
    from attnlib.examples import SERVING_REQUESTS
    from attnlib.serving.batching import Request, continuous_batching

    transformers.logging.set_verbosity_error()
    book = attnlib.models.pretrained.load("book", device=device)
    hf = _llama_of(book)
    ids, _ = attnlib.models.train.eval_set()
    requests = [Request(ids[r, :P].tolist(), T, a) for r, (P, T, a) in enumerate(SERVING_REQUESTS)]
    ours = continuous_batching(book, requests, max_batch=3, n_blocks=64, block_size=8, chunk=8)
    longest = max(r.max_new_tokens for r in requests)
    config = GenerationConfig(max_new_tokens=longest, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    # the paged cache sized here: left to itself it takes 90 % of the free memory, 14 GB on a
    # 24 GB machine (CPU or GPU), for six requests of a few hundred tokens
    cache = ContinuousBatchingConfig(num_blocks=8, max_batch_tokens=256)
    theirs = hf.generate_batch([r.prompt for r in requests], generation_config=config,
                               continuous_batching_config=cache, warmup=False)
    assert len(theirs) == len(requests)
    by_prompt = {tuple(out.prompt_ids): out.generated_tokens for out in theirs.values()}
    for request, tokens in zip(requests, ours.outputs, strict=True):
        # greedy decoding is prefix-consistent: the first T of `longest` characters
        assert by_prompt[tuple(request.prompt)][: request.max_new_tokens] == tokens
        alone = book.generate(torch.tensor([request.prompt], device=device),
                              request.max_new_tokens)[0, len(request.prompt):].tolist()
        assert tokens == alone
    # a different model gives different characters: the comparison can fail
    model = attnlib.models.pretrained.load("book-seed1", device=device)
    assert continuous_batching(model, requests,
                               max_batch=3, n_blocks=64, block_size=8, chunk=8).outputs != \
        ours.outputs
