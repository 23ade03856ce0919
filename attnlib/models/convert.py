"""Weights from Hugging Face checkpoints: ``LlamaAttention`` to GQA, ``DeepseekV3Attention`` to MLA.

Hugging Face stores every projection as an ``nn.Linear``, whose ``weight`` is ``(out, in)``:
the transpose of attnlib's right-multiplying matrices, so each weight is copied
transposed. Sizes and RoPE settings come from the module's ``config`` (the attributes a
module keeps for itself differ between ``transformers`` releases; the config's do not).
Nothing here imports ``transformers``: any module laid out like the real one converts.

- :func:`from_hf_llama_attention`: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` are
  ``W_Q``, ``W_K``, ``W_V``, ``W_O``; lesson 06.
- :func:`mla_from_deepseek`: DeepSeek's packed projections are cut into the paper's
  factors (book/notation.md has the table of names); lesson 07.

Lessons: 06_gqa, 07_mla.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlib.core.rope import Llama3Scaling, YarnScaling
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.mla import MultiHeadLatentAttention

__all__ = ["from_hf_llama_attention", "mla_from_deepseek", "rope_settings"]


def from_hf_llama_attention(hf_attention: nn.Module) -> GroupedQueryAttention:
    """Load a Hugging Face ``LlamaAttention`` into a :class:`GroupedQueryAttention`.

    ``nn.Linear`` stores the transpose of a right-multiplying weight, so
    ``W_Q = q_proj.weight.T``, ``W_K = k_proj.weight.T``, ``W_V = v_proj.weight.T`` and
    ``W_O = o_proj.weight.T``. The head counts, ``head_dim`` and the RoPE base come from
    ``hf_attention.config`` (``num_attention_heads``, ``num_key_value_heads``,
    ``rope_parameters["rope_theta"]`` or ``rope_theta``), and so does the frequency
    scaling of long-context checkpoints (``rope_parameters["rope_type"]``: ``"llama3"``,
    Llama 3.1's, or ``"yarn"``; see :mod:`attnlib.core.rope`). Hugging Face's Llama rotates the
    half-split pairs ``(i, i + d_head/2)``, attnlib's default. Nothing here imports
    ``transformers``: any module with these attributes loads.

    Args:
        hf_attention: a ``transformers`` ``LlamaAttention`` (or a module laid out like
            it: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` without biases, a
            ``config`` and a ``head_dim``).

    Returns:
        A :class:`GroupedQueryAttention` with RoPE on the weights' device and dtype. Its
        ``forward(X, causal=True)`` equals ``hf_attention`` run on positions
        ``0 .. N - 1`` with a causal mask.

    Example:
        A stand-in with LlamaAttention's layout (the lesson uses the real module):

        >>> from types import SimpleNamespace
        >>> hf = nn.Module()
        >>> hf.config = SimpleNamespace(num_attention_heads=4, num_key_value_heads=2,
        ...                             rope_theta=10000.0)
        >>> hf.head_dim = 2
        >>> for name, width in (("q_proj", 8), ("k_proj", 4), ("v_proj", 4), ("o_proj", 8)):
        ...     setattr(hf, name, nn.Linear(8, width, bias=False))
        >>> attn = from_hf_llama_attention(hf)
        >>> attn.n_kv_heads, attn.W_K.shape, torch.equal(attn.W_K, hf.k_proj.weight.T)
        (2, torch.Size([8, 4]), True)

    Lesson: 06_gqa.
    """
    config = getattr(hf_attention, "config", None)
    projections = ("q_proj", "k_proj", "v_proj", "o_proj")
    missing = [n for n in (*projections, "head_dim") if not hasattr(hf_attention, n)]
    if config is None or missing:
        raise TypeError(
            "hf_attention must be laid out like transformers' LlamaAttention (config, "
            f"head_dim, q_proj, k_proj, v_proj, o_proj); got {type(hf_attention).__name__} "
            f"without {missing or ['config']}"
        )
    with_bias = [n for n in projections if getattr(hf_attention, n).bias is not None]
    if with_bias:
        raise ValueError(f"hf_attention must have no biases (attention_bias=False); "
                         f"{with_bias} have one")
    base = _rope_theta(config)
    scaling = _rope_scaling(config)
    W_Q = hf_attention.q_proj.weight
    attn = GroupedQueryAttention(
        W_Q.shape[1], config.num_attention_heads, config.num_key_value_heads,
        hf_attention.head_dim, hf_attention.o_proj.weight.shape[0], rope_base=base,
        rope_scaling=scaling,
        device=W_Q.device, dtype=W_Q.dtype,
    )
    with torch.no_grad():
        for name, proj in zip(("W_Q", "W_K", "W_V", "W_O"), projections, strict=True):
            getattr(attn, name).copy_(getattr(hf_attention, proj).weight.T)  # (in, out)
    return attn


def mla_from_deepseek(attn: nn.Module) -> MultiHeadLatentAttention:
    """An attnlib MLA with the weights of a Hugging Face ``DeepseekV3Attention`` (or V2).

    Hugging Face stores each weight as an ``nn.Linear`` ``(out, in)``, so every matrix is
    transposed, and it packs several of the paper's matrices into one (see the names table
    of book/notation.md):

    - ``q_b_proj`` (or ``q_proj`` without a query latent): per head ``[W_LQQ^h | W_QR^h]``;
    - ``kv_a_proj_with_mqa``: ``[W_L | W_KR]``, the latent and the one shared rotary key;
    - ``kv_b_proj``: per head ``[W_LK^h | W_LV^h]``;
    - ``q_a_proj`` is ``W_LQ``, ``o_proj`` is ``W_O``, and the gains of ``kv_a_layernorm``
      and ``q_a_layernorm`` are ``g_L`` and ``g_LQ``.

    The module is read through its attributes only (this function does not import
    ``transformers``). The copy is ``latent_norm=True`` with the source's RoPE base,
    pairing (``config.rope_interleave``) and frequency scaling: the released DeepSeek-V2
    and V3 checkpoints use YaRN (``rope_type="yarn"``, factor 40), which becomes a
    :class:`attnlib.core.rope.YarnScaling`, with DeepSeek's softmax scale
    ``mscale(factor, mscale_all_dim)^2 / sqrt(d_head + d_R)`` (the source's ``scaling``).

    Args:
        attn: a ``DeepseekV3Attention`` (or ``DeepseekV2Attention``) without biases, with
            plain RoPE or YaRN.

    Returns:
        :class:`MultiHeadLatentAttention` on the source's device and dtype; its forward,
        with ``causal=True``, equals the source's with a causal mask and the same
        positions.

    Lesson: 08_rope (07_mla introduces the layer).
    """
    _check_deepseek(attn)
    config = attn.config  # sizes come from the config: module attributes vary by version
    H, d_L, d_LQ = config.num_attention_heads, config.kv_lora_rank, config.q_lora_rank
    d_head, d_R, d_v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    ref = attn.o_proj.weight
    mla = MultiHeadLatentAttention(
        config.hidden_size, H, d_head, d_L, d_latent_q=d_LQ, d_rope=d_R, d_v=d_v,
        latent_norm=True, rope_base=_rope_theta(config),
        rope_interleaved=bool(getattr(config, "rope_interleave", False)),
        rope_scaling=_rope_scaling(config), device=ref.device, dtype=ref.dtype,
    )
    if not math.isclose(attn.scaling, mla.scale, rel_tol=1e-9):
        raise ValueError(
            f"attn.scaling must be the softmax scale of its config, {mla.scale:.6g} (with YaRN, "
            f"mscale^2 / sqrt(d_head + d_R)); got {attn.scaling:.6g}"
        )
    q_proj = attn.q_proj if d_LQ is None else attn.q_b_proj
    W_q = q_proj.weight.T.reshape(-1, H, d_head + d_R)  # (d_Q, H, d_head + d_R)
    W_kv_a = attn.kv_a_proj_with_mqa.weight.T  # (d_in, d_L + d_R) = [W_L | W_KR]
    W_kv_b = attn.kv_b_proj.weight.T.reshape(d_L, H, d_head + d_v)  # per head [W_LK^h | W_LV^h]
    with torch.no_grad():
        mla.W_LQQ.copy_(W_q[..., :d_head].reshape(-1, H * d_head))
        mla.W_QR.copy_(W_q[..., d_head:].reshape(-1, H * d_R))
        if d_LQ is not None:
            mla.W_LQ.copy_(attn.q_a_proj.weight.T)
            mla.g_LQ.copy_(attn.q_a_layernorm.weight)
        mla.W_L.copy_(W_kv_a[:, :d_L])
        mla.W_KR.copy_(W_kv_a[:, d_L:])
        mla.g_L.copy_(attn.kv_a_layernorm.weight)
        mla.W_LK.copy_(W_kv_b[..., :d_head].reshape(d_L, H * d_head))
        mla.W_LV.copy_(W_kv_b[..., d_head:].reshape(d_L, H * d_v))
        mla.W_O.copy_(attn.o_proj.weight.T)
    return mla


def _rope_parameters(config: object) -> dict:
    """A Hugging Face config's RoPE settings: ``rope_parameters`` (or an older ``rope_scaling``)."""
    return dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
                or {})


def _rope_scaling(config: object) -> Llama3Scaling | YarnScaling | None:
    """The frequency scaling a Hugging Face config asks for: None, Llama 3.1's or YaRN."""
    rope = _rope_parameters(config)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("config.rope_parameters must rotate whole heads (partial_rotary_factor "
                         f"1); got {rope['partial_rotary_factor']}")
    if kind == "default":
        return None
    if kind == "llama3":
        return Llama3Scaling(
            factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_positions=int(rope["original_max_position_embeddings"]),
        )
    if kind == "yarn":
        original = int(rope["original_max_position_embeddings"])
        factor = rope.get("factor") or config.max_position_embeddings / original
        return YarnScaling(
            factor=float(factor), original_max_positions=original,
            beta_fast=float(rope.get("beta_fast") or 32),
            beta_slow=float(rope.get("beta_slow") or 1),
            mscale=rope.get("mscale"), mscale_all_dim=rope.get("mscale_all_dim"),
            truncate=bool(rope.get("truncate", True)),
            given_attention_factor=rope.get("attention_factor"),
        )
    raise ValueError(
        "config.rope_parameters must have rope_type 'default', 'llama3' or 'yarn' (the "
        f"scalings attnlib.core.rope reads); got {kind!r}"
    )


def rope_settings(config: object) -> tuple[float | None, Llama3Scaling | YarnScaling | None]:
    """The RoPE base and the frequency scaling a Hugging Face config asks for:
    ``rope_parameters["rope_theta"]`` (transformers 5) or ``rope_theta`` (4.x), and None,
    Llama 3.1's scaling or YaRN's.

    Example:
        >>> from types import SimpleNamespace
        >>> rope_settings(SimpleNamespace(rope_parameters={"rope_type": "default",
        ...                                                "rope_theta": 5e5}))
        (500000.0, None)
    """
    return _rope_theta(config), _rope_scaling(config)


def _rope_theta(config: object) -> float | None:
    """The RoPE base of a Hugging Face config: ``rope_theta``, or ``rope_parameters``'s."""
    theta = getattr(config, "rope_theta", None)
    return _rope_parameters(config).get("rope_theta") if theta is None else theta


# What mla_from_deepseek reads: the module's projections, norms and scale, and the sizes of
# its config. transformers 5.0 (Colab's) keeps fewer size attributes on the module itself
# than later releases, so the sizes are read from the config alone.
_DEEPSEEK_PARTS = ("config", "scaling", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj",
                   "o_proj")
_DEEPSEEK_CONFIG = ("hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _check_deepseek(attn: object) -> None:
    missing = [name for name in _DEEPSEEK_PARTS if not hasattr(attn, name)]
    config = getattr(attn, "config", None)
    missing += [f"config.{name}" for name in _DEEPSEEK_CONFIG if not hasattr(config, name)]
    if not isinstance(attn, nn.Module) or missing:
        raise TypeError(
            "attn must be a Hugging Face DeepseekV3Attention (or DeepseekV2Attention); "
            f"got {type(attn).__name__}, which lacks {missing}"
        )
    if config.qk_rope_head_dim < 2:
        raise ValueError(
            f"attn.config.qk_rope_head_dim must be at least 2; got {config.qk_rope_head_dim}"
        )
    linears = [attn.kv_a_proj_with_mqa, attn.kv_b_proj, attn.o_proj,
               attn.q_proj if config.q_lora_rank is None else attn.q_a_proj]
    if any(getattr(lin, "bias", None) is not None for lin in linears):
        raise ValueError(
            "attn must have no biases (attnlib's MLA has none); got a config with "
            f"attention_bias={getattr(attn.config, 'attention_bias', None)!r}"
        )
    _rope_scaling(config)  # a rope_type attnlib reads
    theta = _rope_theta(attn.config)
    if theta is None:
        raise ValueError("attn.config must give a RoPE base (rope_theta); got none")
    eps = getattr(attn.kv_a_layernorm, "variance_epsilon", 1e-6)
    if not math.isclose(eps, 1e-6):
        raise ValueError(f"attn.kv_a_layernorm must have eps 1e-6, as attnlib's; got {eps}")
