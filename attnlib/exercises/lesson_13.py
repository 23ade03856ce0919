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

The cases vary what a kernel reads: blocks unequal both ways (``BLOCK_M``, ``BLOCK_N`` and
``BLOCK_K`` all different in the product; ``BLOCK_N`` above and below ``BLOCK_M`` in the
causal kernels), sizes that are and are not multiples of their blocks, float16 tiles in
every attention kernel (a product of a float32 and a float16 tile is refused by
``tl.dot``), rows whose scores all lie near -300, and scales that are not ``1/sqrt(d)``. In
the interpreter three more things are checked that it would otherwise hide
(:func:`attnlib.exercises.triton_checks.launch`): a float32 ``tl.dot`` left at TF32 computes
as a GPU's would; one case of each attention kernel raises the head index so that
``h * stride_qh`` passes ``2**31``; and the rows each program's loads address, masked or
not, show a causal kernel that visits the tiles it could skip. A catalogued mistake is the
solution kernel with an edit of its source (:func:`attnlib.exercises.lesson_13_kernels.patched`).

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


def _interpreting() -> bool:
    """Whether the kernels run in Triton's interpreter (imports triton)."""
    from attnlib.kernels.triton_flash import interpreting

    return interpreting()


class _Reference:
    """Marks the expected answer in a case's ``run``: computed by PyTorch, not launched."""

    def __repr__(self) -> str:
        return "the PyTorch reference"


_REFERENCE = _Reference()

_OUTCOMES: dict[tuple, tuple[bool, object]] = {}


def _case(key: tuple, name: str, run, shapes: str) -> Case:
    """A case whose outcome for a catalogued kernel is computed once per process (the
    catalogue's kernels are built once, and a case is the same seeded inputs every time):
    the check of a wrong answer compares it with every mistake, each a run of the
    interpreter."""

    def remembered(fn):
        if not _kernels().is_patched(fn):
            return run(fn)
        at = (*key, name, shapes, str(default_device()), id(fn))
        if at not in _OUTCOMES:
            try:
                _OUTCOMES[at] = (True, run(fn))
            except Exception as exc:  # a mistake that raises raises the same every time
                _OUTCOMES[at] = (False, exc)
        ok, value = _OUTCOMES[at]
        if ok:
            return value
        raise value.with_traceback(None)

    return Case(name, remembered, shapes)


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
# The catalogues: each mistake an edit of the solution kernel's source, and its hint
# ---------------------------------------------------------------------------------------

_IEEE = ', input_precision="ieee"'


def _mistakes(kernel, catalogue, base=()) -> tuple[Mistake, ...]:
    """The catalogue's kernels: ``base``, then each entry's edits, applied to ``kernel``'s
    source. An entry whose fourth field is true shows only to the interpreter's watch (its
    outputs are right), and is left out of a compiled run's catalogue."""
    k = _kernels()
    interpreted = _interpreting()
    return tuple(Mistake(k.patched(kernel, (*base, *entry[1]), entry[0]), entry[2])
                 for entry in catalogue if interpreted or not entry[3:4] == (True,))


_LESSONS_FORWARD = (  # attnlib's forward without its lines for a row that sees no key
    ('        m_exp = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no '
     'key\n', ""),
    ("m_exp", "m_new"),
    ("    l_out = tl.where(l == 0.0, 1.0, l)  # a row that saw no key writes zeros\n", ""),
    ("l_out", "l"),
)
"""The edits that make attnlib's forward kernel the lesson's solution, the kernel a reader
writes: the catalogue's forward mistakes start from it, so that a mistake that empties a row
(a running max from 0, a hidden diagonal) gives the NaN a reader's kernel gives."""


_SOFTMAX = (
    ("row length as the stride", (("row * stride", "row * n_cols"),),
     "row r starts at X + r * stride, not X + r * n_cols: the stride is the distance between "
     "rows in memory, and a row may be followed by padding (a slice of a wider tensor)."),
    ("unmasked load", ((', mask=inside, other=float("-inf"))', ")"),),
     "a load without a mask reads past the row: n_cols = 10 is not a multiple of the block "
     "(BLOCK = 16), so the last 6 lanes read whatever follows. Load with mask=cols < n_cols."),
    ("unmasked store", (("z / tl.sum(z, axis=0), mask=inside)", "z / tl.sum(z, axis=0))"),),
     "a store without a mask writes past the row: the lanes past n_cols overwrite what "
     "follows it. Store with mask=cols < n_cols."),
    ("padding read as 0", (('other=float("-inf")', "other=0.0"),),
     "the masked lanes were filled with 0, and exp(0 - max) counts in the sum: fill them "
     "with other=float('-inf')."),
    ("no max subtracted", (("tl.exp(x - tl.max(x, axis=0))", "tl.exp(x)"),),
     "exp overflows to inf for logits above about 88.7 in float32: subtract the row's max "
     "before exp."),
)

_MATMUL = (
    ("A's row stride as K", (("rows[:, None] * stride_a", "rows[:, None] * K"),),
     "row r of A starts at A + r * stride_a, not A + r * K: the row stride counts the "
     "padding after each row as well."),
    ("B's row stride as N", (("ks[:, None] * stride_b", "ks[:, None] * N"),),
     "row k of B starts at B + k * stride_b, not B + k * N: the row stride counts the "
     "padding after each row as well."),
    ("no mask along K", (
        ("mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)", "mask=rows[:, None] < M)"),
        ("mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)", "mask=cols[None, :] < N)")),
     "the loads of A and B reach past the inner dimension: K is not a multiple of BLOCK_K, "
     "so the last block of A's columns and of B's rows overhangs, and every lane with "
     "ks >= K must be masked off (ks < K, with other=0.0)."),
    ("one block of K", (("range(0, K, BLOCK_K)", "range(0, BLOCK_K, BLOCK_K)"),),
     "the loop over K stops after one block: C = A B sums over all K columns of A, BLOCK_K "
     "at a time."),
    ("accumulator overwritten", (("acc += tl.dot(", "acc = tl.dot("),),
     "acc = tl.dot(a, b) keeps only the last block of K: add each block's product, "
     "acc += tl.dot(a, b)."),
    ("inner block BLOCK_M wide", (("ks = k0 + tl.arange(0, BLOCK_K)",
                                   "ks = k0 + tl.arange(0, BLOCK_M)"),),
     "the inner block is BLOCK_K wide, the loop's step: ks = k0 + tl.arange(0, BLOCK_K); "
     "with BLOCK_M in its place the blocks of K overlap or leave gaps, since the check's "
     "BLOCK_M and BLOCK_K differ."),
    ("store masked on rows only", (("mask=(rows[:, None] < M) & (cols[None, :] < N))",
                                    "mask=rows[:, None] < M)"),),
     "the store's mask turns off the rows past M but not the columns past N: where N is not "
     "a multiple of BLOCK_N the last tile writes past C's right edge. Store with "
     "mask=(rows < M) & (cols < N)."),
    ("unmasked store", (("acc,\n             mask=(rows[:, None] < M) & (cols[None, :] < N))",
                         "acc)"),),
     "the store has no mask, and writes past C's edges where M or N is not a multiple of its "
     "block. Store with mask=(rows < M) & (cols < N)."),
)

_CAUSAL = (  # 13.5 alone: (name, edits, hint)
    ("CAUSAL ignored", (("if CAUSAL:", "if False:"),),
     "the kernel ignores CAUSAL: with CAUSAL true, query i sees only keys j <= i + (M - N), "
     "and the tiles wholly beyond that are skipped."),
    ("aligned top-left", (("(start_m + 1) * BLOCK_M + M - N)", "(start_m + 1) * BLOCK_M)"),
                          ("rows[:, None] + M - N)", "rows[:, None])")),
     "with a cache the queries are the last N of M positions: query i sees keys "
     "j <= i + (M - N), in the mask and in the loop's stop (bottom-right aligned)."),
    ("skipped but not masked", (("keep = keep & (keys[None, :] <= rows[:, None] + M - N)",
                                 "keep = keep"),),
     "skipping the tiles beyond the diagonal is not enough: the tiles that cross it still "
     "need the mask keys <= rows + (M - N)."),
    ("diagonal hidden", (("keys[None, :] <= rows[:, None] + M - N",
                          "keys[None, :] < rows[:, None] + M - N"),),
     "a query sees its own key: keep keys <= rows + (M - N); < hides the diagonal."),
    ("stop counted in BLOCK_N", (("(start_m + 1) * BLOCK_M + M - N)",
                                  "(start_m + 1) * BLOCK_N + M - N)"),),
     "the causal stop counts query rows: min(M, (start_m + 1) * BLOCK_M + M - N). Counted "
     "in BLOCK_N it cuts off keys a tile's queries see when BLOCK_N < BLOCK_M, and visits "
     "tiles beyond the diagonal when BLOCK_N > BLOCK_M."),
)

_FORWARD = (  # 13.4 and 13.5
    ("d as the row stride", (("rows[:, None] * stride_qn", "rows[:, None] * d"),
                             ("keys[:, None] * stride_kn", "keys[:, None] * d")),
     "row i of a head starts at i * stride_qn (or stride_kn), not i * d: the row stride "
     "counts the padding after each row."),
    ("scale ignored", (("s = scale * tl.dot(", "s = (1.0 / tl.sqrt(d.to(tl.float32))) * tl.dot("),),
     "use the scale argument: the check's scale is not 1/sqrt(d) (a model may fold another "
     "factor into it, MLA's 1/sqrt(d + d_R) for one)."),
    ("P not cast", (("tl.dot(p.to(v.dtype), v,", "tl.dot(p, v,"),),
     "tl.dot wants both tiles in one dtype, and the float16 case hands it a float32 tile "
     "and a float16 one: keep the sums in float32, and cast the float32 tile to the other's "
     "dtype for the product, tl.dot(p.to(v.dtype), v)."),
    ("unmasked store of O", (("(acc / l[:, None]).to(O.dtype.element_ty), mask=q_mask)",
                              "(acc / l[:, None]).to(O.dtype.element_ty))"),),
     "the store of O has no mask, and writes past O's last row where N is not a multiple of "
     "BLOCK_M, and past its d columns where d < BLOCK_D. Store with "
     "mask=(rows < N) & (dims < d)."),
    ("L the max alone", (("m + tl.log(l), mask=rows < N)", "m, mask=rows < N)"),),
     "L is the log-sum-exp of a row, m + log(l): the max alone forgets the sum, and the "
     "backward rebuilds P = exp(scale Q K^T - L) from it."),
    ("accumulator not rescaled", (("acc = alpha[:, None] * acc + tl.dot(",
                                   "acc = acc + tl.dot("),),
     "the accumulator must be rescaled when the running max grows: acc = acc * alpha "
     "+ P V, with alpha = exp(m_old - m_new)."),
    ("sum not rescaled", (("l = alpha * l + tl.sum(p, 1)", "l = l + tl.sum(p, 1)"),),
     "the running sum must be rescaled when the running max grows: l = alpha * l + "
     "rowsum(P), with alpha = exp(m_old - m_new)."),
    ("no running max", (("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s)"),
                        ("alpha = tl.exp(m - m_new)",
                         "alpha = tl.full([BLOCK_M], 1.0, tl.float32)"),
                        ("m + tl.log(l), mask=rows < N)", "tl.log(l), mask=rows < N)")),
     "without the running max, exp overflows once the scores pass about 88.7 in float32: "
     "keep m, the largest score so far, and exponentiate s - m."),
    ("running max from 0", (('m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
                             "m = tl.zeros([BLOCK_M], dtype=tl.float32)"),),
     "the running max starts at -inf, not 0: a row whose scores all lie far below zero "
     "(the check's reach -300) then takes exp(s - 0), which is 0 for every key, and "
     "divides 0 by 0."),
)

def _backward_catalogue(which: str):
    dkdv = which == "dkdv"
    grad = "dK" if dkdv else "dQ"
    scaled = ("dk += scale * tl.dot(", "dk += tl.dot(") if dkdv else \
        ("dq += scale * tl.dot(", "dq += tl.dot(")
    store = (("dk.to(dK.dtype.element_ty), mask=kv_mask)", "dk.to(dK.dtype.element_ty))"),
             ("dv.to(dV.dtype.element_ty), mask=kv_mask)", "dv.to(dV.dtype.element_ty))")) \
        if dkdv else (("dq.to(dQ.dtype.element_ty), mask=q_mask)",
                       "dq.to(dQ.dtype.element_ty))"),)
    casts = (("tl.trans(p.to(do.dtype))", "tl.trans(p)"),
             ("tl.trans(ds.to(q.dtype))", "tl.trans(ds)")) if dkdv else \
        (("ds.to(k.dtype)", "ds"),)
    top_left = (("tl.program_id(0) * BLOCK_N - (M - N))", "tl.program_id(0) * BLOCK_N)"),
                ("rows[:, None] + M - N)", "rows[:, None])")) if dkdv else \
        (("(start_m + 1) * BLOCK_M + M - N)", "(start_m + 1) * BLOCK_M)"),
         ("rows[:, None] + M - N)", "rows[:, None])"))
    out = [
        ("unmasked store", store,
         f"the store of {grad} has no mask, and writes past the tensor's last row where the "
         f"last tile overhangs it, and past its d columns where d < BLOCK_D. Store with the "
         f"row and column masks."),
        ("CAUSAL ignored", (("if CAUSAL:", "if False:"),),
         "the kernel ignores CAUSAL: with CAUSAL true, a hidden score has P = 0 and gets no "
         "gradient (keys <= rows + (M - N)), and the tiles it empties are skipped."),
        ("causal mask missing", (("keep = keep & (keys[None, :] <= rows[:, None] + M - N)",
                                  "keep = keep"),),
         "the backward needs the causal mask too: a hidden score has P = 0 and gets no "
         "gradient, keys <= rows + (M - N)."),
        ("aligned top-left", top_left,
         "with a cache the queries are the last N of M positions: query i sees keys "
         "j <= i + (M - N), in the mask and in where the loop starts or stops "
         "(bottom-right aligned), as in the forward."),
        ("casts missing", casts,
         "tl.dot wants both tiles in one dtype, and the float16 case hands it a float32 tile "
         "and a float16 one: keep P and dS in float32 for the arithmetic, and cast the float32 "
         "tile to the other's dtype for each product."),
        ("rebuilt without the scale", (("s = scale * tl.dot(q, tl.trans(k)",
                                        "s = tl.dot(q, tl.trans(k)"),),
         "the scale is missing when P is rebuilt: L is the log-sum-exp of the scaled scores, "
         "so P = exp(scale * Q K^T - L)."),
        ("without D", ((" - delta[:, None])", ")"),),
         "dS = P * (dP - D): without the row term D = rowsum(dO * O) the rows of dS no longer "
         "sum to zero."),
        (f"{grad} without its scale", (scaled,),
         f"{'dK = scale dS^T Q' if dkdv else 'dQ = scale dS K'}: the chain rule through "
         "S = scale Q K^T brings one factor scale."),
    ]
    if dkdv:
        out += [
            ("P not transposed", (("tl.dot(tl.trans(p.to(do.dtype)), do,",
                                   "tl.dot(p.to(do.dtype), do,"),),
             "dV = P^T dO: a key collects from every query that read it, so P is transposed "
             "(tl.trans(p))."),
            ("dS not transposed", (("tl.dot(tl.trans(ds.to(q.dtype)), q,",
                                    "tl.dot(ds.to(q.dtype), q,"),),
             "dK = scale dS^T Q: a key collects from every query, so dS is transposed "
             "(tl.trans(ds))."),
            ("first tile counted in BLOCK_N", (("// BLOCK_M * BLOCK_M", "// BLOCK_N * BLOCK_N"),),
             "the first query tile is a multiple of BLOCK_M, the query tiles' height: "
             "max(0, n0 - (M - N)) // BLOCK_M * BLOCK_M, n0 = pid * BLOCK_N the key tile's first "
             "row. Rounded down to a "
             "multiple of BLOCK_N it starts early when BLOCK_N > BLOCK_M, at tiles none of "
             "whose queries sees these keys.", True),
        ]
    else:
        out += [
            ("stop counted in BLOCK_N", (("(start_m + 1) * BLOCK_M + M - N)",
                                          "(start_m + 1) * BLOCK_N + M - N)"),),
             "the causal stop counts query rows: min(M, (start_m + 1) * BLOCK_M + M - N), as "
             "in the forward. Counted in BLOCK_N it cuts off keys a tile's queries see when "
             "BLOCK_N < BLOCK_M, and visits tiles beyond the diagonal when BLOCK_N > "
             "BLOCK_M."),
        ]
    return out


# ---------------------------------------------------------------------------------------
# 13.2 and 13.3: a row softmax, a tiled product
# ---------------------------------------------------------------------------------------


def _agrees(got, expected, names) -> bool:
    return all(differ(g, e, n) is None for g, e, n in zip(got, expected, names, strict=True))


_TF32 = ("the outputs are right when tl.dot multiplies the float32 tiles exactly, and off by "
         "more than the tolerance when it rounds them to TF32 (10 bits of mantissa), as a GPU "
         "does at Triton's default precision and as this check does in the interpreter: ask "
         "for float32 products, tl.dot(a, b, input_precision=\"ieee\")")


def _checked_launch(launch, expected, names, *, far_heads=False):
    """``launch(**options)`` returns ``(*outputs, watch)``; run it, and name the two things
    the interpreter alone would hide: an int32 head offset (``far_heads``: the launch with
    the head index past ``2**31 / stride_h`` fails where the same launch from head 0 does
    not) and a float32 ``tl.dot`` left at TF32 (the outputs wrong as a GPU computes them,
    right without the rounding)."""
    far = far_heads and _interpreting()
    try:
        *got, watch = launch(far_heads=far)
    except CheckFailedError:
        if not far:
            raise
        launch()  # the same error without the far heads is the reader's, and shown as such
        raise CheckFailedError(
            "the kernel's loads or stores go outside every tensor once the head index is "
            "large, and not from head 0: this case raises each program's head index "
            "(tl.program_id(1)) past 2**31 / stride_qh, lowering each tensor's pointer to "
            "match, so that the head offsets pass 2**31 as they do at real sizes (1,024 "
            "heads of 32,768 rows of 128 numbers), and an offset computed in int32 wraps "
            "around. Compute h = tl.program_id(1).to(tl.int64)") from None
    if watch is not None and watch.tf32_dots and not _agrees(got, expected, names):
        *exact, _ = launch(far_heads=far, tf32=False)
        if _agrees(exact, expected, names):
            raise CheckFailedError(_TF32)
    return tuple(got), watch


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
        return _case(("softmax", seed), name, run, f"X {tuple(x.shape)}, row stride {n + 3}")

    return Implementation(
        "a @triton.jit kernel softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr)",
        _REFERENCE,
        [case("4 rows of 16 (one block exactly)", 3, 4, 16, 1.0),
         case("3 rows of 10: BLOCK = 16 overhangs each row", 7, 3, 10, 1.0),
         case("2 rows of 20, logits up to about 300", 9, 2, 20, 100.0)],
        _mistakes(k.softmax_kernel, _SOFTMAX))


@implementation("13.3")
def _triton_matmul() -> Implementation:
    """A @triton.jit tiled product: one program per tile of C, a loop over K."""
    k = _kernels()

    def case(name, seed, M, N, K, blocks):
        a = _randn(M, K, seed=seed, dtype=torch.float32).to(default_device())
        b = _randn(K, N, seed=seed + 1, dtype=torch.float32).to(default_device())

        def run(fn):
            expected = (a.double() @ b.double()).float()
            if fn is _REFERENCE:
                return expected
            (C,), _ = _checked_launch(lambda far_heads=False, tf32=True: k.run_matmul(
                fn, a, b, blocks, tf32=tf32), (expected,), ("C",))
            return C
        return _case(("matmul", seed), name, run,
                     f"A ({M}, {K}), B ({K}, {N}), blocks {' x '.join(map(str, blocks))} "
                     f"(BLOCK_M x BLOCK_N x BLOCK_K); row strides {K + 3}, {N + 5}, {N + 2}")

    return Implementation(
        "a @triton.jit kernel matmul_kernel(A, B, C, M, N, K, stride_a, stride_b, stride_c, "
        "BLOCK_M, BLOCK_N, BLOCK_K)", _REFERENCE,
        [case("40 x 70 times 70 x 50, blocks 16 x 32 x 64: every side overhangs", 1,
              40, 50, 70, (16, 32, 64)),
         case("64 x 72 times 72 x 40, blocks 64 x 16 x 32: M fills its blocks, N and K do not",
              4, 64, 40, 72, (64, 16, 32)),
         case("40 x 40 times 40 x 64, blocks 32 x 16 x 64: N fills its blocks, M and K do not",
              7, 40, 64, 40, (32, 16, 64))],
        _mistakes(k.matmul_kernel, _MATMUL),
        outputs=("C",))


# ---------------------------------------------------------------------------------------
# 13.4 to 13.7: FlashAttention-2
# ---------------------------------------------------------------------------------------


def _heads(seed, heads, N, M, d, dtype, q_scale=1.0, far_below=False):
    """Q (heads, N, d) and K, V (heads, M, d) on the kernel's device, drawn in float64.

    ``far_below``: every key gets 20 more in its first coordinate and every odd query row
    -60 there, so that those rows' scaled scores all lie near -1200 * scale.
    """
    device = default_device()
    Q = _randn(heads, N, d, seed=seed, dtype=torch.float64, scale=q_scale)
    K = _randn(heads, M, d, seed=seed + 1, dtype=torch.float64)
    V = _randn(heads, M, d, seed=seed + 2, dtype=torch.float64)
    if far_below:
        K[..., 0] += 20.0
        Q[:, 1::2, 0] = -60.0
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
    return O[0], torch.logsumexp(S, dim=-1)[0]


def _forward_case(name, seed, *, heads=2, N, M, d, scale, causal, blocks,
                  dtype=torch.float32, q_scale=1.0, far_below=False, far_heads=False) -> Case:
    k = _kernels()
    Q, K, V = _heads(seed, heads, N, M, d, dtype, q_scale, far_below)
    block_m, block_n = blocks
    O64, L64 = _forward_reference(Q, K, V, scale, causal)
    expected = (O64.to(dtype), L64.float())

    def run(fn):
        if fn is _REFERENCE:
            return expected
        (O, L), watch = _checked_launch(
            lambda **kw: k.run_forward(fn, Q, K, V, scale=scale, causal=causal,
                                       block_m=block_m, block_n=block_n, **kw),
            expected, ("O", "L"), far_heads=far_heads)
        if causal and watch is not None and _agrees((O, L), expected, ("O", "L")):
            where = k.unskipped_query_tiles(watch, N, M, block_m, block_n)
            if where:
                raise CheckFailedError(f"O and L are right, but {where}: a causal kernel stops "
                                       "its loop at the diagonal instead of visiting the tiles "
                                       "beyond it, with its loads masked or not")
        return O, L

    shapes = (f"{_heads_text(heads)}, Q ({N}, {d}), K and V ({M}, {d}), {str(dtype)[6:]}, "
              f"blocks {block_m} x {block_n} (BLOCK_M x BLOCK_N), scale {scale:g}, "
              f"CAUSAL={causal}")
    return _case(("forward", seed), name, run, shapes)


_FORWARD_WHAT = ("a @triton.jit kernel forward_kernel(Q, K, V, O, L, stride_qh, stride_qn, "
                 "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)")


@implementation("13.4")
def _flash_forward() -> Implementation:
    """FlashAttention-2's forward, without the causal mask."""
    k = _kernels()
    cases = [
        _forward_case("N = 32 queries, M = 48 keys, d = 16, blocks 16 x 32", 1, N=32, M=48,
                      d=16, scale=0.25, causal=False, blocks=(16, 32)),
        _forward_case("40 queries, 57 keys, d = 12: nothing a multiple of its block", 4,
                      N=40, M=57, d=12, scale=0.3, causal=False, blocks=(32, 16)),
        _forward_case("float16 tiles, blocks 32 x 16", 7, N=24, M=40, d=16, scale=0.5,
                      causal=False, blocks=(32, 16), dtype=torch.float16),
        _forward_case("scores past 100 in later key tiles: the running max", 10, heads=1,
                      N=16, M=40, d=16, scale=1.0, causal=False, blocks=(16, 16),
                      q_scale=10.0),
        _forward_case("odd rows' scores all near -300", 13, N=24, M=40, d=16, scale=0.25,
                      causal=False, blocks=(16, 32), far_below=True),
        _forward_case("head offsets past 2**31 (emulated in the interpreter)", 16, N=20,
                      M=24, d=16, scale=0.25, causal=False, blocks=(16, 32), far_heads=True),
    ]
    return Implementation(_FORWARD_WHAT, _REFERENCE, cases,
                          _mistakes(k.forward_kernel, _FORWARD, _LESSONS_FORWARD),
                          outputs=("O", "L"))


@implementation("13.5")
def _flash_causal() -> Implementation:
    """The same forward kernel with CAUSAL: skipped tiles, bottom-right alignment."""
    k = _kernels()
    cases = [
        _forward_case("causal, N = M = 48, blocks 16 x 32", 2, N=48, M=48, d=16, scale=0.25,
                      causal=True, blocks=(16, 32)),
        _forward_case("causal, 19 new queries over 57 keys (a cached step), blocks 16 x 32",
                      5, N=19, M=57, d=16, scale=0.3, causal=True, blocks=(16, 32)),
        _forward_case("causal, 40 queries over 57 keys, d = 12, blocks 32 x 16", 8, N=40,
                      M=57, d=12, scale=0.3, causal=True, blocks=(32, 16)),
        _forward_case("causal, N = M = 64, blocks of 16: tiles to skip", 11, heads=1, N=64,
                      M=64, d=16, scale=0.2, causal=True, blocks=(16, 16)),
        _forward_case("causal, float16 tiles, 24 queries over 40 keys, blocks 16 x 32", 14,
                      N=24, M=40, d=16, scale=0.5, causal=True, blocks=(16, 32),
                      dtype=torch.float16),
        _forward_case("causal, odd rows' scores all near -300, blocks 32 x 16", 17, N=24,
                      M=40, d=16, scale=0.25, causal=True, blocks=(32, 16), far_below=True),
        _forward_case("CAUSAL=False still works, scores past 100", 10, heads=1, N=16, M=40,
                      d=16, scale=1.0, causal=False, blocks=(16, 16), q_scale=10.0),
        _forward_case("causal, head offsets past 2**31 (emulated in the interpreter)", 20,
                      N=20, M=24, d=16, scale=0.25, causal=True, blocks=(16, 16),
                      far_heads=True),
    ]
    return Implementation(_FORWARD_WHAT, _REFERENCE, cases,
                          _mistakes(k.forward_kernel, _CAUSAL + _FORWARD, _LESSONS_FORWARD),
                          outputs=("O", "L"))


def _backward_inputs(seed, heads, N, M, d, scale, causal, dtype):
    Q, K, V = _heads(seed, heads, N, M, d, dtype)
    dO = _randn(heads, N, d, seed=seed + 3, dtype=torch.float64).to(dtype).to(Q.device)
    O, L = _forward_reference(Q, K, V, scale, causal)
    D = (dO.double() * O).sum(-1)
    grads = attention_backward(*(x.double()[None] for x in (Q, K, V)), O[None],
                               dO.double()[None], causal=causal, scale=scale)
    return (Q, K, V, dO, L.float(), D.float()), tuple(g[0].to(dtype) for g in grads)


def _backward_case(name, seed, which, *, heads=2, N, M, d, scale, causal, blocks,
                   dtype=torch.float32, far_heads=False) -> Case:
    k = _kernels()
    inputs, (dQ, dK, dV) = _backward_inputs(seed, heads, N, M, d, scale, causal, dtype)
    block_m, block_n = blocks
    args = dict(scale=scale, causal=causal, block_m=block_m, block_n=block_n)
    expected = (dK, dV) if which == "dkdv" else (dQ,)
    names = ("dK", "dV") if which == "dkdv" else ("dQ",)
    runner = k.run_dkdv if which == "dkdv" else k.run_dq

    def run(fn):
        if fn is _REFERENCE:
            return expected
        got, watch = _checked_launch(lambda **kw: runner(fn, *inputs, **args, **kw),
                                     expected, names, far_heads=far_heads)
        if causal and watch is not None and _agrees(got, expected, names):
            where = k.unskipped_key_tiles(watch, N, M, block_m, block_n) if which == "dkdv" \
                else k.unskipped_query_tiles(watch, N, M, block_m, block_n)
            if where:
                raise CheckFailedError(f"{' and '.join(names)} are right, but {where}: a "
                                       "causal kernel's loop leaves out the tiles the mask "
                                       "would empty, rather than visiting them with its "
                                       "loads masked or not")
        return got

    shapes = (f"{_heads_text(heads)}, Q ({N}, {d}), K and V ({M}, {d}), {str(dtype)[6:]}, "
              f"blocks {block_m} x {block_n} (BLOCK_M x BLOCK_N), scale {scale:g}, "
              f"CAUSAL={causal}")
    return _case((which, seed), name, run, shapes)


def _backward_cases(which):
    return [
        _backward_case("40 queries, 57 keys, blocks 16 x 32", 3, which, N=40, M=57, d=16,
                       scale=0.25, causal=False, blocks=(16, 32)),
        _backward_case("causal, 40 queries over 57 keys, d = 12, blocks 32 x 16", 6, which,
                       N=40, M=57, d=12, scale=0.3, causal=True, blocks=(32, 16)),
        _backward_case("causal, 40 queries over 57 keys, blocks 16 x 32: BLOCK_N > BLOCK_M",
                       9, which, N=40, M=57, d=16, scale=0.3, causal=True, blocks=(16, 32)),
        _backward_case("causal, N = M = 64, blocks of 16: tiles to skip", 12, which, heads=1,
                       N=64, M=64, d=16, scale=0.2, causal=True, blocks=(16, 16)),
        _backward_case("float16 tiles, causal, 24 queries over 40 keys, blocks 16 x 32", 15,
                       which, N=24, M=40, d=16, scale=0.5, causal=True, blocks=(16, 32),
                       dtype=torch.float16),
        _backward_case("head offsets past 2**31 (emulated in the interpreter)", 18, which,
                       N=20, M=24, d=16, scale=0.25, causal=True, blocks=(16, 16),
                       far_heads=True),
    ]


@implementation("13.6")
def _flash_dkdv() -> Implementation:
    """The backward's dK and dV: one program per key tile, P rebuilt from L."""
    k = _kernels()
    return Implementation(
        "a @triton.jit kernel dkdv_kernel(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, "
        "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)",
        _REFERENCE, _backward_cases("dkdv"),
        _mistakes(k.dkdv_kernel, _backward_catalogue("dkdv")), outputs=("dK", "dV"))


@implementation("13.7")
def _flash_dq() -> Implementation:
    """The backward's dQ: one program per query tile, walking the key tiles."""
    k = _kernels()
    return Implementation(
        "a @triton.jit kernel dq_kernel(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, "
        "stride_kh, stride_kn, N, M, d, scale, CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)",
        _REFERENCE, _backward_cases("dq"),
        _mistakes(k.dq_kernel, _backward_catalogue("dq")), outputs=("dQ",))
