"""How many bytes the KV cache takes, and the published shapes of a few real models.

During generation a decoder keeps, for every earlier token and every layer, whatever it
needs to rebuild that token's keys and values. Counting those numbers is integer
arithmetic, so this module needs no tensors at all:

- MHA keeps ``K`` and ``V`` for every query head: ``2 · H · d_head`` values per token
  per layer;
- GQA keeps them for its ``G`` KV heads only: ``2 · G · d_head`` (MQA is ``G = 1``);
- MLA keeps one latent row of width ``d_L`` shared by all heads, plus, with decoupled
  RoPE, one rotated key of width ``d_R``: ``d_L + d_R``.

Multiply by the number of layers ``N_L``, the bytes per stored number ``b`` (2 for
bf16/fp16, 1 for fp8), the tokens and the batch, and you have the cache.

The presets (``LLAMA3_70B``, ``GEMMA3_27B``, ``DEEPSEEK_V2``, ...) carry the numbers
published in each model's paper and configuration file, with that citation in
``ModelSpec.source``.

Lessons: 00_tokens_and_embeddings, 05_kv_cache, 06_gqa, 07_mla.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlib._checks import (
    check_choice,
    check_divisible,
    check_nonnegative_int,
    check_positive_int,
)

__all__ = [
    "CACHE_KINDS",
    "DEEPSEEK_V2",
    "DEEPSEEK_V3",
    "GEMMA3_27B",
    "LLAMA2_7B",
    "LLAMA3_8B",
    "LLAMA3_70B",
    "MISTRAL_7B",
    "PRESETS",
    "ModelSpec",
    "kv_cache_bytes",
    "mla_cache_bytes",
]

CACHE_KINDS: tuple[str, ...] = ("mha", "gqa", "mqa", "mla")
"""The attention variants whose cache :meth:`ModelSpec.cache_bytes_per_token` can size."""


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    *,
    n_tokens: int = 1,
    batch: int = 1,
    bytes_per_elem: int = 2,
) -> int:
    """Bytes of a K/V cache: ``2 · N_L · G · d_head · N · B · b``.

    The factor 2 counts K and V. Pass ``n_kv_heads = n_heads`` for MHA, the number of
    KV groups ``G`` for GQA and ``1`` for MQA.

    Args:
        n_layers: ``N_L``, the number of attention layers.
        n_kv_heads: ``G``, the key/value heads each layer stores.
        d_head: width of one key (and one value) head.
        n_tokens: ``N``, the tokens held per sequence (0 for an empty cache).
        batch: ``B``, the number of sequences.
        bytes_per_elem: ``b``, bytes per stored number (2 for bf16/fp16, 1 for fp8).

    Returns:
        int: the cache size in bytes.

    Example:
        Llama 3 70B (80 layers, 8 KV heads of width 128) in 16-bit, one token:

        >>> kv_cache_bytes(80, 8, 128)
        327680
        >>> kv_cache_bytes(32, 8, 128, n_tokens=32_768, batch=16, bytes_per_elem=1)
        34359738368

    Lesson: 05_kv_cache (the formula), 06_gqa (what ``G`` saves).
    """
    _check_counts(n_layers=n_layers, n_kv_heads=n_kv_heads, d_head=d_head, batch=batch,
                  bytes_per_elem=bytes_per_elem, n_tokens=n_tokens)
    return 2 * n_layers * n_kv_heads * d_head * n_tokens * batch * bytes_per_elem


def mla_cache_bytes(
    n_layers: int,
    d_latent: int,
    *,
    d_rope: int = 0,
    n_tokens: int = 1,
    batch: int = 1,
    bytes_per_elem: int = 2,
) -> int:
    """Bytes of an MLA latent cache: ``N_L · (d_L + d_R) · N · B · b``.

    MLA caches the latent ``L = X @ W_L`` (width ``d_L``) shared by every head, and with
    decoupled RoPE one rotated key ``k_R`` (width ``d_R``) also shared by every head.
    There is no factor 2: keys and values are both read off the same latent.

    Args:
        n_layers: ``N_L``, the number of attention layers.
        d_latent: ``d_L``, the width of the cached latent.
        d_rope: ``d_R``, the width of the decoupled RoPE key (0 without one).
        n_tokens: ``N``, the tokens held per sequence (0 for an empty cache).
        batch: ``B``, the number of sequences.
        bytes_per_elem: ``b``, bytes per stored number (2 for bf16/fp16, 1 for fp8).

    Returns:
        int: the cache size in bytes.

    Example:
        DeepSeek-V2 (60 layers, ``d_L = 512``, ``d_R = 64``) in 16-bit, one token:

        >>> mla_cache_bytes(60, 512, d_rope=64)
        69120

    Equivalent to ``kv_cache_bytes`` with ``2 · G · d_head`` replaced by ``d_L + d_R``.

    Lesson: 07_mla.
    """
    _check_counts(n_layers=n_layers, d_latent=d_latent, batch=batch,
                  bytes_per_elem=bytes_per_elem, n_tokens=n_tokens, d_rope=d_rope)
    return n_layers * (d_latent + d_rope) * n_tokens * batch * bytes_per_elem


@dataclass(frozen=True)
class ModelSpec:
    """The attention shapes of one decoder model, and the cache they imply.

    Per token and layer the cache holds ``G · (d_head + d_v)`` numbers for MHA/GQA/MQA
    (``2 · G · d_head`` when ``d_v = d_head``) and ``d_L + d_R`` for MLA.

    Args:
        name: display name, for example ``"Llama 3 70B"``.
        n_layers: ``N_L``, attention layers.
        d_model: ``d``, width of the residual stream and of each embedding row.
        n_heads: ``H``, query heads.
        n_kv_heads: ``G``, key/value heads; ``H`` must be a multiple of ``G``. For an MLA
            model give ``H``: that is the MHA the latent replaces.
        d_head: query/key width of one head (DeepSeek's ``qk_nope_head_dim``).
        vocab_size: ``N_T``, rows of the embedding matrix ``E``.
        d_latent: ``d_L``, the cached KV latent width (DeepSeek's ``kv_lora_rank``);
            ``None`` for a model without MLA.
        d_rope: ``d_R``, the decoupled RoPE key width (``qk_rope_head_dim``); MLA only.
        d_latent_q: ``d_LQ``, the query latent width (``q_lora_rank``), or ``None``.
        d_v: value width of one head; ``None`` means ``d_head``.
        source: where the numbers come from (paper and arXiv id, configuration file).
        notes: what the numbers leave out (sliding windows, MoE, vocabulary padding).
        n_params: total number of weights, or ``None`` when not recorded; the size of the
            weights in memory is :meth:`weight_bytes`.
        window: ``w``, the width of the sliding window of the model's local layers (query
            ``i`` sees keys ``i - w < j <= i``), or ``None`` when every layer is global.
        n_window_layers: how many of the ``N_L`` layers use that window (0 without one); a
            window layer's cache never needs more than ``w`` tokens
            (:meth:`windowed_cache_bytes`).

    Example:
        >>> spec = ModelSpec("toy", n_layers=2, d_model=64, n_heads=8, n_kv_heads=2,
        ...                  d_head=8, vocab_size=100)
        >>> spec.kv_bytes_per_token()        # 2 · 2 layers · 2 KV heads · 8 · 2 bytes
        128
        >>> spec.cache_table()
        {'mha': 512, 'gqa': 128, 'mqa': 64}

    Lesson: 05_kv_cache (the model calculator), 06_gqa, 07_mla.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    vocab_size: int
    d_latent: int | None = None
    d_rope: int = 0
    d_latent_q: int | None = None
    d_v: int | None = None
    source: str = ""
    notes: str = ""
    n_params: int | None = None
    window: int | None = None
    n_window_layers: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str; got {self.name!r}")
        for arg in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "vocab_size"):
            check_positive_int(arg, getattr(self, arg))
        for arg in ("d_latent", "d_latent_q", "d_v", "n_params"):
            if getattr(self, arg) is not None:
                check_positive_int(arg, getattr(self, arg))
        check_nonnegative_int("d_rope", self.d_rope)
        check_divisible("n_heads", self.n_heads, "n_kv_heads", self.n_kv_heads)
        if self.d_rope and self.d_latent is None:
            raise ValueError(
                "d_rope must be 0 unless d_latent is set (the decoupled RoPE key belongs "
                f"to MLA); got d_rope={self.d_rope} with d_latent=None"
            )
        if self.window is not None:
            check_positive_int("window", self.window)
        check_nonnegative_int("n_window_layers", self.n_window_layers)
        if self.n_window_layers > self.n_layers:
            raise ValueError(f"n_window_layers must be at most n_layers={self.n_layers}; got "
                             f"{self.n_window_layers}")
        if (self.window is None) != (self.n_window_layers == 0):
            raise ValueError(
                "window and n_window_layers go together: give both (a window width and the "
                f"number of layers using it) or neither; got window={self.window}, "
                f"n_window_layers={self.n_window_layers}"
            )
        for arg in ("source", "notes"):
            if not isinstance(getattr(self, arg), str):
                raise TypeError(f"{arg} must be a str; got {type(getattr(self, arg)).__name__}")

    @property
    def d_value(self) -> int:
        """Value width of one head: ``d_v``, or ``d_head`` when ``d_v`` is ``None``."""
        return self.d_head if self.d_v is None else self.d_v

    @property
    def group_size(self) -> int:
        """``s = H / G``: query heads that share one KV head (the GQA cache saving).

        Lesson: 06_gqa.
        """
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        """The model's own attention: ``"mla"`` with a latent, else ``"mha"``,
        ``"mqa"`` or ``"gqa"`` from ``G``.

        Lesson: 06_gqa, 07_mla.
        """
        if self.d_latent is not None:
            return "mla"
        if self.n_kv_heads == self.n_heads:
            return "mha"
        if self.n_kv_heads == 1:
            return "mqa"
        return "gqa"

    @property
    def embedding_params(self) -> int:
        """Entries of the embedding matrix ``E`` (shape ``(N_T, d)``): ``N_T · d``.

        Lesson: 00_tokens_and_embeddings.
        """
        return self.vocab_size * self.d_model

    @property
    def qk_width(self) -> int:
        """Total query (and MHA key) width ``H · d_head``: the columns of ``W_Q``.

        It need not equal ``d_model``: Llama 3 70B has 64 · 128 = 8192 = ``d_model``,
        Gemma 3 27B has 32 · 128 = 4096 < 5376.

        Lesson: 03_multi_head_attention.
        """
        return self.n_heads * self.d_head

    def values_per_token_per_layer(self, kind: str, *, rope: bool = True) -> int:
        """Numbers one layer caches per token if this model used attention ``kind``.

        - ``"mha"``: every query head keeps its own K and V, ``H · (d_head + d_v)``;
        - ``"gqa"``: the model's ``G`` KV heads, ``G · (d_head + d_v)``;
        - ``"mqa"``: one shared KV head, ``d_head + d_v``;
        - ``"mla"``: the latent and the decoupled RoPE key, ``d_L + d_R``; with
          ``rope=False`` the latent ``d_L`` alone (the paper's count without RoPE).

        With ``d_v = d_head`` the first three are ``2 · H · d_head``, ``2 · G · d_head``
        and ``2 · d_head``. Keys count ``d_head`` only: the decoupled RoPE part of an
        MLA model's keys enters the ``"mla"`` count, as in DeepSeek-V2's comparison.

        Args:
            kind: one of ``CACHE_KINDS``; ``"mla"`` needs ``d_latent``.
            rope: for ``"mla"``, whether to count the RoPE key; ignored otherwise.

        Returns:
            int: numbers per token per layer.

        Example:
            >>> DEEPSEEK_V2.values_per_token_per_layer("mha")   # 2 · 128 heads · 128
            32768
            >>> DEEPSEEK_V2.values_per_token_per_layer("mla", rope=False)
            512
            >>> DEEPSEEK_V2.values_per_token_per_layer("mla")
            576

        Lesson: 05_kv_cache, 06_gqa, 07_mla.
        """
        check_choice("kind", kind, CACHE_KINDS)
        kv_width = self.d_head + self.d_value
        if kind == "mha":
            return self.n_heads * kv_width
        if kind == "gqa":
            return self.n_kv_heads * kv_width
        if kind == "mqa":
            return kv_width
        if self.d_latent is None:
            raise ValueError(
                f"kind='mla' needs a latent width, but {self.name!r} has d_latent=None; "
                f"pick one of {[k for k in CACHE_KINDS if k != 'mla']}"
            )
        return self.d_latent + (self.d_rope if rope else 0)

    def cache_bytes_per_token(self, kind: str, bytes_per_elem: int = 2) -> int:
        """Bytes per token over all layers for attention ``kind``:
        ``N_L · values_per_token_per_layer(kind) · b``.

        Args:
            kind: one of ``CACHE_KINDS``; ``"mla"`` needs ``d_latent``.
            bytes_per_elem: ``b`` (2 for bf16/fp16, 1 for fp8).

        Returns:
            int: bytes per cached token, all layers, one sequence.

        Example:
            >>> LLAMA3_70B.cache_bytes_per_token("gqa")
            327680
            >>> LLAMA3_70B.cache_bytes_per_token("mha")   # 8x: 64 heads instead of 8
            2621440

        Lesson: 05_kv_cache, 06_gqa.
        """
        check_positive_int("bytes_per_elem", bytes_per_elem)
        return self.n_layers * self.values_per_token_per_layer(kind) * bytes_per_elem

    def kv_bytes_per_token(self, bytes_per_elem: int = 2) -> int:
        """Bytes per token over all layers with the model's own attention.

        MLA models count ``N_L · (d_L + d_R) · b``; the others ``2 · N_L · G · d_head · b``
        (``N_L · G · (d_head + d_v) · b`` when ``d_v`` differs).

        Args:
            bytes_per_elem: ``b`` (2 for bf16/fp16, 1 for fp8).

        Returns:
            int: bytes per cached token, all layers, one sequence.

        Example:
            >>> LLAMA3_70B.kv_bytes_per_token()
            327680
            >>> DEEPSEEK_V2.kv_bytes_per_token()    # 60 layers · 576 · 2 bytes
            69120

        Lesson: 05_kv_cache.
        """
        kind = "mla" if self.d_latent is not None else "gqa"
        return self.cache_bytes_per_token(kind, bytes_per_elem)

    def kv_cache_bytes(self, n_tokens: int, *, batch: int = 1, bytes_per_elem: int = 2) -> int:
        """Bytes of the whole cache: ``kv_bytes_per_token(b) · N · B``.

        Args:
            n_tokens: ``N``, tokens per sequence.
            batch: ``B``, sequences.
            bytes_per_elem: ``b`` (2 for bf16/fp16, 1 for fp8).

        Returns:
            int: bytes.

        Example:
            A 128k-token context of Llama 3 70B in 16-bit, about 43 GB:

            >>> LLAMA3_70B.kv_cache_bytes(131_072)
            42949672960

        Lesson: 05_kv_cache.
        """
        _check_counts(batch=batch, n_tokens=n_tokens)
        return self.kv_bytes_per_token(bytes_per_elem) * n_tokens * batch

    def windowed_cache_bytes(
        self, n_tokens: int, *, batch: int = 1, bytes_per_elem: int = 2
    ) -> int:
        """Bytes of the cache when each sliding-window layer keeps only its last ``w`` tokens.

        A layer whose queries see at most ``w`` keys never reads an older token again, so
        its cache can hold ``min(N, w)`` tokens (a rolling buffer); a global layer holds all
        ``N``. With ``c = kv_bytes_per_token(b) / N_L`` bytes per token and layer::

            c · ((N_L - n_window_layers) · N + n_window_layers · min(N, w)) · B

        which is :meth:`kv_cache_bytes` for a model without a window.

        Args:
            n_tokens: ``N``, tokens per sequence.
            batch: ``B``, sequences.
            bytes_per_elem: ``b`` (2 for bf16/fp16, 1 for fp8).

        Returns:
            int: bytes.

        Example:
            Gemma 3 27B at 128k tokens: 10 global layers hold every token, 52 local ones
            the last 1,024; about 11.2 GB instead of the 66.6 GB of 62 global layers.

            >>> GEMMA3_27B.windowed_cache_bytes(131_072)
            11173625856
            >>> GEMMA3_27B.kv_cache_bytes(131_072)
            66571993088

        Lesson: 05_kv_cache (the cache of a model with sliding windows).
        """
        _check_counts(batch=batch, n_tokens=n_tokens)
        per_layer = self.kv_bytes_per_token(bytes_per_elem) // self.n_layers
        n_global = self.n_layers - self.n_window_layers
        held = n_global * n_tokens + self.n_window_layers * min(n_tokens, self.window or 0)
        return per_layer * held * batch

    def weight_bytes(self, bytes_per_elem: int = 2) -> int:
        """Bytes of the model's weights: ``n_params · b``.

        Args:
            bytes_per_elem: ``b``, bytes per stored weight (2 for bf16/fp16, 1 for fp8).

        Returns:
            int: bytes.

        Raises:
            ValueError: the spec records no ``n_params``.

        Example:
            Llama 3 70B in bf16, about 141 GB: as much as 430,625 tokens of its cache.

            >>> LLAMA3_70B.weight_bytes()
            141107412992
            >>> LLAMA3_70B.weight_bytes() // LLAMA3_70B.kv_bytes_per_token()
            430625

        Lesson: 05_kv_cache (the cache against the weights).
        """
        check_positive_int("bytes_per_elem", bytes_per_elem)
        if self.n_params is None:
            raise ValueError(f"n_params must be set to size the weights; {self.name!r} has "
                             "n_params=None")
        return self.n_params * bytes_per_elem

    def cache_table(self, bytes_per_elem: int = 2) -> dict[str, int]:
        """Bytes per token (all layers) for each kind in ``CACHE_KINDS``.

        ``"mla"`` appears only when the model has a latent (``d_latent`` set).

        Args:
            bytes_per_elem: ``b`` (2 for bf16/fp16, 1 for fp8).

        Returns:
            dict[str, int]: kind -> bytes per token.

        Example:
            >>> GEMMA3_27B.cache_table()
            {'mha': 1015808, 'gqa': 507904, 'mqa': 31744}

        Lesson: 05_kv_cache, 06_gqa, 07_mla.
        """
        kinds = [k for k in CACHE_KINDS if k != "mla" or self.d_latent is not None]
        return {k: self.cache_bytes_per_token(k, bytes_per_elem) for k in kinds}


LLAMA3_70B = ModelSpec(
    name="Llama 3 70B",
    n_layers=80,
    d_model=8192,
    n_heads=64,
    n_kv_heads=8,
    d_head=128,
    vocab_size=128_256,
    source=(
        "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', arXiv:2407.21783 (Table 3); "
        "config.json of meta-llama/Meta-Llama-3-70B"
    ),
    notes=(
        "GQA with 8 query heads per KV head; RoPE base 500,000. The vocabulary is "
        "128,256 = 128,000 BPE tokens + 256 reserved special tokens; the paper's "
        "'128K' counts the BPE tokens. n_params counts the checkpoint's weights: untied "
        "input and output embeddings, d_ff = 28,672 (Table 3)."
    ),
    n_params=70_553_706_496,
)

LLAMA3_8B = ModelSpec(
    name="Llama 3 8B",
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_head=128,
    vocab_size=128_256,
    source=(
        "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', arXiv:2407.21783 (Table 3); "
        "config.json of meta-llama/Meta-Llama-3-8B"
    ),
    notes=(
        "GQA with 4 query heads per KV head; same tokenizer as Llama 3 70B. n_params counts "
        "the checkpoint's weights: untied embeddings, d_ff = 14,336 (Table 3)."
    ),
    n_params=8_030_261_248,
)

LLAMA2_7B = ModelSpec(
    name="Llama 2 7B",
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=32,
    d_head=128,
    vocab_size=32_000,
    source=(
        "Touvron et al., 'Llama 2: Open Foundation and Fine-Tuned Chat Models', "
        "arXiv:2307.09288; config.json of meta-llama/Llama-2-7b-hf"
    ),
    notes=(
        "Plain MHA: every query head has its own K/V (Llama 2 uses GQA only at 34B and 70B). "
        "n_params counts the checkpoint's weights: untied embeddings, d_ff = 11,008."
    ),
    n_params=6_738_415_616,
)

MISTRAL_7B = ModelSpec(
    name="Mistral 7B",
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_head=128,
    vocab_size=32_000,
    source=(
        "Jiang et al., 'Mistral 7B', arXiv:2310.06825 (Table 1); config.json of "
        "mistralai/Mistral-7B-v0.1"
    ),
    notes=(
        "GQA with 4 query heads per KV head. Every layer uses a 4096-token sliding window, "
        "so a rolling cache never holds more than 4096 tokens (windowed_cache_bytes); "
        "kv_cache_bytes assumes a full cache. n_params counts the checkpoint's weights: "
        "untied embeddings, d_ff = 14,336."
    ),
    n_params=7_241_732_096,
    window=4096,
    n_window_layers=32,
)

GEMMA3_27B = ModelSpec(
    name="Gemma 3 27B",
    n_layers=62,
    d_model=5376,
    n_heads=32,
    n_kv_heads=16,
    d_head=128,
    vocab_size=262_144,
    source=(
        "Gemma Team, 'Gemma 3 Technical Report', arXiv:2503.19786; config.json of "
        "google/gemma-3-27b-it; google-deepmind/gemma TransformerConfig.gemma3_27b"
    ),
    notes=(
        "vocab_size is the tokenizer's 262,144 entries (the report's '262k'; num_embed in "
        "Google's reference code); the Hugging Face config.json lists 262,208 embedding "
        "rows. Q/K width 32 x 128 = 4096 is narrower than d_model = 5376. Gemma 3 "
        "interleaves 5 local sliding-window layers (window 1024 tokens) per global layer, "
        "52 local and 10 global layers in all: windowed_cache_bytes keeps 1024 tokens in "
        "the local layers; kv_cache_bytes treats every layer as global, an upper bound. "
        "n_params counts the language model's weights (d_ff = 21,504, tied embeddings of "
        "262,208 rows, RMSNorms including the per-head query and key norms), not the "
        "vision encoder."
    ),
    n_params=27_009_346_304,
    window=1024,
    n_window_layers=52,
)

DEEPSEEK_V2 = ModelSpec(
    name="DeepSeek-V2",
    n_layers=60,
    d_model=5120,
    n_heads=128,
    n_kv_heads=128,
    d_head=128,
    vocab_size=102_400,
    d_latent=512,
    d_rope=64,
    d_latent_q=1536,
    d_v=128,
    source=(
        "DeepSeek-AI, 'DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts "
        "Language Model', arXiv:2405.04434 (sections 2.1 and 3.1.2); config.json of "
        "deepseek-ai/DeepSeek-V2 (kv_lora_rank, q_lora_rank, qk_nope_head_dim, "
        "qk_rope_head_dim, v_head_dim)"
    ),
    notes=(
        "MLA with decoupled RoPE: caches d_L + d_R = 512 + 64 = 576 numbers per token per "
        "layer. n_kv_heads = n_heads = 128 describes the MHA the latent replaces "
        "(2 x 128 x 128 = 32,768 per token per layer). Mixture-of-experts feed-forward "
        "layers are not modelled here. n_params is the paper's total, 236B (21B activated "
        "per token)."
    ),
    n_params=236_000_000_000,
)

DEEPSEEK_V3 = ModelSpec(
    name="DeepSeek-V3",
    n_layers=61,
    d_model=7168,
    n_heads=128,
    n_kv_heads=128,
    d_head=128,
    vocab_size=129_280,
    d_latent=512,
    d_rope=64,
    d_latent_q=1536,
    d_v=128,
    source=(
        "DeepSeek-AI, 'DeepSeek-V3 Technical Report', arXiv:2412.19437; config.json of "
        "deepseek-ai/DeepSeek-V3"
    ),
    notes=(
        "Same MLA shapes as DeepSeek-V2 (d_L = 512, d_R = 64, d_LQ = 1536) on a wider, "
        "deeper model. The multi-token-prediction module and the mixture-of-experts "
        "layers are not modelled here. n_params is the paper's total, 671B (37B activated "
        "per token), without the 14B of the multi-token-prediction module."
    ),
    n_params=671_000_000_000,
)

PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        LLAMA2_7B,
        MISTRAL_7B,
        LLAMA3_8B,
        LLAMA3_70B,
        GEMMA3_27B,
        DEEPSEEK_V2,
        DEEPSEEK_V3,
    )
}
"""Every preset, keyed by its display name (``spec.name``)."""


def _check_counts(**counts: object) -> None:
    """Every count must be a positive int, except ``n_tokens`` and ``d_rope`` (may be 0)."""
    for name, value in counts.items():
        if name in ("n_tokens", "d_rope"):
            check_nonnegative_int(name, value)
        else:
            check_positive_int(name, value)
