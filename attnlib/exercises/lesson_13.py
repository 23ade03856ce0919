"""Checked exercises of lesson 13: attention as a kernel, from one tile in torch to
FlashAttention-2's forward and backward in Triton.

- 13.1: the backward of one tile in torch, given Q, K, V, O, dO and the row log-sum-exp L;
- 13.2: a fused row softmax in Triton, one program per row;
- 13.3: a tiled matrix product with ``tl.dot``, masked on every side;
- 13.4: FlashAttention-2's forward: one program per query tile, the online softmax over key
  tiles, O and L written;
- 13.5: the same kernel, causal: the tiles above the diagonal skipped, aligned bottom-right;
- 13.6: the backward's dK and dV, one program per key tile, P rebuilt from L;
- 13.7: the backward's dQ, one program per query tile.

The Triton exercises run the reader's kernel on tensors laid out to show what the interpreter
hides (:mod:`attnlib.exercises.triton_checks`): strides that differ from the row lengths,
guard bands, outputs that start as a NaN no arithmetic makes, and, in the interpreter,
every address watched before it is touched. Their expected answers come from PyTorch
(the closed forms of :mod:`attnlib.kernels.backward`, in float64), never from a kernel.
Tolerances, per dtype of the output, are those of :data:`attnlib.exercises.implement.TOLERANCES`
(float32: 1e-4 relative, 1e-5 of the largest entry; float16: 2e-3): the same on a GPU,
since every ``tl.dot`` of the kernels asks ``input_precision="ieee"``, which keeps float32
inputs out of TF32.

The modules with the kernels import triton; this one imports them on first use of a check,
so that ``import attnlib.exercises`` loads no Triton.
"""

from __future__ import annotations

import torch

from attnlib.device import default_device
from attnlib.exercises.implement import (
    Case,
    CheckFailedError,
    Implementation,
    Mistake,
    differ,
    function_case,
    implementation,
)
from attnlib.exercises.implement import randn as _randn
from attnlib.kernels.backward import attention_backward, attention_forward

__all__ = ["reader_flash_attention"]


def reader_flash_attention(forward=None, dkdv=None, dq=None):
    """The reader's kernels of exercises 13.4-13.7 as one differentiable attention; see
    :func:`attnlib.exercises.lesson_13_kernels.reader_flash_attention` (imports triton)."""
    from attnlib.exercises import lesson_13_kernels

    return lesson_13_kernels.reader_flash_attention(forward, dkdv, dq)


def _kernels():
    from attnlib.exercises import lesson_13_kernels

    return lesson_13_kernels


class _Reference:
    """Marks the expected answer in a case's ``run``: computed by PyTorch, not launched."""

    def __repr__(self) -> str:
        return "the PyTorch reference"


_REFERENCE = _Reference()


# ---------------------------------------------------------------------------------------
# 13.1: the backward of one tile, in torch
# ---------------------------------------------------------------------------------------


@implementation("13.1")
def _tile_backward() -> Implementation:
    """dQ, dK, dV of one tile of softmax attention, P rebuilt from L = rowwise logsumexp."""

    def reference(Q, K, V, O, dO, L, scale):
        P = torch.exp(scale * Q @ K.mT - L[:, None])
        dV = P.mT @ dO
        dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
        return scale * dS @ K, scale * dS.mT @ Q, dV

    def wrong(rebuild_scaled=True, row_term="rowsum(dO*O)", grad_scale="once",
              dv_transposed=True, dk_transposed=True, own_scale=False):
        def tile_backward(Q, K, V, O, dO, L, scale):
            s = Q.shape[-1] ** -0.5 if own_scale else scale
            P = torch.exp((s * Q @ K.mT if rebuild_scaled else Q @ K.mT) - L[:, None])
            dP = dO @ V.mT
            D = (dO * O).sum(-1, keepdim=True)
            dS = {"none": P * dP, "rowsum(dP)": P * (dP - dP.sum(-1, keepdim=True)),
                  "outside": P * dP - D}.get(row_term, P * (dP - D))
            f = {"none": 1.0, "twice": s * s}.get(grad_scale, s)
            dV = P.mT @ dO if dv_transposed else P @ dO
            dK = f * dS.mT @ Q if dk_transposed else f * dS @ Q
            return f * dS @ K, dK, dV
        return tile_backward

    def case(name, seed, N, M, d, d_v, dtype, scale):
        Q = _randn(N, d, seed=seed, dtype=dtype)
        K = _randn(M, d, seed=seed + 1, dtype=dtype)
        V = _randn(M, d_v, seed=seed + 2, dtype=dtype)
        leaves = [x.clone().requires_grad_() for x in (Q, K, V)]
        O = torch.softmax(scale * leaves[0] @ leaves[1].mT, dim=-1) @ leaves[2]
        L = torch.logsumexp(scale * Q @ K.mT, dim=-1)
        dO = _randn(N, d_v, seed=seed + 3, dtype=dtype)
        expected = torch.autograd.grad(O, leaves, dO)  # autograd, the independent reference
        O = O.detach()
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in
                   zip(expected, reference(Q, K, V, O, dO, L, scale), strict=True))
        return function_case(name, {"Q": Q, "K": K, "V": V, "O": O, "dO": dO, "L": L},
                             scale=scale)

    return Implementation(
        "a function tile_backward(Q, K, V, O, dO, L, scale) returning (dQ, dK, dV)", reference,
        [case("float64: 6 queries, 9 keys, d = 4, d_v = 3, scale 0.3", 5, 6, 9, 4, 3,
              torch.float64, 0.3),
         case("float32: 8 queries, 5 keys, d = 16, scale 0.9", 11, 8, 5, 16, 16,
              torch.float32, 0.9)],
        (
            Mistake(wrong(row_term="none"),
                    "forgetting the rowsum(dO * O) term: dS = P * (dP - D) with "
                    "D = rowsum(dO * O); a row of P sums to 1, and D is the part of the "
                    "gradient that moves all of a row's weights at once."),
            Mistake(wrong(row_term="rowsum(dP)"),
                    "D = rowsum(dP) sums dP over the row unweighted; the row term is "
                    "D = rowsum(P * dP), which equals rowsum(dO * O) because O = P V."),
            Mistake(wrong(row_term="outside"),
                    "dS = P * dP - D subtracts D outside the product: the row term is "
                    "weighted by P too, dS = P * (dP - D)."),
            Mistake(wrong(rebuild_scaled=False),
                    "the scale is missing when P is rebuilt: L is the log-sum-exp of the "
                    "scaled scores, so P = exp(scale * Q K^T - L)."),
            Mistake(wrong(own_scale=True),
                    "the scale given is not 1/sqrt(d) here: use the argument scale "
                    "everywhere, in P and in dQ and dK."),
            Mistake(wrong(grad_scale="none"),
                    "dQ = scale dS K and dK = scale dS^T Q: the chain rule through "
                    "S = scale Q K^T brings one factor scale."),
            Mistake(wrong(grad_scale="twice"),
                    "the scale applied twice: S = scale Q K^T already carries it into P; "
                    "dQ = scale dS K and dK = scale dS^T Q take it once."),
            Mistake(wrong(dv_transposed=False),
                    "dV = P^T dO: key j collects from every query that read it, so P is "
                    "transposed."),
            Mistake(wrong(dk_transposed=False),
                    "dK = scale dS^T Q: key j collects from every query, so dS is "
                    "transposed."),
        ),
        outputs=("dQ", "dK", "dV"))


# ---------------------------------------------------------------------------------------
# 13.2 and 13.3: a row softmax, a tiled product
# ---------------------------------------------------------------------------------------


@implementation("13.2")
def _triton_softmax() -> Implementation:
    """A @triton.jit kernel softmax_kernel(X, Y, stride, n_cols, BLOCK), one program a row."""
    k = _kernels()

    def case(name, seed, rows, n, scale):
        x = _randn(rows, n, seed=seed, dtype=torch.float32, scale=scale).to(default_device())

        def run(fn):
            if fn is _REFERENCE:
                return torch.softmax(x.double(), dim=-1).float()
            return k.run_softmax(fn, x)
        return Case(name, run, f"X {tuple(x.shape)}, row stride {n + 3}")

    bug = lambda n: k.Bug(k.softmax_kernel, n)  # noqa: E731
    return Implementation(
        "a @triton.jit kernel softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr)",
        _REFERENCE,
        [case("4 rows of 16 (one block exactly)", 3, 4, 16, 1.0),
         case("3 rows of 10: BLOCK = 16 overhangs each row", 7, 3, 10, 1.0),
         case("2 rows of 20, logits up to about 300", 9, 2, 20, 100.0)],
        (
            Mistake(bug(5), "row r starts at X + r * stride, not X + r * n_cols: the stride "
                            "is the distance between rows in memory, and a row may be "
                            "followed by padding (a slice of a wider tensor)."),
            Mistake(bug(1), "a load without a mask reads past the row: n_cols = 10 is not a "
                            "multiple of the block (BLOCK = 16), so the last 6 lanes read "
                            "whatever follows. Load with mask=cols < n_cols."),
            Mistake(bug(4), "a store without a mask writes past the row: the lanes past "
                            "n_cols overwrite what follows it. Store with mask=cols < n_cols."),
            Mistake(bug(2), "the masked lanes were filled with 0, and exp(0 - max) counts in "
                            "the sum: fill them with other=float('-inf')."),
            Mistake(bug(3), "exp overflows to inf for logits above about 88.7 in float32: "
                            "subtract the row's max before exp."),
        ))


@implementation("13.3")
def _triton_matmul() -> Implementation:
    """A @triton.jit tiled product: one program per tile of C, a loop over K."""
    k = _kernels()

    def case(name, seed, M, N, K, blocks):
        a = _randn(M, K, seed=seed, dtype=torch.float32).to(default_device())
        b = _randn(K, N, seed=seed + 1, dtype=torch.float32).to(default_device())

        def run(fn):
            if fn is _REFERENCE:
                return (a.double() @ b.double()).float()
            return k.run_matmul(fn, a, b, blocks)
        return Case(name, run, f"A ({M}, {K}), B ({K}, {N}), blocks {blocks}; row strides "
                               f"{K + 3}, {N + 5}, {N + 2}")

    bug = lambda n: k.Bug(k.matmul_kernel, n)  # noqa: E731
    return Implementation(
        "a @triton.jit kernel matmul_kernel(A, B, C, M, N, K, stride_a, stride_b, stride_c, "
        "BLOCK_M, BLOCK_N, BLOCK_K)", _REFERENCE,
        [case("32 x 32 times 32 x 32, blocks of 16", 1, 32, 32, 32, (16, 16, 16)),
         case("20 x 40 times 40 x 24: every side overhangs its block", 4, 20, 24, 40,
              (16, 16, 16)),
         case("the same with blocks 32 x 16 x 32", 4, 20, 24, 40, (32, 16, 32))],
        (
            Mistake(bug(2), "row r of A starts at A + r * stride_a, not A + r * K: the row "
                            "stride counts the padding after each row as well."),
            Mistake(bug(1), "the loads along K need a mask too: K = 40 is not a multiple of "
                            "BLOCK_K, so the last block of A's columns and of B's rows "
                            "overhangs; load them with mask=... & (ks < K) and other=0."),
            Mistake(bug(5), "a store without a mask writes past C's edges: C = 20 x 24 does "
                            "not fill its last tiles. Store with the row and column masks."),
            Mistake(bug(3), "the loop over K stops after one block: C = A B sums over all K "
                            "columns of A, BLOCK_K at a time."),
            Mistake(bug(4), "acc = tl.dot(a, b) keeps only the last block of K: add each "
                            "block's product, acc += tl.dot(a, b)."),
        ),
        outputs=("C",))


# ---------------------------------------------------------------------------------------
# 13.4 to 13.7: FlashAttention-2
# ---------------------------------------------------------------------------------------


def _heads(seed, heads, N, M, d, dtype, q_scale=1.0):
    """Q (heads, N, d) and K, V (heads, M, d) on the kernel's device, drawn in float64."""
    device = default_device()
    Q = _randn(heads, N, d, seed=seed, dtype=torch.float64, scale=q_scale)
    K = _randn(heads, M, d, seed=seed + 1, dtype=torch.float64)
    V = _randn(heads, M, d, seed=seed + 2, dtype=torch.float64)
    return tuple(x.to(dtype).to(device) for x in (Q, K, V))


def _heads_text(heads: int) -> str:
    return f"{heads} head{'s' * (heads != 1)}"


def _forward_reference(Q, K, V, scale, causal):
    """O in Q's dtype and L in float32, from the closed form in float64."""
    q, k, v = (x.double()[None] for x in (Q, K, V))
    O, _ = attention_forward(q, k, v, causal=causal, scale=scale)
    S = scale * q @ k.mT
    if causal:
        N, M = S.shape[-2:]
        S = S.masked_fill(~torch.ones(N, M, dtype=torch.bool, device=S.device).tril(M - N),
                          float("-inf"))
    return O[0].to(Q.dtype), torch.logsumexp(S, dim=-1)[0].float()


def _agrees(got, expected, names) -> bool:
    return all(differ(g, e, n) is None for g, e, n in zip(got, expected, names, strict=True))


def _forward_case(name, seed, *, heads=2, N, M, d, scale, causal, blocks,
                  dtype=torch.float32, q_scale=1.0) -> Case:
    k = _kernels()
    Q, K, V = _heads(seed, heads, N, M, d, dtype, q_scale)
    block_m, block_n = blocks

    def run(fn):
        expected = _forward_reference(Q, K, V, scale, causal)
        if fn is _REFERENCE:
            return expected
        O, L, watch = k.run_forward(fn, Q, K, V, scale=scale, causal=causal,
                                    block_m=block_m, block_n=block_n)
        if causal and watch is not None and _agrees((O, L), expected, ("O", "L")):
            where = k.unskipped_query_tiles(watch, N, M, block_m, block_n)
            if where:
                raise CheckFailedError(f"O and L are right, but {where}: a causal kernel stops "
                                   "its loop at the diagonal instead of masking the tiles "
                                   "beyond it")
        return O, L

    shapes = (f"{_heads_text(heads)}, Q ({N}, {d}), K and V ({M}, {d}), {str(dtype)[6:]}, "
              f"blocks {block_m} x {block_n}, scale {scale:g}")
    return Case(name, run, shapes)


def _forward_mistakes(k, numbers):
    hints = {
        1: "the accumulator must be rescaled when the running max grows: acc = acc * alpha "
           "+ P V, with alpha = exp(m_old - m_new).",
        2: "the running sum must be rescaled when the running max grows: l = alpha * l + "
           "rowsum(P), with alpha = exp(m_old - m_new).",
        3: "without the running max, exp overflows once the logits pass about 88.7 in "
           "float32: keep m, the largest score so far, and exponentiate s - m.",
        4: "L is the log-sum-exp of a row, m + log(l): the max alone forgets the sum, and "
           "the backward rebuilds P = exp(scale Q K^T - L) from it.",
        5: "row i of a head starts at i * stride_qn (or stride_kn), not i * d: the row "
           "stride counts the padding after each row.",
        6: "use the scale argument: the check's scale is not 1/sqrt(d) (a model may fold "
           "another factor into it, MLA's 1/sqrt(d + d_R) for one).",
        7: "tl.dot wants both tiles in one dtype: cast P to V's dtype before the second "
           "product, tl.dot(p.to(v.dtype), v); the product still accumulates in float32.",
        8: "a store without a mask writes past O's last row: the last query tile "
           "overhangs N. Store with the row and column masks.",
        9: "with a cache the queries are the last N of M positions: query i sees keys "
           "j <= i + (M - N), in the mask and in the loop's stop (bottom-right aligned).",
        10: "the loop visits key tiles wholly in the future of every query of the tile: "
            "stop it at min(M, (start_m + 1) * BLOCK_M + M - N) instead of masking them.",
        11: "skipping the tiles beyond the diagonal is not enough: the tiles that cross it "
            "still need the mask keys <= rows + (M - N).",
        12: "a query sees its own key: keep keys <= rows + (M - N); < hides the diagonal.",
        13: "the kernel ignores CAUSAL: with CAUSAL true, query i sees only keys j <= i + "
            "(M - N), and the tiles wholly beyond that are skipped.",
    }
    return tuple(Mistake(k.Bug(k.forward_kernel, n), hints[n]) for n in numbers)


_FORWARD_WHAT = ("a @triton.jit kernel forward_kernel(Q, K, V, O, L, stride_qh, stride_qn, "
                 "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)")


@implementation("13.4")
def _flash_forward() -> Implementation:
    """FlashAttention-2's forward, without the causal mask."""
    k = _kernels()
    cases = [
        _forward_case("N = M = 32, d = 16, blocks of 16", 1, N=32, M=32, d=16,
                      scale=0.25, causal=False, blocks=(16, 16)),
        _forward_case("40 queries, 57 keys, d = 12: nothing a multiple of its block", 4,
                      N=40, M=57, d=12, scale=0.3, causal=False, blocks=(16, 32)),
        _forward_case("float16 tiles, blocks 32 x 16", 7, N=24, M=40, d=16, scale=0.5,
                      causal=False, blocks=(32, 16), dtype=torch.float16),
        _forward_case("logits past 100: the running max", 10, heads=1, N=16, M=20,
                      d=16, scale=1.0, causal=False, blocks=(16, 16), q_scale=10.0),
    ]
    return Implementation(_FORWARD_WHAT, _REFERENCE, cases,
                          _forward_mistakes(k, (5, 6, 7, 8, 4, 1, 2, 3)), outputs=("O", "L"))


@implementation("13.5")
def _flash_causal() -> Implementation:
    """The same forward kernel with CAUSAL: skipped tiles, bottom-right alignment."""
    k = _kernels()
    cases = [
        _forward_case("causal, N = M = 40, blocks of 16", 2, N=40, M=40, d=16, scale=0.25,
                      causal=True, blocks=(16, 16)),
        _forward_case("causal, 19 new queries over 57 keys (a cached step), blocks 16 x 32",
                      5, N=19, M=57, d=16, scale=0.3, causal=True, blocks=(16, 32)),
        _forward_case("causal, 40 queries over 57 keys, blocks 32 x 16", 8, N=40, M=57,
                      d=12, scale=0.3, causal=True, blocks=(32, 16)),
        _forward_case("CAUSAL=False still works, logits past 100", 10, heads=1, N=16, M=20,
                      d=16, scale=1.0, causal=False, blocks=(16, 16), q_scale=10.0),
    ]
    return Implementation(_FORWARD_WHAT, _REFERENCE, cases,
                          _forward_mistakes(k, (13, 9, 11, 12, 10, 5, 6, 8, 4, 1, 2, 3)),
                          outputs=("O", "L"))


def _backward_inputs(seed, heads, N, M, d, scale, causal):
    Q, K, V = _heads(seed, heads, N, M, d, torch.float32)
    dO = _randn(heads, N, d, seed=seed + 3, dtype=torch.float32).to(Q.device)
    O, L = _forward_reference(Q, K, V, scale, causal)
    D = (dO.double() * O.double()).sum(-1).float()
    grads = attention_backward(*(x.double()[None] for x in (Q, K, V, O, dO)), causal=causal,
                               scale=scale)
    return (Q, K, V, dO, L, D), tuple(g[0].float() for g in grads)


def _backward_case(name, seed, which, *, heads=2, N, M, d, scale, causal, blocks) -> Case:
    k = _kernels()
    inputs, (dQ, dK, dV) = _backward_inputs(seed, heads, N, M, d, scale, causal)
    block_m, block_n = blocks
    args = dict(scale=scale, causal=causal, block_m=block_m, block_n=block_n)

    def run(fn):
        expected = (dK, dV) if which == "dkdv" else (dQ,)
        if fn is _REFERENCE:
            return expected
        if which == "dkdv":
            *got, watch = k.run_dkdv(fn, *inputs, **args)
            names = ("dK", "dV")
            where = watch and k.unskipped_key_tiles(watch, N, M, block_m, block_n)
        else:
            *got, watch = k.run_dq(fn, *inputs, **args)
            names = ("dQ",)
            where = watch and k.unskipped_query_tiles(watch, N, M, block_m, block_n)
        if causal and where and _agrees(got, expected, names):
            raise CheckFailedError(f"{' and '.join(names)} are right, but {where}: a causal "
                               "kernel's loop leaves out the tiles the mask would empty")
        return tuple(got)

    shapes = (f"{_heads_text(heads)}, Q ({N}, {d}), K and V ({M}, {d}), blocks {block_m} x "
              f"{block_n}, scale {scale:g}, causal={causal}")
    return Case(name, run, shapes)


def _backward_cases(which):
    return [
        _backward_case("40 queries, 57 keys, blocks 16 x 32", 3, which, N=40, M=57, d=16,
                       scale=0.25, causal=False, blocks=(16, 32)),
        _backward_case("causal, 40 queries over 57 keys, blocks 32 x 16, d = 12", 6, which,
                       N=40, M=57, d=12, scale=0.3, causal=True, blocks=(32, 16)),
        _backward_case("causal, N = M = 64, blocks of 16: tiles to skip", 9, which, heads=1,
                       N=64, M=64, d=16, scale=0.2, causal=True, blocks=(16, 16)),
    ]


_BACKWARD_HINTS = {
    "without D": "dS = P * (dP - D): without the row term D = rowsum(dO * O) the rows of dS "
                 "no longer sum to zero.",
    "rebuild": "the scale is missing when P is rebuilt: L is the log-sum-exp of the scaled "
               "scores, so P = exp(scale * Q K^T - L).",
    "causal": "the backward needs the causal mask too: a hidden score has P = 0 and gets no "
              "gradient, keys <= rows + (M - N).",
    "ignored": "the kernel ignores CAUSAL: with CAUSAL true, a hidden score has P = 0 and "
               "gets no gradient (keys <= rows + (M - N)), and the tiles it empties are "
               "skipped.",
    "store": "a store without a mask writes past the tensor's last row: the last tile "
             "overhangs it. Store with the row and column masks.",
}


@implementation("13.6")
def _flash_dkdv() -> Implementation:
    """The backward's dK and dV: one program per key tile, P rebuilt from L."""
    k = _kernels()
    hints = {1: _BACKWARD_HINTS["without D"], 2: _BACKWARD_HINTS["rebuild"],
             3: "dK = scale dS^T Q: the chain rule through S = scale Q K^T brings one factor "
                "scale.",
             4: _BACKWARD_HINTS["causal"],
             5: "a causal key tile is seen only by the queries at or after it: start the "
                "loop at the query tile of max(0, start_n * BLOCK_N - (M - N)).",
             6: "dV = P^T dO: a key collects from every query that read it, so P is "
                "transposed (tl.trans(p)).",
             7: _BACKWARD_HINTS["store"], 8: _BACKWARD_HINTS["ignored"]}
    return Implementation(
        "a @triton.jit kernel dkdv_kernel(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, "
        "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)",
        _REFERENCE, _backward_cases("dkdv"),
        tuple(Mistake(k.Bug(k.dkdv_kernel, n), hints[n]) for n in (7, 6, 8, 4, 5, 2, 1, 3)),
        outputs=("dK", "dV"))


@implementation("13.7")
def _flash_dq() -> Implementation:
    """The backward's dQ: one program per query tile, walking the key tiles."""
    k = _kernels()
    hints = {1: _BACKWARD_HINTS["without D"], 2: _BACKWARD_HINTS["rebuild"],
             3: "dQ = scale dS K: the chain rule through S = scale Q K^T brings one factor "
                "scale.",
             4: _BACKWARD_HINTS["causal"],
             5: "the causal stop counts query rows: (start_m + 1) * BLOCK_M + (M - N), not "
                "BLOCK_N; with BLOCK_N < BLOCK_M the last keys a tile sees are cut off.",
             6: "the loop visits key tiles wholly in the future of every query of the tile: "
                "stop it at the diagonal, as the forward does.",
             7: _BACKWARD_HINTS["store"], 8: _BACKWARD_HINTS["ignored"]}
    return Implementation(
        "a @triton.jit kernel dq_kernel(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, "
        "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)",
        _REFERENCE, _backward_cases("dq"),
        tuple(Mistake(k.Bug(k.dq_kernel, n), hints[n]) for n in (7, 8, 4, 5, 6, 2, 1, 3)),
        outputs=("dQ",))

