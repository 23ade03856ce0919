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

The 2025-2026 designs mix kinds of layer, and each kind holds something different for a
sequence of ``N`` tokens (``ModelSpec.layer_types`` lists them layer by layer, one of
:data:`LAYER_KINDS`; :meth:`ModelSpec.layer_values` counts one layer, by part):

- ``"full"``: every token's keys and values (or MLA's latent and RoPE key), ``N`` rows;
- ``"sliding"``: the last ``w`` tokens only, ``min(N, w)`` rows;
- ``"sparse"`` (DeepSeek Sparse Attention): MLA's ``N`` rows plus the lightning indexer's
  own key of width ``d_I`` for every token;
- ``"linear"`` (Gated DeltaNet, Kimi Delta Attention): a recurrent state of
  ``H_v · d_k · d_v`` numbers and the last ``K_c - 1`` inputs of its short convolution,
  whatever ``N`` is;
- ``"csa"`` and ``"hca"`` (DeepSeek-V4's compressed sparse and heavily compressed
  attention): a window of ``min(N, w)`` rows, one compressed row for every ``m`` tokens
  (``floor(N / m)`` rows; CSA adds an indexer key of width ``d_I`` to each), and the
  compressor's fixed buffers for the window it is filling.

:data:`FRONTIER` holds five such designs as published (gpt-oss-120b, Qwen3-Next-80B-A3B,
Kimi Linear 48B-A3B, DeepSeek-V3.2, DeepSeek-V4-Flash, and DeepSeek-V4-Pro beside it).

Lessons: 00_tokens_and_embeddings, 05_kv_cache, 06_gqa, 07_mla.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnlib._checks import (
    check_bool,
    check_choice,
    check_divisible,
    check_nonnegative_int,
    check_positive_int,
)

__all__ = [
    "CACHE_KINDS",
    "DEEPSEEK_V2",
    "DEEPSEEK_V3",
    "DEEPSEEK_V32",
    "DEEPSEEK_V4_FLASH",
    "DEEPSEEK_V4_PRO",
    "FRONTIER",
    "GEMMA3_27B",
    "GPT_OSS_120B",
    "KIMI_LINEAR_48B",
    "LAYER_KINDS",
    "LAYER_PARTS",
    "LLAMA2_7B",
    "LLAMA3_8B",
    "LLAMA3_70B",
    "MISTRAL_7B",
    "PRESETS",
    "QWEN3_NEXT_80B",
    "STATE_PARTS",
    "ModelSpec",
    "kv_cache_bytes",
    "mla_cache_bytes",
]

CACHE_KINDS: tuple[str, ...] = ("mha", "gqa", "mqa", "mla")
"""The attention variants whose cache :meth:`ModelSpec.cache_bytes_per_token` can size."""

LAYER_KINDS: tuple[str, ...] = ("full", "sliding", "sparse", "linear", "csa", "hca")
"""The kinds of layer a :class:`ModelSpec` schedule may list (``ModelSpec.layer_types``).

- ``"full"``: the model's own attention over every token (GQA, MQA, MHA, or MLA when
  ``d_latent`` is set); gpt-oss's full layers, Qwen3-Next's gated attention, Kimi Linear's MLA;
- ``"sliding"``: the same over the last ``window`` tokens (gpt-oss's other layers, the first
  two layers of DeepSeek-V4-Flash);
- ``"sparse"``: DeepSeek Sparse Attention, MLA whose query reads the ``index_topk`` keys its
  lightning indexer scores highest (DeepSeek-V3.2);
- ``"linear"``: a gated delta rule with a short convolution (Qwen3-Next's Gated DeltaNet,
  Kimi Delta Attention);
- ``"csa"``: DeepSeek-V4's compressed sparse attention, a window plus the top
  ``index_topk`` of the rows that compress ``csa_rate`` tokens each;
- ``"hca"``: DeepSeek-V4's heavily compressed attention, a window plus every row that
  compresses ``hca_rate`` tokens.
"""

LAYER_PARTS: tuple[str, ...] = ("kv", "compressed", "index", "state", "conv", "compressor")
"""What one layer holds for a sequence, by part (:meth:`ModelSpec.layer_values`).

- ``"kv"``: keys and values of the tokens attended to in full (or MLA's latent and RoPE key;
  one vector serving as both key and value when ``shared_kv``);
- ``"compressed"``: DeepSeek-V4's compressed rows, one vector per ``m`` tokens;
- ``"index"``: the lightning indexer's keys (one per token for ``"sparse"``, one per
  compressed row for ``"csa"``);
- ``"state"``: a linear layer's recurrent state ``S``, ``H_v`` matrices of ``d_k x d_v``;
- ``"conv"``: the last ``K_c - 1`` inputs of a linear layer's short convolution;
- ``"compressor"``: DeepSeek-V4's buffers for the window being compressed.
"""

STATE_PARTS: tuple[str, ...] = ("state", "conv", "compressor")
"""The parts of :data:`LAYER_PARTS` whose size does not depend on ``N``: what a layer keeps
between tokens besides its cache. Implementations often keep them in float32 (the
``state_bytes_per_elem`` of :meth:`ModelSpec.sequence_bytes`)."""

_PARTNERS: dict[str, str] = {"sliding": "full", "linear": "full", "hca": "csa"}
"""A cheap kind of layer and the kind that reads the whole context beside it in a hybrid."""


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
            (:meth:`windowed_cache_bytes`). With ``layer_types``, the number of
            ``"sliding"`` layers (DeepSeek-V4's compressed layers have a window too).
        layer_types: the kind of every layer, in order, each one of :data:`LAYER_KINDS`;
            empty (the default) for a model whose layers are all its own attention, the
            first ``n_window_layers`` of them sliding (:attr:`schedule`).
        shared_kv: one cached vector serves as both key and value (DeepSeek-V4): a token
            costs ``G · d_head`` numbers, not ``G · (d_head + d_v)``.
        n_linear_heads: ``H_v``, the heads of a ``"linear"`` layer's state (its value heads).
        n_linear_key_heads: ``H_k``, its query and key heads (``None``: ``H_v``); each is
            shared by ``H_v / H_k`` value heads, as in GQA.
        d_linear_key: ``d_k``, the key width of one linear head.
        d_linear_value: ``d_v``, the value width of one linear head (``None``: ``d_k``).
        conv_kernel: ``K_c``, the width of the linear layer's short causal convolution over
            its queries, keys and values (0 for none).
        n_index_heads: ``H_I``, the lightning indexer's query heads.
        d_index: ``d_I``, the width of one indexer key (and query head).
        index_topk: ``k``, the keys (or compressed rows) each query attends to after the
            indexer's selection.
        csa_rate: ``m``, tokens per compressed row of a ``"csa"`` layer (DeepSeek-V4: 4).
        hca_rate: ``m'``, tokens per compressed row of an ``"hca"`` layer (DeepSeek-V4: 128).

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
    layer_types: tuple[str, ...] = ()
    shared_kv: bool = False
    n_linear_heads: int | None = None
    n_linear_key_heads: int | None = None
    d_linear_key: int | None = None
    d_linear_value: int | None = None
    conv_kernel: int = 0
    n_index_heads: int | None = None
    d_index: int | None = None
    index_topk: int | None = None
    csa_rate: int | None = None
    hca_rate: int | None = None

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
        for arg in ("source", "notes"):
            if not isinstance(getattr(self, arg), str):
                raise TypeError(f"{arg} must be a str; got {type(getattr(self, arg)).__name__}")
        check_bool("shared_kv", self.shared_kv)
        for arg in ("n_linear_heads", "n_linear_key_heads", "d_linear_key", "d_linear_value",
                    "n_index_heads", "d_index", "index_topk", "csa_rate", "hca_rate"):
            if getattr(self, arg) is not None:
                check_positive_int(arg, getattr(self, arg))
        check_nonnegative_int("conv_kernel", self.conv_kernel)
        if self.n_linear_heads is not None and self.n_linear_key_heads is not None:
            check_divisible("n_linear_heads", self.n_linear_heads, "n_linear_key_heads",
                            self.n_linear_key_heads)
        if not isinstance(self.layer_types, tuple):
            raise TypeError("layer_types must be a tuple of layer kinds; got "
                            f"{type(self.layer_types).__name__}")
        if not self.layer_types:
            if (self.window is None) != (self.n_window_layers == 0):
                raise ValueError(
                    "window and n_window_layers go together: give both (a window width and "
                    "the number of layers using it) or neither; got "
                    f"window={self.window}, n_window_layers={self.n_window_layers}"
                )
            return
        self._check_schedule()

    def _check_schedule(self) -> None:
        """The rules an explicit ``layer_types`` keeps, and the shapes each kind needs."""
        if len(self.layer_types) != self.n_layers:
            raise ValueError(f"layer_types must list one kind per layer, n_layers="
                             f"{self.n_layers}; got {len(self.layer_types)}")
        for kind in self.layer_types:
            check_choice("layer_types[...]", kind, LAYER_KINDS)
        kinds = set(self.layer_types)
        n_sliding = self.layer_types.count("sliding")
        if self.n_window_layers != n_sliding:
            raise ValueError(f"n_window_layers must count the 'sliding' layers of layer_types, "
                             f"{n_sliding}; got {self.n_window_layers}")
        for kind in sorted(kinds):
            self._check_kind_shapes(kind)

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
        and ``2 · d_head``; with ``shared_kv`` (one vector for key and value) the width of
        a head is ``d_head`` alone. Keys count ``d_head`` only: the decoupled RoPE part of an
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
        kv_width = self.d_head if self.shared_kv else self.d_head + self.d_value
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
        (``N_L · G · (d_head + d_v) · b`` when ``d_v`` differs). Every layer counts as a
        full one, whatever ``layer_types`` says; :meth:`sequence_bytes` counts each layer as
        its kind.

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

        which is :meth:`kv_cache_bytes` for a model without a window. Layers of the other
        kinds of ``layer_types`` (linear, sparse, compressed) count as global here;
        :meth:`sequence_bytes` counts them as what they are.

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

    # --- layer schedules: what each kind of layer holds ------------------------------------

    @property
    def schedule(self) -> tuple[str, ...]:
        """The kind of every layer (each one of :data:`LAYER_KINDS`).

        ``layer_types`` when given; otherwise ``n_window_layers`` ``"sliding"`` layers and
        then ``"full"`` ones (the order of a model's layers changes none of the counts here).

        Example:
            >>> GEMMA3_27B.schedule.count("sliding"), GEMMA3_27B.schedule.count("full")
            (52, 10)
            >>> GPT_OSS_120B.schedule[:4]
            ('sliding', 'full', 'sliding', 'full')
        """
        if self.layer_types:
            return self.layer_types
        n_window = self.n_window_layers
        return ("sliding",) * n_window + ("full",) * (self.n_layers - n_window)

    def layer_values(self, kind: str, n_tokens: int) -> dict[str, int]:
        """Numbers one layer of ``kind`` holds for a sequence of ``n_tokens`` tokens, by part.

        With ``r`` the numbers one token's row takes (:meth:`values_per_token_per_layer` of
        the model's own attention: ``G (d_head + d_v)``, ``G d_head`` when ``shared_kv``,
        ``d_L + d_R`` for MLA), ``N = n_tokens`` and ``w`` the window::

            full      kv = N r
            sliding   kv = min(N, w) r
            sparse    kv = N r                  index = N d_I
            linear    state = H_v d_k d_v       conv = (K_c - 1)(2 H_k d_k + H_v d_v)
            csa       kv = min(N, w) r          compressed = floor(N / m) r
                      index = floor(N / m) d_I  compressor = 8 m r + 8 m d_I
            hca       kv = min(N, w) r          compressed = floor(N / m') r
                      compressor = 2 m' r

        The linear layer's convolution runs over its queries and keys (``H_k d_k`` channels
        each) and values (``H_v d_v``) and needs the last ``K_c - 1`` inputs of each channel
        (Hugging Face's caches keep ``K_c`` columns, one more than the recurrence reads).
        DeepSeek-V4's compressor keeps, for the window it is filling, the projected rows and
        their gate scores: ``2m`` rows of width ``2r`` each for CSA's overlapping windows
        (and ``2m`` of ``2 d_I`` for its indexer's compressor), ``m'`` rows of width ``r``
        for HCA (DeepSeek's inference code allocates them once, ``kv_state`` and
        ``score_state``, in float32). A compressed row exists once its ``m`` tokens have all
        arrived, hence ``floor(N / m)``. Attention sinks are parameters and hold nothing.

        Args:
            kind: one of :data:`LAYER_KINDS`; the model must have that kind's shapes.
            n_tokens: ``N``, tokens in the sequence (the newest included).

        Returns:
            dict[str, int]: numbers held, for every part in :data:`LAYER_PARTS`.

        Example:
            >>> QWEN3_NEXT_80B.layer_values("linear", 1_000_000)["state"]  # 32 · 128 · 128
            524288
            >>> GPT_OSS_120B.layer_values("sliding", 1_000_000)["kv"]  # 128 · 2 · 8 · 64
            131072
        """
        check_choice("kind", kind, LAYER_KINDS)
        check_nonnegative_int("n_tokens", n_tokens)
        self._check_kind_shapes(kind)
        n = n_tokens
        parts = dict.fromkeys(LAYER_PARTS, 0)
        if kind == "linear":
            h_v, h_k = self.n_linear_heads, self.n_linear_key_heads or self.n_linear_heads
            d_k = self.d_linear_key
            d_v = self.d_linear_value or d_k
            parts["state"] = h_v * d_k * d_v  # one d_k x d_v matrix per value head
            parts["conv"] = max(self.conv_kernel - 1, 0) * (2 * h_k * d_k + h_v * d_v)
            return parts
        row = self.values_per_token_per_layer("mla" if self.d_latent is not None else "gqa")
        if kind == "full":
            parts["kv"] = n * row
        elif kind == "sparse":
            parts["kv"] = n * row
            parts["index"] = n * self.d_index  # the indexer's key of every token
        else:  # sliding, csa, hca: the window of the newest tokens
            parts["kv"] = min(n, self.window) * row
        if kind == "csa":
            m, d_i = self.csa_rate, self.d_index
            parts["compressed"] = (n // m) * row
            parts["index"] = (n // m) * d_i
            parts["compressor"] = 2 * (2 * m) * (2 * row) + 2 * (2 * m) * (2 * d_i)
        elif kind == "hca":
            m = self.hca_rate
            parts["compressed"] = (n // m) * row
            parts["compressor"] = 2 * m * row
        return parts

    def sequence_values(self, n_tokens: int) -> dict[str, int]:
        """:meth:`layer_values` summed over every layer of :attr:`schedule`, by part.

        Args:
            n_tokens: ``N``, tokens in the sequence.

        Returns:
            dict[str, int]: numbers held by the whole model, for every part in
            :data:`LAYER_PARTS`.
        """
        check_nonnegative_int("n_tokens", n_tokens)
        schedule = self.schedule
        total = dict.fromkeys(LAYER_PARTS, 0)
        for kind in dict.fromkeys(schedule):  # each kind once, times its number of layers
            count = schedule.count(kind)
            for part, values in self.layer_values(kind, n_tokens).items():
                total[part] += count * values
        return total

    def sequence_bytes(
        self,
        n_tokens: int,
        *,
        batch: int = 1,
        bytes_per_elem: int = 2,
        state_bytes_per_elem: int | None = None,
    ) -> int:
        """Bytes the sequences hold between two tokens: every layer's cache and state.

        ``B · sum over layers and parts of layer_values(kind, N)[part] · b``, with the
        parts of :data:`STATE_PARTS` stored at ``state_bytes_per_elem`` instead of ``b``
        when it is given. For a model without ``layer_types`` this is
        :meth:`windowed_cache_bytes`.

        Args:
            n_tokens: ``N``, tokens per sequence.
            batch: ``B``, sequences.
            bytes_per_elem: ``b`` of the caches (2 for bf16/fp16, 1 for fp8).
            state_bytes_per_elem: ``b`` of recurrent states, convolution inputs and
                compressor buffers (4 where they are kept in float32); ``None``: ``b``.

        Returns:
            int: bytes.

        Example:
            >>> GEMMA3_27B.sequence_bytes(131_072) == GEMMA3_27B.windowed_cache_bytes(131_072)
            True
            >>> QWEN3_NEXT_80B.sequence_bytes(0)   # 36 Gated DeltaNet states, bf16
            39518208
        """
        _check_counts(batch=batch, bytes_per_elem=bytes_per_elem, n_tokens=n_tokens)
        state_b = bytes_per_elem if state_bytes_per_elem is None else check_positive_int(
            "state_bytes_per_elem", state_bytes_per_elem)
        values = self.sequence_values(n_tokens)
        total = sum(v * (state_b if part in STATE_PARTS else bytes_per_elem)
                    for part, v in values.items())
        return total * batch

    def interleaved(self, every: int) -> ModelSpec:
        """A copy with its hybrid layers dealt again: one reading the whole context in ``every``.

        A hybrid pairs a cheap kind of layer with one that reads the whole context beside
        it: ``"sliding"`` or ``"linear"`` with ``"full"``, ``"hca"`` with ``"csa"``. Among the
        layers of the two paired kinds (the others stay as they are), the copy gives the
        second kind to every ``every``-th one counted back from the last, and the cheap kind
        to the rest: ``every = 1`` makes them all of the second kind, ``every = 0`` none.
        Counted from the last layer, ``every = 2`` gives gpt-oss-120b's and DeepSeek-V4's
        schedules and ``every = 4`` Qwen3-Next's and Kimi Linear's numbers of full layers.
        A model with no such pair (DeepSeek-V3.2's sparse layers, a model of full layers) is
        returned as it is.

        Args:
            every: one layer of the context-reading kind in this many (0 for none).

        Returns:
            ModelSpec: the model with the new ``layer_types`` (and ``n_window_layers``).

        Raises:
            ValueError: the schedule holds two such pairs, so the choice is ambiguous.

        Example:
            >>> QWEN3_NEXT_80B.interleaved(4).layer_types == QWEN3_NEXT_80B.layer_types
            True
            >>> GPT_OSS_120B.interleaved(4).schedule.count("full")
            9
        """
        check_nonnegative_int("every", every)
        schedule = self.schedule
        pairs = [(cheap, rich) for cheap, rich in _PARTNERS.items()
                 if cheap in schedule and rich in schedule]
        if not pairs:
            return self
        if len(pairs) > 1:
            raise ValueError(f"the schedule of {self.name!r} pairs kinds in more than one way "
                             f"{pairs}; give layer_types by hand")
        (cheap, rich), = pairs
        eligible = [i for i, kind in enumerate(schedule) if kind in (cheap, rich)]
        layers = list(schedule)
        for j, i in enumerate(eligible):
            from_last = len(eligible) - 1 - j
            layers[i] = rich if every and from_last % every == 0 else cheap
        return replace(self, layer_types=tuple(layers),
                       n_window_layers=layers.count("sliding"))

    def _check_kind_shapes(self, kind: str) -> None:
        """Raise unless this model has the shapes a layer of ``kind`` needs."""
        needs = {
            "sliding": ("window",),
            "sparse": ("d_latent", "n_index_heads", "d_index", "index_topk"),
            "linear": ("n_linear_heads", "d_linear_key"),
            "csa": ("window", "csa_rate", "n_index_heads", "d_index", "index_topk"),
            "hca": ("window", "hca_rate"),
        }
        for arg in needs.get(kind, ()):
            if getattr(self, arg) is None:
                raise ValueError(f"{arg} must be set for {kind!r} layers; {self.name!r} has "
                                 f"{arg}=None")


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

# --- the 2025-2026 designs: hybrids, sparse and compressed attention -------------------

_KIMI_FULL_LAYERS = (4, 8, 12, 16, 20, 24, 27)  # linear_attn_config.full_attn_layers, 1-based

GPT_OSS_120B = ModelSpec(
    name="gpt-oss-120b",
    n_layers=36,
    d_model=2880,
    n_heads=64,
    n_kv_heads=8,
    d_head=64,
    vocab_size=201_088,
    window=128,
    n_window_layers=18,
    layer_types=("sliding", "full") * 18,
    source=(
        "OpenAI, 'gpt-oss-120b & gpt-oss-20b Model Card' (2025); config.json of "
        "openai/gpt-oss-120b (num_hidden_layers 36, num_attention_heads 64, "
        "num_key_value_heads 8, head_dim 64, hidden_size 2880, sliding_window 128, "
        "layer_types alternating sliding_attention and full_attention, vocab_size 201088); "
        "transformers' GptOssConfig defaults"
    ),
    notes=(
        "Every layer is GQA with 8 KV heads of width 64; the sliding layers (the first, "
        "third, ...) read the last 128 tokens, the full ones every token. Each head has a "
        "learned sink logit in its softmax: 64 parameters per layer, nothing cached. "
        "The 128 experts (top 4) are not modelled here."
    ),
)

QWEN3_NEXT_80B = ModelSpec(
    name="Qwen3-Next-80B-A3B",
    n_layers=48,
    d_model=2048,
    n_heads=16,
    n_kv_heads=2,
    d_head=256,
    vocab_size=151_936,
    layer_types=("linear", "linear", "linear", "full") * 12,
    n_linear_heads=32,
    n_linear_key_heads=16,
    d_linear_key=128,
    d_linear_value=128,
    conv_kernel=4,
    source=(
        "Qwen team, Qwen3-Next-80B-A3B model card and config.json of "
        "Qwen/Qwen3-Next-80B-A3B-Instruct (num_hidden_layers 48, full_attention_interval 4, "
        "num_attention_heads 16, num_key_value_heads 2, head_dim 256, "
        "linear_num_value_heads 32, linear_num_key_heads 16, linear_key_head_dim 128, "
        "linear_value_head_dim 128, linear_conv_kernel_dim 4, vocab_size 151936); "
        "transformers' Qwen3NextConfig defaults, documented as that checkpoint's"
    ),
    notes=(
        "12 x (3 Gated DeltaNet layers, then 1 gated attention layer). The gated attention "
        "is GQA (16 query heads, 2 KV heads of width 256) whose output is multiplied by a "
        "sigmoid gate: the gate adds a projection, no cache. Each Gated DeltaNet layer keeps "
        "32 states of 128 x 128 and the last 3 inputs of its width-4 convolution over "
        "q, k, v (2 x 16 x 128 + 32 x 128 = 8192 channels). The 512 experts (10 routed + "
        "1 shared) are not modelled here."
    ),
)

KIMI_LINEAR_48B = ModelSpec(
    name="Kimi Linear 48B-A3B",
    n_layers=27,
    d_model=2304,
    n_heads=32,
    n_kv_heads=32,
    d_head=128,
    vocab_size=163_840,
    d_latent=512,
    d_rope=64,
    d_v=128,
    layer_types=tuple("full" if i + 1 in _KIMI_FULL_LAYERS else "linear" for i in range(27)),
    n_linear_heads=32,
    d_linear_key=128,
    d_linear_value=128,
    conv_kernel=4,
    source=(
        "Kimi Team, 'Kimi Linear: An Expressive, Efficient Attention Architecture', "
        "arXiv:2510.26692; config.json of moonshotai/Kimi-Linear-48B-A3B-Instruct "
        "(num_hidden_layers 27, linear_attn_config: full_attn_layers [4, 8, 12, 16, 20, 24, "
        "27], num_heads 32, head_dim 128, short_conv_kernel_size 4; kv_lora_rank 512, "
        "qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, q_lora_rank null, "
        "mla_use_nope true, vocab_size 163840); transformers' KimiLinearConfig"
    ),
    notes=(
        "20 Kimi Delta Attention layers and 7 MLA layers (the 4th, 8th, ..., 24th and the "
        "last): the paper's 3:1 ratio, with the final layer full as well. MLA runs without "
        "positions (mla_use_nope), but the 64-wide key slice that DeepSeek rotates still "
        "exists and is cached: d_L + d_R = 576 numbers per token. Each KDA layer keeps 32 "
        "states of 128 x 128 (its forget gate acts per key channel; the state is the same "
        "size as Gated DeltaNet's) and the last 3 inputs of its width-4 convolution over "
        "q, k, v (3 x 32 x 128 = 12,288 channels). The 256 experts are not modelled here."
    ),
)

DEEPSEEK_V32 = ModelSpec(
    name="DeepSeek-V3.2",
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
    layer_types=("sparse",) * 61,
    n_index_heads=64,
    d_index=128,
    index_topk=2048,
    source=(
        "DeepSeek-AI, DeepSeek-V3.2 (and -Exp) model cards and technical report; config.json "
        "of deepseek-ai/DeepSeek-V3.2 (num_hidden_layers 61, kv_lora_rank 512, "
        "qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, q_lora_rank 1536, "
        "index_n_heads 64, index_head_dim 128, index_topk 2048); transformers' "
        "DeepseekV32Config defaults (checkpoint deepseek-ai/DeepSeek-V3.2-Exp)"
    ),
    notes=(
        "DeepSeek-V3's MLA in every layer, with DeepSeek Sparse Attention: a lightning "
        "indexer (64 heads of width 128, ReLU, weighted sum over heads) scores every earlier "
        "token against the query and MLA attends to the 2048 best. The indexer caches its "
        "own 128-wide key per token beside MLA's 576 (DeepSeek stores it in FP8; counted "
        "here at the cache's b). The multi-token-prediction layer and the experts are not "
        "modelled here."
    ),
)

DEEPSEEK_V4_FLASH = ModelSpec(
    name="DeepSeek-V4-Flash",
    n_layers=43,
    d_model=4096,
    n_heads=64,
    n_kv_heads=1,
    d_head=512,
    vocab_size=129_280,
    shared_kv=True,
    window=128,
    n_window_layers=2,
    layer_types=("sliding", "sliding") + ("csa", "hca") * 20 + ("csa",),
    n_index_heads=64,
    d_index=128,
    index_topk=512,
    csa_rate=4,
    hca_rate=128,
    source=(
        "DeepSeek-AI, 'DeepSeek-V4: Towards Highly Efficient Million-Token Context "
        "Intelligence', arXiv:2606.19348 (sections 2.3.1 and 2.3.2); config.json of "
        "deepseek-ai/DeepSeek-V4-Flash (num_hidden_layers 43, num_attention_heads 64, "
        "num_key_value_heads 1, head_dim 512, qk_rope_head_dim 64, sliding_window 128, "
        "compress_ratios [0, 0, 4, 128, 4, 128, ..., 4] for the 43 layers, then 0 for the "
        "prediction layer, index_n_heads 64, index_head_dim 128, index_topk 512, "
        "vocab_size 129280); transformers' DeepseekV4Config defaults (checkpoint "
        "deepseek-ai/DeepSeek-V4-Flash-Base)"
    ),
    notes=(
        "Every layer keeps a 128-token window of one 512-wide vector per token that serves "
        "as key and value for all 64 heads, and a learned sink logit per head. Layers 0 "
        "and 1 have only the window; from layer 2 on, compressed sparse attention (one row "
        "per 4 tokens, an indexer of 64 heads of width 128 picks 512 rows) alternates with "
        "heavily compressed attention (one row per 128 tokens, all read). DeepSeek stores "
        "the non-RoPE dimensions in FP8 and the indexer keys in lower precision; here every "
        "cached number counts b bytes. The experts, hyper-connections and prediction layer "
        "are not modelled here."
    ),
)

DEEPSEEK_V4_PRO = ModelSpec(
    name="DeepSeek-V4-Pro",
    n_layers=61,
    d_model=7168,
    n_heads=128,
    n_kv_heads=1,
    d_head=512,
    vocab_size=129_280,
    shared_kv=True,
    window=128,
    layer_types=("hca", "hca") + ("csa", "hca") * 29 + ("csa",),
    n_index_heads=64,
    d_index=128,
    index_topk=1024,
    csa_rate=4,
    hca_rate=128,
    source=(
        "DeepSeek-AI, 'DeepSeek-V4: Towards Highly Efficient Million-Token Context "
        "Intelligence', arXiv:2606.19348; config.json of deepseek-ai/DeepSeek-V4-Pro "
        "(num_hidden_layers 61, num_attention_heads 128, num_key_value_heads 1, head_dim 512, "
        "sliding_window 128, compress_ratios [128, 128, 4, 128, ..., 4] for the 61 layers, "
        "then 0 for the prediction layer, index_n_heads 64, index_head_dim 128, "
        "index_topk 1024)"
    ),
    notes=(
        "DeepSeek-V4-Flash's attention, wider and deeper: 31 heavily compressed layers "
        "(layers 0 and 1, then every odd layer) and 30 compressed sparse ones whose indexer "
        "picks 1024 rows. The experts, hyper-connections and prediction layer are not "
        "modelled here."
    ),
)

FRONTIER: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        GPT_OSS_120B,
        QWEN3_NEXT_80B,
        KIMI_LINEAR_48B,
        DEEPSEEK_V32,
        DEEPSEEK_V4_FLASH,
        DEEPSEEK_V4_PRO,
    )
}
"""The 2025-2026 designs, keyed by display name; apart from :data:`PRESETS`, whose models the
calculator of lesson 05 lists.

:meta hide-value:
"""

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
"""Every preset, keyed by its display name (``spec.name``).

:meta hide-value:
"""


def _check_counts(**counts: object) -> None:
    """Every count must be a positive int, except ``n_tokens`` and ``d_rope`` (may be 0)."""
    for name, value in counts.items():
        if name in ("n_tokens", "d_rope"):
            check_nonnegative_int(name, value)
        else:
            check_positive_int(name, value)
