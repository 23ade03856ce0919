"""Checked exercises of lesson 09: the frontier."""

from __future__ import annotations

import math

import torch

from attnlib.analysis.approx import LinearAttentionState
from attnlib.analysis.flash import tiled_attention
from attnlib.exercises import as_tensor, checker, compare, numbers, scalar, whole_number


def _online_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exercise 09.1's one query: logits q . k_j = (0, 2, 4, 1) (q = 1, scale 1), values 1..4."""
    t = torch.tensor([[0.0], [2.0], [4.0], [1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    return torch.ones(1, 1, dtype=torch.float64), t, v


def _online_mistakes() -> list[tuple[torch.Tensor, str]]:
    _, t, v = _online_example()
    no_rescale = (math.exp(-2) * 1 + 2 + 3 + math.exp(-3) * 4) / (math.exp(-2) + 1 + 1
                                                                   + math.exp(-3))
    block_means = (float(torch.softmax(t[:2, 0], 0) @ v[:2, 0])
                   + float(torch.softmax(t[2:, 0], 0) @ v[2:, 0])) / 2
    return [
        (scalar(no_rescale), "that skips the rescaling: when the second block raises the "
                             "maximum from 2 to 4, multiply the old l and o by e^(2 - 4) "
                             "before adding the new terms."),
        (scalar(block_means), "that averages the two blocks' outputs; the blocks must be "
                              "weighted by their shares of the normaliser l."),
        (scalar(float(v.mean())), "that is the plain mean of the values: the weights are a "
                                  "softmax of the logits, not uniform."),
        (scalar(float(t[:, 0] @ v[:, 0] / t.sum())), "that weighs the values by the logits "
                                                     "themselves; the weights are e^(logit), "
                                                     "computed as e^(logit - m)."),
        (scalar(float(torch.softmax(t[2:, 0], 0) @ v[2:, 0])), "that is the second block "
                                                               "alone; the first block's "
                                                               "terms stay in l and o, "
                                                               "rescaled by e^(2 - 4)."),
        (scalar(float(torch.softmax(t[:2, 0], 0) @ v[:2, 0])), "that is the first block "
                                                               "alone; the second block adds "
                                                               "its terms to l and o."),
        (scalar(float(torch.softmax(t[:, 0] / 2, 0) @ v[:, 0])), "that divides the logits by "
                                                                 "2; they are given as logits, "
                                                                 "already scaled: use them as "
                                                                 "they are."),
    ]


@checker("09.1", mistakes=_online_mistakes)
def _online_softmax_output(answer: object) -> str | None:
    """Output of the online softmax for logits (0, 2 | 4, 1) and values (1, 2 | 3, 4)."""
    q, t, v = _online_example()
    expected = tiled_attention(q, t, v, block_size=2, scale=1.0).reshape(())
    got = as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())
    return compare(answer, expected, rel=1e-3, what="one number, the output o / l",
                   mistakes=_online_mistakes())


@whole_number("09.2", what="a whole number of bytes", floats="whole")
def _recurrent_state_bytes():
    """Bytes of the linear-attention state of one sequence: 48 layers, 32 heads, r = 128
    features, values of width d_V = 64 (r differs from d_V, so that a state counted with
    the one width in place of the other is caught)."""
    layers, heads, r, d_v = 48, 32, 128, 64
    state = LinearAttentionState(lambda x: x.abs())  # a feature map that keeps r = d_QK
    state.step(torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, d_v, dtype=torch.bfloat16))
    hints = (
        (layers * heads * r * d_v * 2, "that counts S_t only; the state also holds the "
                                       "normaliser z_t, r more numbers per head."),
        (layers * heads * (r * d_v + r), "that is half the answer: count bytes, 2 for each "
                                         "bfloat16 number, over all 48 layers."),
        (heads * (r * d_v + r) * 2, "that is one layer; the question asks for all 48."),
        (layers * heads * (r * d_v + r) * 4, "that is float32; bfloat16 takes 2 bytes."),
        (layers * heads * (r * d_v + d_v) * 2, "that gives z_t d_V numbers; z_t sums the "
                                               "features phi(k_j), r numbers per head."),
        (layers * heads * (r * r + r) * 2, "that makes S_t r x r; it sums phi(k_j)^T v_j, "
                                           "r x d_V numbers per head."),
        (layers * heads * (d_v * d_v + r) * 2, "that makes S_t d_V x d_V; it sums "
                                               "phi(k_j)^T v_j, r x d_V numbers per head."),
    )
    return layers * state.nbytes, hints, ("not quite: per head, S_t has r x d_V numbers and "
                                          "z_t has r; multiply by heads, layers and bytes per "
                                          "number.")


@numbers("09.3", rel=1e-3, what="one number, a fraction between 0 and 1")
def _sparse_query_cost():
    """Multiply-adds of one sparse query (indexer + top-k) over those of full attention."""
    n, d, index_cost, k = 131_072, 128, 64, 2_048
    expected = (n * index_cost + k * 2 * d) / (n * 2 * d)
    return scalar(expected), (
        (scalar(k / n), "that counts the attention to the top-k keys only; the indexer scores "
                        "every one of the 131,072 keys first."),
        (scalar(index_cost / (2 * d)), "that is the indexer alone; add the attention to the "
                                       "2,048 chosen keys."),
        (scalar(100 * expected), "that is a percentage; give the fraction."),
        (scalar((n * index_cost + k * d) / (n * 2 * d)), "that counts d multiply-adds per "
                                                         "chosen key; attending to a key costs "
                                                         "2d, d for q . k and d for p v."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises

from attnlib.exercises.implement import (  # noqa: E402
    Case,
    CheckFailedError,
    Implementation,
    Mistake,
    differ,
    function_case,
    implementation,
    randn,
)

# What may read all the keys at once in a tiled function: slicing, layout, metadata, and
# new tensors that take only K's or V's dtype and device (V.new_zeros(...)).
_LAYOUT = frozenset({
    "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor",
    "__getitem__", "__setitem__", "__get__", "__len__", "__iter__", "__format__", "__repr__",
    "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "narrow", "select",
    "transpose", "t", "permute", "movedim", "swapaxes", "swapdims", "view", "reshape",
    "flatten", "unflatten", "unsqueeze", "squeeze", "expand", "expand_as", "contiguous",
    "clone", "detach", "to", "type", "type_as", "float", "double", "half", "bfloat16", "cpu",
    "size", "dim", "numel", "stride", "element_size", "is_floating_point", "is_contiguous",
    "pad", "cat", "stack", "roll", "flip"})


class _Keys(torch.Tensor):
    """K or V in exercise 09.5's tiling case, and every tensor computed from them.

    Every operation other than slicing, layout and metadata (:data:`_LAYOUT`) records in
    ``_Keys.widest`` the longest axis of the inputs it reads from K or V. In the case's
    shapes only the key axis is longer than ``block_size``, so a function that tiles reads
    at most ``block_size`` keys in any computation, and exactly that many in a full block.
    """

    widest = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") not in _LAYOUT:
            with torch._C.DisableTorchFunctionSubclass():
                for x in _leaves((args, kwargs or {})):
                    if isinstance(x, _Keys) and x.dim():
                        cls.widest = max(cls.widest, max(x.shape))
        return super().__torch_function__(func, types, args, kwargs)


def _leaves(tree: object) -> list[object]:
    """The objects inside nested tuples, lists and dicts of a call's arguments."""
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, (tuple, list)):
        return [leaf for x in tree for leaf in _leaves(x)]
    return [tree]


def _tiling_case(n_kv: int = 23, block_size: int = 5) -> Case:
    """A case that runs the function on K and V that record what each computation reads,
    and fails a function whose output is right when a computation reads more keys than
    ``block_size`` (it is not tiled) or none reads a full block (it ignores ``block_size``);
    a wrong output is returned as it is, for the usual comparison. The other axes (N_Q = 3,
    d_QK = 4, d_V = 2) are shorter than the block."""
    Q, K, V = randn(3, 4, seed=23), randn(n_kv, 4, seed=24), randn(n_kv, 2, seed=25)

    def run(fn):
        _Keys.widest = 0
        out = fn(Q.clone(), K.clone().as_subclass(_Keys), V.clone().as_subclass(_Keys),
                 block_size)
        widest = _Keys.widest
        if isinstance(out, torch.Tensor):
            out = out.as_subclass(torch.Tensor)
        if differ(out, tiled_attention(Q, K, V, block_size=block_size), "the output"):
            return out  # a wrong output is reported as one, before how it was computed
        if widest > block_size:
            raise CheckFailedError(
                f"one computation reads {widest} keys of K or V at once, with block_size = "
                f"{block_size}: slice K and V into blocks and compute on one block at a time, "
                "never on all the keys")
        if widest < block_size:
            raise CheckFailedError(
                f"your blocks hold at most {widest} keys, with block_size = {block_size}: "
                "take block_size keys at a time (the last block may be shorter)")
        return out

    return Case(f"float64, {n_kv} keys in blocks of {block_size}, each computation reading "
                "one block", run, f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}")


def _online(Q, K, V, block_size, *, rescale_sum=True, rescale_out=True, update_max=True):
    scale = Q.shape[-1] ** -0.5
    m = torch.full((*Q.shape[:-1], 1), -math.inf, dtype=Q.dtype)  # running maximum
    l = torch.zeros_like(m)  # running sum of exponentials
    O = torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)  # running weighted sum
    for start in range(0, K.shape[-2], block_size):
        S = Q @ K[..., start:start + block_size, :].mT * scale  # (..., N_Q, b)
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True)) if update_max or start == 0 else m
        alpha = torch.exp(m - m_new)
        P = torch.exp(S - m_new)
        l = (alpha * l if rescale_sum else l) + P.sum(dim=-1, keepdim=True)
        O = (alpha * O if rescale_out else O) + P @ V[..., start:start + block_size, :]
        m = m_new
    return O / l


@implementation("09.5")
def _online_softmax() -> Implementation:
    """Tiled attention: one block of keys at a time, a running maximum, sum and output."""

    def reference(Q, K, V, block_size):
        return tiled_attention(Q, K, V, block_size=block_size)

    def sum_not_rescaled(Q, K, V, block_size):
        return _online(Q, K, V, block_size, rescale_sum=False)

    def out_not_rescaled(Q, K, V, block_size):
        return _online(Q, K, V, block_size, rescale_out=False)

    def first_max(Q, K, V, block_size):
        return _online(Q, K, V, block_size, update_max=False)

    def mean_of_blocks(Q, K, V, block_size):
        Ys = [torch.softmax(Q @ K[..., s:s + block_size, :].mT * Q.shape[-1] ** -0.5, dim=-1)
              @ V[..., s:s + block_size, :] for s in range(0, K.shape[-2], block_size)]
        return torch.stack(Ys).mean(dim=0)

    F32 = torch.float32
    growing = torch.linspace(0.5, 12.0, 20, dtype=torch.float64)[:, None]  # key norms grow
    cases = [
        function_case("float64, N_KV = 10 in blocks of 4 (a short last block)",
                      {"Q": randn(3, 4, seed=1), "K": randn(10, 4, seed=2),
                       "V": randn(10, 2, seed=3),
                       "block_size": 4}),
        function_case("float32, batch dims, blocks of 3",
                      {"Q": randn(2, 5, 8, seed=4, dtype=F32),
                       "K": randn(2, 12, 8, seed=5, dtype=F32),
                       "V": randn(2, 12, 3, seed=6, dtype=F32), "block_size": 3}),
        function_case("float32, logits growing past 300 across the blocks",
                      {"Q": randn(2, 4, seed=7, scale=4.0).to(F32),
                       "K": (growing * randn(20, 4, seed=8, scale=4.0)).to(F32),
                       "V": randn(20, 2, seed=9, dtype=F32), "block_size": 5}),
        function_case("float64, blocks of 1", {"Q": randn(2, 3, seed=10), "K": randn(5, 3, seed=11),
                                               "V": randn(5, 4, seed=12), "block_size": 1}),
        function_case("float64, one block larger than N_KV",
                      {"Q": randn(1, 2, seed=13), "K": randn(3, 2, seed=14),
                       "V": randn(3, 2, seed=15),
                       "block_size": 8}),
        function_case("float32, a query whose largest logits come first, the last blocks "
                      "over 200 below them",
                      {"Q": randn(2, 4, seed=16, scale=4.0).to(F32),
                       "K": (growing.flip(0) * randn(20, 4, seed=17, scale=4.0)).to(F32),
                       "V": randn(20, 2, seed=18, dtype=F32), "block_size": 5}),
        function_case("float32, more queries than keys, one query's logits all below -150",
                      {"Q": torch.cat((-80 * randn(1, 4, seed=19).abs(),
                                       randn(4, 4, seed=20))).to(F32),
                       "K": (1 + 3 * randn(3, 4, seed=21).abs()).to(F32),
                       "V": randn(3, 3, seed=22, dtype=F32), "block_size": 2}),
        _tiling_case(),
    ]
    return Implementation(
        "a function tiled(Q, K, V, block_size) returning Y", reference, cases, (
            Mistake(sum_not_rescaled, "when the running maximum rises from m to m', the "
                                      "running sum l was counted against m: multiply it by "
                                      "exp(m - m') before adding the new block's sum."),
            Mistake(out_not_rescaled, "when the running maximum rises from m to m', the running "
                                      "output was weighted against m: multiply it by "
                                      "exp(m - m') before adding the new block's P V."),
            Mistake(first_max, "the running maximum must be updated at every block: a later "
                               "block with larger logits overflows exp(S - m) otherwise."),
            Mistake(mean_of_blocks, "the mean of the blocks' own softmax outputs is not the "
                                    "softmax over all the keys: the blocks must be weighted "
                                    "by their sums of exponentials, which the running l and m "
                                    "keep."),
        ))
