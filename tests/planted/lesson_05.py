"""Planted wrong answers for lesson 05's exercises."""

from __future__ import annotations

import torch

from planted import Planted

# 05.1: 32 layers, 8 KV heads of 128, FP8, 16 sequences of 32,768 tokens
PER_TOKEN_FP8 = 2 * 32 * 8 * 128 * 1
# 05.2: Llama 3 8B and Llama 3 70B, counted by hand per token of a cached step
def _step(n_l, d, h, g, d_head, d_ff, n_t):
    """(projections, SwiGLU, head, attention per key) of one cached step."""
    projections = n_l * (d * h * d_head + 2 * d * g * d_head + h * d_head * d)
    return projections, n_l * 3 * d * d_ff, d * n_t, 2 * n_l * h * d_head


N_L, D, H, G, D_HEAD, D_FF, N_T = 32, 4096, 32, 8, 128, 14_336, 128_256
PROJECTIONS, SWIGLU, HEAD, PER_KEY = _step(N_L, D, H, G, D_HEAD, D_FF, N_T)
PROJECTIONS_70, SWIGLU_70, HEAD_70, PER_KEY_70 = _step(80, 8192, 64, 8, 128, 28_672, N_T)
REST, REST_70 = PROJECTIONS + SWIGLU + HEAD, PROJECTIONS_70 + SWIGLU_70 + HEAD_70
# 05.3: 80 GB, Llama 3 8B's 8.03 billion weights in bf16, 131,072 bytes of cache per token
WEIGHTS = 8_030_261_248
PER_TOKEN = 2 * 32 * 8 * 128 * 2


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# 05.5: MyKVCache
class _AbsoluteAxis:
    """Concatenates on dim=2, the token axis only when there is exactly one batch dim."""

    def __init__(self):
        self.K = self.V = None

    def append(self, K, V):
        if self.K is None:
            self.K, self.V = K, V
        else:
            self.K, self.V = torch.cat((self.K, K), dim=2), torch.cat((self.V, V), dim=2)
        return self.K, self.V

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[2]


class _Method:
    """n_tokens written as a method, without @property."""

    def __init__(self):
        self.K = self.V = None

    def append(self, K, V):
        self.K = K if self.K is None else torch.cat((self.K, K), dim=-2)
        self.V = V if self.V is None else torch.cat((self.V, V), dim=-2)
        return self.K, self.V

    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]


class _CountsAppends(_Method):
    """Counts the calls to append."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def append(self, K, V):
        self.calls += 1
        return super().append(K, V)

    @property
    def n_tokens(self):
        return self.calls


class _Float32Buffer:
    """Preallocates float32 buffers, whatever dtype the keys come in."""

    def __init__(self):
        self.K = self.V = None
        self.n = 0

    def append(self, K, V):
        if self.K is None:
            self.K = torch.zeros(*K.shape[:-2], 64, K.shape[-1])
            self.V = torch.zeros(*V.shape[:-2], 64, V.shape[-1])
        n = K.shape[-2]
        self.K[..., self.n:self.n + n, :] = K
        self.V[..., self.n:self.n + n, :] = V
        self.n += n
        return self.K[..., :self.n, :], self.V[..., :self.n, :]

    @property
    def n_tokens(self):
        return self.n


class _Latest(_Method):
    """Returns only the keys and values just appended."""

    def append(self, K, V):
        super().append(K, V)
        return K, V

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]


class _NoEmpty:
    """Fails to report 0 tokens before the first append."""

    def append(self, K, V):
        if not hasattr(self, "K"):
            self.K, self.V = K, V
        else:
            self.K, self.V = torch.cat((self.K, K), dim=-2), torch.cat((self.V, V), dim=-2)
        return self.K, self.V

    @property
    def n_tokens(self):
        return self.K.shape[-2]


PLANTED = [
    # 05.1: bytes of an FP8 cache for a batch
    Planted("05.1", "bits, not bytes", 8 * PER_TOKEN_FP8 * 16 * 32_768,
            avoid=r"GiB|GB|one sequence|keys only|single token"),
    Planted("05.1", "32,000 tokens a sequence", PER_TOKEN_FP8 * 16 * 32_000,
            avoid=r"GiB|GB|one sequence|keys only|single token|round"),
    Planted("05.1", "32 heads, one per layer mistaken", 2 * 32 * 32 * 128 * 16 * 32_768,
            avoid=r"GiB|GB|one sequence|keys only|single token|bf16"),
    Planted("05.1", "a bf16 cache", 2 * PER_TOKEN_FP8 * 16 * 32_768, names=r"2-byte|bf16"),
    Planted("05.1", "in GiB", PER_TOKEN_FP8 * 16 * 32_768 / 2**30, names=r"GiB"),
    # the same number as a bf16 cache: the hint names both causes
    Planted("05.1", "16 KV heads", 2 * 32 * 16 * 128 * 16 * 32_768, names=r"16 KV heads"),
    # 05.2: the N from which attention reaches the rest, (Llama 3 8B, Llama 3 70B)
    Planted("05.2", "the output head left out",
            (_ceil(PROJECTIONS + SWIGLU, PER_KEY), _ceil(PROJECTIONS_70 + SWIGLU_70, PER_KEY_70)),
            names=r"output head"),
    Planted("05.2", "more than, not at least as many",
            (REST // PER_KEY + 1, REST_70 // PER_KEY_70 + 1), names=r"at least as many"),
    Planted("05.2", "Q K^T only per key",
            (_ceil(REST, PER_KEY // 2), _ceil(REST_70, PER_KEY_70 // 2)), names=r"Q K\^T only"),
    Planted("05.2", "a plain MLP with d_ff = 4d", (
        _ceil(PROJECTIONS + N_L * 2 * D * 4 * D + HEAD, PER_KEY),
        _ceil(PROJECTIONS_70 + 80 * 2 * 8192 * 4 * 8192 + HEAD_70, PER_KEY_70))),
    Planted("05.2", "W_O left out", (
        _ceil(REST - N_L * H * D_HEAD * D, PER_KEY),
        _ceil(REST_70 - 80 * 64 * 128 * 8192, PER_KEY_70))),
    # the old question (Llama 3 8B alone) passed these: its division is exact
    Planted("05.2", "the division rounded down", (REST // PER_KEY, REST_70 // PER_KEY_70),
            names=r"round"),
    Planted("05.2", "the division as a float, not rounded",
            (REST / PER_KEY, REST_70 / PER_KEY_70), avoid=r"round.*down"),
    # 05.3: tokens of cache beside the weights in 80 GB
    Planted("05.3", "80 GiB", (80 * 2**30 - 2 * WEIGHTS) // PER_TOKEN, names=r"GiB"),
    Planted("05.3", "the weights forgotten", 80 * 10**9 // PER_TOKEN, names=r"ignores the weights"),
    Planted("05.3", "the weights in float32", (80 * 10**9 - 4 * WEIGHTS) // PER_TOKEN),
    # the same number as an fp8 cache: the hint names both causes
    Planted("05.3", "the keys alone", (80 * 10**9 - 2 * WEIGHTS) // (PER_TOKEN // 2),
            names=r"keys\s+alone"),
    Planted("05.3", "the nominal 8 billion weights", (80 * 10**9 - 16 * 10**9) // PER_TOKEN),
    Planted("05.3", "rounded up", -(-(80 * 10**9 - 2 * WEIGHTS) // PER_TOKEN),
            names=r"round the number of tokens down"),
    # 05.5: a KV cache class
    Planted("05.5", "the token axis as dim=2", _AbsoluteAxis),
    Planted("05.5", "n_tokens counts the calls", _CountsAppends, names=r"not calls"),
    Planted("05.5", "n_tokens a method", _Method, names=r"property"),
    Planted("05.5", "float32 buffers", _Float32Buffer, names=r"dtype"),
    Planted("05.5", "only the new keys returned", _Latest, names=r"not only the new"),
    Planted("05.5", "no count before the first append", _NoEmpty),
]
