"""Answer checks for the lessons' exercises: ``check("00.2", answer)``.

Each checked exercise has a label ``"NN.k"`` (lesson ``NN``, exercise ``k``) and a checker
registered here. A checker computes the expected answer with attnlib when it runs (no
answer is stored as a literal) and compares the reader's answer with it. The verdict is
printed and returned:

- the placeholder ``...`` gives "not answered yet", so a lesson runs top to bottom as
  committed;
- a right answer gives "correct";
- anything else gives a hint that says what is off: the type, the shape, the sign, the
  magnitude (a factor of 100 from a percentage, a factor of 2 from counting a matrix
  twice), or a mistake the exercise invites.

Example:
    >>> result = check("00.4", ...)
    00.4: not answered yet. Replace ... with your answer and run the cell again.
    >>> result.status
    'unanswered'

Lesson: every lesson's exercises (first used in 00_tokens_and_embeddings).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

__all__ = ["CheckResult", "check", "labels"]

_LABEL = re.compile(r"\d\d\.\d+")

Checker = Callable[[object], "str | None"]
_CHECKERS: dict[str, Checker] = {}


@dataclass(frozen=True)
class CheckResult:
    """The verdict of :func:`check`; true exactly when the answer is correct.

    Attributes:
        label: the exercise, ``"NN.k"``.
        status: ``"unanswered"``, ``"correct"`` or ``"incorrect"``.
        message: the line :func:`check` printed.
    """

    label: str
    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == "correct"

    def _ipython_display_(self) -> None:
        """Show nothing: :func:`check` has printed the message already."""


def check(label: str, answer: object) -> CheckResult:
    """Check the answer to exercise ``label``; print and return the verdict.

    Args:
        label: the exercise, ``"NN.k"`` (for example ``"00.2"``).
        answer: the reader's answer, or ``...`` while there is none.

    Returns:
        CheckResult: ``status`` is ``"unanswered"``, ``"correct"`` or ``"incorrect"``;
        ``message`` is the printed line (a hint when incorrect).

    Raises:
        TypeError: ``label`` is not a str.
        ValueError: no exercise has this label.
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a str such as '00.2'; got {type(label).__name__}")
    if label not in _CHECKERS:
        raise ValueError(f"label must name a checked exercise, one of {labels()}; got {label!r}")
    if answer is ...:
        status, text = "unanswered", "not answered yet. Replace ... with your answer and run " \
                                     "the cell again."
    else:
        hint = _CHECKERS[label](answer)
        status, text = ("correct", "correct.") if hint is None else ("incorrect", hint)
    result = CheckResult(label, status, f"{label}: {text}")
    print(result.message)
    return result


def labels() -> list[str]:
    """The labels of every checked exercise, sorted."""
    return sorted(_CHECKERS)


def _register(label: str) -> Callable[[Checker], Checker]:
    if not _LABEL.fullmatch(label):
        raise ValueError(f"label must look like 'NN.k'; got {label!r}")

    def add(checker: Checker) -> Checker:
        if label in _CHECKERS:
            raise ValueError(f"exercise {label!r} already has a checker")
        _CHECKERS[label] = checker
        return checker

    return add


# ---------------------------------------------------------------------------------------
# comparison helpers: each returns a hint, or None when the answer is right


def _as_tensor(answer: object) -> torch.Tensor | None:
    """``answer`` as a float64 tensor, or ``None`` when it is not numbers."""
    if isinstance(answer, (bool, np.bool_, str, bytes)) or answer is None:
        return None
    try:
        if isinstance(answer, torch.Tensor):
            out = answer.detach().to("cpu")
        else:
            out = torch.as_tensor(np.asarray(answer, dtype=np.float64))
    except (TypeError, ValueError, RuntimeError):
        return None
    if out.dtype == torch.bool or out.is_complex():
        return None
    return out.to(torch.float64)


def _compare(
    answer: object,
    expected: torch.Tensor,
    *,
    rel: float,
    what: str,
    mistakes: tuple[tuple[torch.Tensor, str], ...] = (),
) -> str | None:
    """Compare numbers: type, then shape, then known mistakes, sign and magnitude."""
    got = _as_tensor(answer)
    if got is None:
        return f"expected {what}; got a {type(answer).__name__}."
    if got.shape != expected.shape:
        return (f"expected {what}, of shape {tuple(expected.shape)}; got shape "
                f"{tuple(got.shape)}.")
    if not bool(torch.isfinite(got).all()):
        return "your answer contains nan or inf."
    if torch.allclose(got, expected, rtol=rel, atol=0.0):
        return None
    for wrong, hint in mistakes:
        if torch.allclose(got, wrong, rtol=rel, atol=0.0):
            return hint
    if bool(((got * expected) < 0).any()):
        return "the sign is wrong in at least one entry."
    ratio = float((got / expected).median()) if bool((expected != 0).all()) else float("nan")
    if math.isfinite(ratio) and ratio > 0:
        power = round(math.log10(ratio))
        if power != 0 and abs(math.log10(ratio) - power) < 0.05:
            return (f"off by a factor of 10^{power}: check the units (a percentage instead "
                    "of a fraction, or the other way round?).")
        if abs(ratio - 1) > 0.1:
            side = "large" if ratio > 1 else "small"
            return f"the magnitude is off: your answer is about {ratio:.2g} times too {side}."
    return "close, but not within the tolerance: recompute without rounding."


def _scalar(x: float) -> torch.Tensor:
    """A number as a float64 scalar tensor, the form :func:`_compare` compares."""
    return torch.tensor(float(x), dtype=torch.float64)


def _integer(answer: object) -> int | None:
    if isinstance(answer, (bool, np.bool_)):
        return None
    if isinstance(answer, (int, np.integer)):
        return int(answer)
    if isinstance(answer, torch.Tensor) and answer.numel() == 1 and not answer.is_floating_point():
        return int(answer.item())
    return None


# ---------------------------------------------------------------------------------------
# lesson 00: tokens and embeddings


@_register("00.2")
def _embedding_shares(answer: object) -> str | None:
    """Shares of the input E in Llama 3 8B, Mistral 7B and Llama 3 70B (fractions)."""
    from attnlib.memory import LLAMA3_8B, LLAMA3_70B, MISTRAL_7B

    nominal = ((LLAMA3_8B, 8e9), (MISTRAL_7B, 7e9), (LLAMA3_70B, 70e9))
    expected = torch.tensor([s.embedding_params / n for s, n in nominal], dtype=torch.float64)
    return _compare(
        answer, expected, rel=0.01,
        what="three fractions, one per model in the order Llama 3 8B, Mistral 7B, Llama 3 70B",
        mistakes=((2 * expected, "these count E twice: the question asks for the input E "
                                 "only, not E plus an output head."),),
    )


@lru_cache(maxsize=1)
def _lesson00_bpe():
    """The lesson's BPE tokenizer: 500 merges trained on the shipped corpus."""
    from attnlib.tokens import CORPUS, BPETokenizer

    return BPETokenizer.train(CORPUS, 500)


def _catalogue_pieces(k: int) -> list[str]:
    return _lesson00_bpe().with_merges(k).tokenize(" catalogue")


@_register("00.4")
def _catalogue(answer: object) -> str | None:
    """Smallest number of merges after which ' catalogue' is a single token."""
    got = _integer(answer)
    if got is None:
        return f"expected a whole number of merges (an int); got a {type(answer).__name__}."
    n_merges = len(_lesson00_bpe().merges)
    expected = next(k for k in range(n_merges + 1) if len(_catalogue_pieces(k)) == 1)
    if got == expected:
        return None
    if got < 0:
        return "a number of merges cannot be negative."
    if abs(got - expected) == 1:
        return ("off by one: bpe.with_merges(k) applies the first k merges; find the smallest "
                "k whose tokenizer keeps ' catalogue' whole.")
    if got < expected:
        return (f"too few: after {got} merges ' catalogue' is still the pieces "
                f"{_catalogue_pieces(got)}.")
    return (f"too many: ' catalogue' is one token well before {got} merges; look for the "
            "first k at which it becomes one.")


@_register("00.5")
def _closest_pair(answer: object) -> str | None:
    """Leading-order estimate of the largest |cos| among Llama 3 70B's random rows."""
    from attnlib.memory import LLAMA3_70B

    n, d = LLAMA3_70B.vocab_size, LLAMA3_70B.d_model
    pairs = n * (n - 1) / 2
    expected = math.sqrt(2 * math.log(pairs) / d)
    return _compare(
        answer, _scalar(expected), rel=0.01, what="one number, the largest |cos| (a float)",
        mistakes=(
            (_scalar(math.degrees(math.acos(expected))),
             "that is the angle in degrees; the question asks for the cosine."),
            (_scalar(math.sqrt(2 * math.log(n) / d)),
             "count pairs of rows, N_T (N_T - 1) / 2, not rows: each pair has a cosine."),
            (_scalar(math.sqrt(2 * math.log10(pairs) / d)),
             "use the natural logarithm (math.log), not log10."),
            (_scalar(2 * math.log(pairs) / d), "you forgot the square root."),
        ),
    )


# ---------------------------------------------------------------------------------------
# lesson 02: softmax attention


def _lesson02_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lesson's worked example: q = (1, 0); keys (1, 0), (0, 1), (-1, 0); values 10, 20, 30."""
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    V = torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64)
    return q, K, V


@_register("02.1")
def _doubled_query(answer: object) -> str | None:
    """Output of the worked example with the query doubled, q = (2, 0)."""
    from attnlib.core import attention

    q, K, V = _lesson02_example()
    t = lambda Y: Y.reshape(())  # noqa: E731  (a scalar output)
    expected = t(attention(2 * q, K, V))
    return _compare(
        answer, expected, rel=1e-3, what="one number, the output y (a float)",
        mistakes=(
            (t(attention(q, K, V)), "that is the output for q = (1, 0); double the query."),
            (t(attention(2 * q, K, V, scale=1.0)),
             "the logits still need the factor 1/sqrt(d_QK) = 1/sqrt(2)."),
            (t(attention(4 * q, K, V)),
             "doubling the query doubles each logit once, not twice: check your scale."),
        ),
    )


@_register("02.2")
def _output_gradient(answer: object) -> str | None:
    """Gradient of the worked example's output y with respect to its three logits s_j."""
    from attnlib.core import attention, attention_weights

    q, K, V = _lesson02_example()
    s = (q @ K.mT / math.sqrt(2)).requires_grad_()  # (1, 3): the logits
    attention(s, torch.eye(3, dtype=torch.float64), V, scale=1.0, impl="explicit").sum().backward()
    expected = s.grad.reshape(3)
    p = attention_weights(q, K).reshape(3)
    return _compare(
        answer, expected, rel=1e-3,
        what="three numbers, dy/ds_j for j = 0, 1, 2",
        mistakes=(
            (p * V.reshape(3), "that is diag(p) v alone: the Jacobian of the softmax is "
                               "diag(p) - p p^T, and the - p p^T part moves the other weights."),
            (expected / math.sqrt(2), "that is the gradient with respect to the dot products "
                                      "<q, k_j>; the question asks for the logits s_j."),
            (V.reshape(3) - (p @ V.reshape(3)), "that is v_j - y; multiply by p_j."),
        ),
    )


@_register("02.4")
def _half_precision_overflow(answer: object) -> str | None:
    """ln of the largest finite float16 and bfloat16: where e^x overflows in each."""
    dtypes = (torch.float16, torch.bfloat16)
    largest = torch.tensor([torch.finfo(dt).max for dt in dtypes], dtype=torch.float64)
    expected = largest.log()
    float32 = math.log(torch.finfo(torch.float32).max)
    return _compare(
        answer, expected, rel=1e-4,
        what="two numbers, the thresholds for float16 and bfloat16 in that order",
        mistakes=(
            (largest, "those are the largest finite numbers themselves; the threshold is "
                      "the logit x with e^x equal to them: take the natural logarithm."),
            (largest.log10(), "use the natural logarithm (math.log), not log10: the "
                              "exponential is e^x."),
            (expected.flip(0), "the order is float16 first, then bfloat16."),
            (torch.tensor([float32, float32], dtype=torch.float64),
             "float16 has far fewer exponent bits than float32: look at "
             "torch.finfo(torch.float16).max."),
        ),
    )


# ---------------------------------------------------------------------------------------
# lesson 01: attention as a lookup


def _toy_database() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 01's keys and values, in float64."""
    from attnlib.viz.lookup import KEYS, VALUES

    return KEYS.to(torch.float64), VALUES.to(torch.float64)


@_register("01.1")
def _relu_weights(answer: object) -> str | None:
    """The relu weight row of q = (2, 1) on the toy keys, scale 1."""
    from attnlib.core import attention_weights, similarity

    K, _ = _toy_database()
    q = torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    expected = attention_weights(q, K, kernel="relu", scale=1.0)[0]
    got = _as_tensor(answer)
    if got is not None and got.shape == expected.shape and bool((got < 0).any()):
        return ("a weight is negative: relu turns a negative dot product into a score of 0, "
                "so no weight can be below 0.")
    A = similarity(q, K, kernel="relu", scale=1.0)[0]
    return _compare(
        answer, expected, rel=0.01, what="five weights, key 0 first",
        mistakes=(
            (A, "these are the scores A[0, j]; divide each by their sum Z[0, 0]."),
            (attention_weights(q, K, scale=1.0)[0],
             "these are the weights of the exponential kernel; use relu, max(s, 0)."),
        ),
    )


@_register("01.3")
def _chat_cost(answer: object) -> str | None:
    """Multiply-adds of Q K^T and A V for N_Q = 12, N_KV = 3000, d_QK = d_V = 128."""
    from torch.utils.flop_counter import FlopCounterMode

    from attnlib.core import attention

    n_q, n_kv, width = 12, 3000, 128
    Q, K, V = (torch.empty(n, width, device="meta") for n in (n_q, n_kv, n_kv))
    with FlopCounterMode(display=False) as counter:  # shapes only: meta tensors hold no data
        attention(Q, K, V, impl="explicit")
    expected = counter.get_total_flops() // 2  # PyTorch counts 2 operations per multiply-add
    return _compare(
        answer, _scalar(expected), rel=1e-6, what="one number of multiply-adds",
        mistakes=(
            (_scalar(2 * expected), "that counts a multiply and an add separately; count each "
                                    "multiply-add once."),
            (_scalar(expected // 2), "that is one of the two products only; add Q K^T (d_QK per "
                                     "entry) and A V (d_V per entry)."),
            (_scalar(n_kv * n_kv * 2 * width), "that recomputes every token of the conversation; "
                                               "only the question's N_Q tokens are queries."),
        ),
    )


@_register("01.4")
def _context_edit(answer: object) -> str | None:
    """The output of q = (1, 2) after the third value moves from (4, 3) to (4, 9)."""
    from attnlib.core import attention

    K, V = _toy_database()
    q = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    V_new = V.clone()
    V_new[2] = torch.tensor([4.0, 9.0], dtype=torch.float64)
    expected = attention(q, K, V_new, impl="explicit")[0]
    before = attention(q, K, V, impl="explicit")[0]
    return _compare(
        answer, expected, rel=1e-3, what="the new output, two numbers",
        mistakes=(
            (before, "that is the output before the edit; the third value changed."),
            (before + (V_new[2] - V[2]), "the edit enters weighted: add P[0, 2] times the "
                                         "change of v_2, not the whole change."),
            (V_new[2], "that is the new value itself; attention averages all five values."),
        ),
    )


# ---------------------------------------------------------------------------------------
# lesson 03: multi-head attention


@_register("03.1")
def _gemma_width_parameters(answer: object) -> str | None:
    """Entries of W_Q, W_K, W_V, W_O of an MHA layer at Gemma 3 27B's widths (d, H, d_head)."""
    from attnlib.gqa import MultiHeadAttention
    from attnlib.memory import GEMMA3_27B

    d, n_heads, d_head = GEMMA3_27B.d_model, GEMMA3_27B.n_heads, GEMMA3_27B.d_head
    layer = MultiHeadAttention(d, n_heads, d_head, device="meta")  # shapes only
    expected = sum(p.numel() for p in layer.parameters())
    width = n_heads * d_head
    return _compare(
        answer, _scalar(expected), rel=1e-9, what="one number of parameters (an int)",
        mistakes=(
            (_scalar(4 * d * d), "that assumes H d_head = d_in; here H d_head = 32 x 128 = 4096 is "
                                 "narrower than d_in = 5376."),
            (_scalar(3 * d * width),
             "that counts W_Q, W_K and W_V only; add the output matrix W_O."),
            (_scalar(4 * d * d_head), "that is one head's share; the layer has H = 32 heads."),
            (_scalar(4 * width * width), "the rows of W_Q, W_K, W_V are the d_in = 5376 input "
                                         "features, not H d_head."),
        ),
    )


@_register("03.2")
def _head_removed(answer: object) -> str | None:
    """Output of the lesson's toy layer (H = 2, d_head = 3, d_in = 6, N = 4) with Y_1 set to 0."""
    from attnlib.core import attention
    from attnlib.heads import merge_heads, split_heads
    from attnlib.viz.heads import draw_layer

    n_heads = 2
    X, W_Q, W_K, W_V, W_O = draw_layer(n_heads, 3, d_in=6, n_tokens=4, seed=0)
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))  # (H, N, d_head)
    heads = attention(Q, K, V)  # (H, N, d_head): Y_0, Y_1
    Y = merge_heads(heads) @ W_O
    kept = heads.clone()
    kept[1] = 0.0
    expected = merge_heads(kept) @ W_O
    columns_zeroed = Y.clone()
    columns_zeroed[:, 3:] = 0.0
    first_removed = heads.clone()
    first_removed[0] = 0.0
    return _compare(
        answer, expected, rel=1e-6, what="the output Y, a 4 x 6 tensor",
        mistakes=(
            (Y, "that is the layer's output with both heads; set Y_1 to zero first."),
            (columns_zeroed, "zeroing columns 3..5 of Y is not removing head 1: W_O mixes "
                             "the heads, so head 1 contributes Y_1 W_O^1 to every column."),
            (merge_heads(first_removed) @ W_O, "that removes head 0; heads count from 0, and "
                                               "head 1 is the second block of columns."),
            (merge_heads(kept), "that is the concatenation (Y_0 0); multiply it by W_O."),
        ),
    )


# ---------------------------------------------------------------------------------------
# lesson 04: masks and the transformer layer


@_register("04.1")
def _decode_pairs(answer: object) -> str | None:
    """Allowed (query, key) pairs when 4 new tokens are decoded against 6 cached ones."""
    from attnlib.masks import causal_mask

    n_new, n_kv = 4, 10
    expected = int(causal_mask(n_new, n_kv).sum())
    got = _integer(answer)
    if got is None:
        return f"expected a whole number of (query, key) pairs; got a {type(answer).__name__}."
    if got == expected:
        return None
    hints = {
        # top-left alignment, or the new tokens alone (both give 1 + 2 + 3 + 4)
        int(torch.ones(n_new, n_kv, dtype=torch.bool).tril().sum()):
            "that is the top-left mask, which treats the new tokens as positions 0 to 3 and "
            "hides the cached keys from them; they are positions 6 to 9 and see every "
            "cached key.",
        int(causal_mask(n_kv).sum()): "that counts all ten tokens as queries; only the 4 new "
                                      "tokens ask, the cached ones are keys only.",
        n_new * n_kv: "that is with no mask: a new token must not see the new tokens after it.",
    }
    return hints.get(got, "not quite: count, for each new token, the keys at or before its "
                          "position (rows of causal_mask(4, 10)).")


@_register("04.2")
def _swiglu_parameters(answer: object) -> str | None:
    """Weights of one SwiGLU feed-forward network of Llama 3 8B (d = 4096, d_ff = 14,336)."""
    from attnlib.layers import FeedForward
    from attnlib.memory import LLAMA3_8B

    d, d_ff = LLAMA3_8B.d_model, 14_336  # d_ff: Table 3 of the Llama 3 paper
    count = sum(p.numel() for p in FeedForward(d, d_ff, "swiglu", device="meta").parameters())
    return _compare(
        answer, _scalar(count), rel=1e-6, what="one number of parameters",
        mistakes=(
            (_scalar(2 * d * d_ff), "that counts two matrices; SwiGLU has three, W_gate, W_up and "
                                    "W_down."),
            (_scalar(count * LLAMA3_8B.n_layers), "that is all the layers; the question asks for "
                                                  "one feed-forward network."),
            (_scalar(8 * d * d), "that is a plain MLP with d_ff = 4d; use Llama 3's d_ff and three "
                                 "matrices."),
        ),
    )


@_register("04.3")
def _rms_norm_row(answer: object) -> str | None:
    """RMSNorm (gains 1, eps 1e-6) of the row x = (1, 3, 5, 7)."""
    from attnlib.norms import layer_norm, rms_norm

    x = torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    return _compare(
        answer, rms_norm(x), rel=1e-3, what="four numbers, the normalised row",
        mistakes=(
            (layer_norm(x), "that is LayerNorm: RMSNorm does not subtract the mean first."),
            (x / x.norm(), "that divides by the Euclidean norm; the root mean square divides "
                           "the sum of squares by d = 4 before the square root."),
            (x / x.std(), "that divides by the standard deviation; RMSNorm divides by the root "
                          "mean square, sqrt(mean(x^2))."),
        ),
    )


# lesson 05: the KV cache


@_register("05.1")
def _fp8_batch_cache(answer: object) -> str | None:
    """Bytes of an FP8 cache: 32 layers, 8 KV heads of 128, a batch of 16 x 32,768 tokens."""
    from attnlib.memory import kv_cache_bytes

    shape = (32, 8, 128)
    tokens, batch = 32_768, 16
    expected = kv_cache_bytes(*shape, n_tokens=tokens, batch=batch, bytes_per_elem=1)
    return _compare(
        answer, _scalar(expected), rel=1e-3, what="one number of bytes",
        mistakes=(
            (_scalar(expected / 2), "that counts the keys only (or the values only): the cache "
                                    "holds both, hence the factor 2."),
            (_scalar(2 * expected), "that is a 2-byte (bf16) cache; FP8 stores 1 byte per "
                                    "number."),
            (_scalar(expected / batch), "that is one sequence; the batch holds 16."),
            (_scalar(kv_cache_bytes(*shape, bytes_per_elem=1)),
             "that is the cache of a single token; multiply by every token of the batch."),
            (_scalar(expected / 2**30), "that is in GiB; the question asks for bytes."),
            (_scalar(expected / 1e9), "that is in GB; the question asks for bytes."),
        ),
    )


@_register("05.2")
def _attention_saving(answer: object) -> str | None:
    """Ratio of the attention multiply-adds without and with a cache, passes n = 1..4096."""
    from attnlib.cache import generation_macs

    n = 4096
    shape = dict(n_layers=1, d_model=1, n_heads=1, n_kv_heads=1, d_head=1, d_ff=1,
                 vocab_size=1)
    totals = [sum(s["attention"] for s in generation_macs(1, n, use_cache=c, **shape))
              for c in (False, True)]
    return _compare(
        answer, _scalar(totals[0] / totals[1]), rel=1e-3, what="one number, the ratio",
        mistakes=(
            (_scalar(totals[1] / totals[0]), "that is the inverse: divide the work without "
                                             "the cache by the work with it."),
            (_scalar(n), "that is N; the ratio of the sums of n^2 and of n is (2N + 1) / 3."),
            (_scalar(n / 2), "close to the ratio of N^3 / 3 to N^2 / 2, but the sums are "
                             "N(N+1)(2N+1)/6 and N(N+1)/2: compute them exactly."),
        ),
    )


@_register("05.3")
def _longest_context(answer: object) -> str | None:
    """Tokens of bf16 cache that fit beside Llama 3 8B's bf16 weights in 80 GB."""
    from attnlib.memory import LLAMA3_8B

    per_token = LLAMA3_8B.kv_bytes_per_token()
    expected = (80 * 10**9 - LLAMA3_8B.weight_bytes()) // per_token
    got = _integer(answer)
    if got is None:
        return f"expected a whole number of tokens (an int); got a {type(answer).__name__}."
    if got == expected:
        return None
    hints = {
        (80 * 2**30 - LLAMA3_8B.weight_bytes()) // per_token:
            "that takes 80 GiB (2^30 bytes each); the accelerator has 80 GB, 80 x 10^9 bytes.",
        80 * 10**9 // per_token: "that ignores the weights, which take their share first.",
        (80 * 10**9 - LLAMA3_8B.weight_bytes()) // (per_token // 2):
            "that is an fp8 cache (1 byte); the question stores it in bf16, 2 bytes.",
        (80 * 10**9 - LLAMA3_8B.weight_bytes()) // LLAMA3_8B.cache_bytes_per_token("mha"):
            "that sizes the cache for all 32 query heads; Llama 3 8B caches its 8 KV heads.",
    }
    if got == expected + 1:
        return "one token too many: round the number of tokens down, the last one must fit."
    return hints.get(got, "not quite: divide the memory left after the weights by the cache "
                          "bytes per token (kv_bytes_per_token()) and round down.")


# lesson 06: grouped-query attention


@_register("06.1")
def _llama3_8b_cache(answer: object) -> str | None:
    """Bytes per token of Llama 3 8B's KV cache, all layers, 16-bit numbers."""
    from attnlib.memory import LLAMA3_8B

    expected = LLAMA3_8B.kv_bytes_per_token()  # 2 N_L G d_head b
    return _compare(
        answer, _scalar(expected), rel=1e-9, what="one number of bytes (an int)",
        mistakes=(
            (_scalar(LLAMA3_8B.cache_bytes_per_token("mha")),
             "that counts one key/value head per query head (H = 32); the cache holds the "
             "G = 8 key/value heads only."),
            (_scalar(expected // 2), "half the answer: count both K and V, and 2 bytes per "
                                     "16-bit number."),
            (_scalar(expected // LLAMA3_8B.n_layers), "that is one layer; the cache holds "
                                                      "every layer's keys and values."),
            (_scalar(expected // 2 // LLAMA3_8B.n_layers),
             "that is one layer in numbers, not bytes; multiply by the layers and by 2 bytes."),
        ),
    )


@_register("06.2")
def _kv_head_of_13(answer: object) -> str | None:
    """The key/value head that query head 13 reads when H = 32 and G = 8 (0-based)."""
    from attnlib.heads import kv_head_index

    n_heads, n_kv_heads, h = 32, 8, 13
    expected = int(kv_head_index(n_heads, n_kv_heads)[h])
    got = _integer(answer)
    if got is None:
        return f"expected a head index (an int); got a {type(answer).__name__}."
    if got == expected:
        return None
    s = n_heads // n_kv_heads
    hints = {
        h // n_kv_heads: "that divides by G; divide by the group size s = H / G = 4.",
        h % n_kv_heads: "that is h mod G, an interleaved grouping; PyTorch and Hugging Face "
                        "group consecutive query heads, g(h) = h // s.",
        (h - 1) // s + 1: "that mixes conventions: the 1-based formula floor((h - 1) / s) + 1 "
                          "needs the 1-based head number 14; counted from 0, g(h) = h // s.",
    }
    return hints.get(got, f"not quite: with s = H / G = {s}, query head h reads KV head h // s.")


@_register("06.3")
def _weights_saved(answer: object) -> str | None:
    """Entries of W_K and W_V saved in one Llama 3 70B layer by G = 8 instead of G = H = 64."""
    from attnlib.memory import LLAMA3_70B

    d, n_heads, n_kv, d_head = (LLAMA3_70B.d_model, LLAMA3_70B.n_heads, LLAMA3_70B.n_kv_heads,
                                LLAMA3_70B.d_head)
    expected = 2 * d * (n_heads - n_kv) * d_head
    return _compare(
        answer, _scalar(expected), rel=1e-9, what="one number of entries (an int)",
        mistakes=(
            (_scalar(expected // 2), "that is one matrix; W_K and W_V both shrink."),
            (_scalar(2 * d * n_kv * d_head), "that is what W_K and W_V keep; the question asks "
                                             "how many entries they lose."),
            (_scalar(expected * LLAMA3_70B.n_layers), "that is all 80 layers; the question "
                                                      "asks for one layer."),
            (_scalar(4 * d * (n_heads - n_kv) * d_head), "W_Q and W_O keep their size: only "
                                                         "W_K and W_V shrink."),
        ),
    )


# lesson 07: multi-head latent attention


@_register("07.1")
def _deepseek_v3_cache(answer: object) -> str | None:
    """Bytes per token of DeepSeek-V3's MLA cache, all layers, 16-bit: N_L (d_L + d_R) 2."""
    from attnlib.memory import DEEPSEEK_V3

    v3 = DEEPSEEK_V3
    per_layer = v3.d_latent + v3.d_rope
    return _compare(
        answer, _scalar(v3.kv_bytes_per_token(2)), rel=1e-9, what="one number of bytes",
        mistakes=(
            (_scalar(v3.n_layers * v3.d_latent * 2), "that leaves out the rotary key: the "
                                                     "cache holds d_L + d_R numbers per token "
                                                     "and layer."),
            (_scalar(2 * v3.n_layers * per_layer * 2), "there is no factor 2 for keys and values: "
                                                       "both are read off the one latent."),
            (_scalar(per_layer * 2), "that is one layer; multiply by the number of layers."),
            (_scalar(v3.n_layers * per_layer), "that counts numbers; in 16-bit each takes 2 "
                                               "bytes."),
            (_scalar(v3.cache_bytes_per_token("mha")), "that is the multi-head cache over 128 "
                                                       "heads; the question asks for MLA's."),
        ),
    )


@_register("07.2")
def _fewer_heads_factor(answer: object) -> str | None:
    """(2 H d_head) / (d_L + d_R) for H = 32, d_head = 128, d_L = 512, d_R = 64."""
    H, d_head, d_L, d_R = 32, 128, 512, 64
    return _compare(
        answer, _scalar(2 * H * d_head / (d_L + d_R)), rel=1e-3, what="one number, a factor",
        mistakes=(
            (_scalar(2 * H * d_head / d_L), "that leaves out the rotary key: MLA caches "
                                            "d_L + d_R numbers per token and layer."),
            (_scalar(H * d_head / (d_L + d_R)), "a multi-head cache holds keys and values: "
                                                "2 H d_head numbers."),
            (_scalar((d_L + d_R) / (2 * H * d_head)), "that is the inverse: divide the MHA cache "
                                                      "by the MLA cache."),
            (_scalar(2 * 8 * d_head / (d_L + d_R)), "that is against GQA with G = 8; the "
                                                    "question asks for MHA over all 32 heads."),
        ),
    )


@_register("07.3")
def _merged_count(answer: object) -> str | None:
    """Numbers in all W_LQK^h and W_LO of one DeepSeek-V2 layer."""
    from attnlib.memory import DEEPSEEK_V2
    from attnlib.mla import MultiHeadLatentAttention

    v2 = DEEPSEEK_V2

    W = MultiHeadLatentAttention(v2.d_model, v2.n_heads, v2.d_head, v2.d_latent,
                                 d_latent_q=v2.d_latent_q, device="meta").merged_weights()
    n_qk, n_o = W["W_LQK"].numel(), W["W_LO"].numel()
    factors = (v2.d_latent_q * v2.n_heads * v2.d_head + 2 * v2.d_latent * v2.n_heads * v2.d_head
               + v2.n_heads * v2.d_head * v2.d_model)
    return _compare(
        answer, _scalar(n_qk + n_o), rel=1e-9, what="one number of entries",
        mistakes=(
            (_scalar(n_qk), "that is the W_LQK^h of all heads alone; add W_LO."),
            (_scalar(n_o), "that is W_LO alone; add the W_LQK^h of all heads."),
            (_scalar(n_qk // v2.n_heads + n_o), "W_LQK^h is one matrix per head: count all "
                                                f"{v2.n_heads} of them."),
            (_scalar(factors), "that is the four factors W_LQQ, W_LK, W_LV and W_O; the "
                               "question asks for the merged matrices."),
        ),
    )


@_register("07.4")
def _exact_latent_width(answer: object) -> str | None:
    """Smallest d_L at which mla_from_mha converts a Llama 3 8B layer exactly."""
    from attnlib.memory import LLAMA3_8B

    llama = LLAMA3_8B
    G, d_head, d_in = llama.n_kv_heads, llama.d_head, llama.d_model
    expected = min(d_in, 2 * G * d_head)
    got = _integer(answer)
    if got is None:
        return f"expected a whole number, a latent width; got a {type(answer).__name__}."
    if got == expected:
        return None
    hints = {
        G * d_head: "that holds the keys only; the latent must carry keys and values, "
                    "[W_K | W_V].",
        d_in: "that is d_in; the rank of [W_K | W_V] is bounded by its columns too, "
              "2 G d_head, which is smaller.",
        2 * llama.n_heads * d_head: "that uses the 32 query heads; only the G = 8 key/value "
                                    "heads have their own K and V.",
    }
    return hints.get(got, "not quite: what is the largest rank the matrix [W_K | W_V] of "
                          "shape (d_in, 2 G d_head) can have?")



# lesson 08: rotary position embedding


@_register("08.1")
def _rope_angle(answer: object) -> str | None:
    """<q R_7, k R_4> for d = 2, q = (1, 0), k = (0, 1): sin(7 - 4) = sin 3."""
    from attnlib.rope import apply_rope

    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[0.0, 1.0]], dtype=torch.float64)

    def dot(m: int, n: int) -> float:
        return float(apply_rope(q, torch.tensor([m])) @ apply_rope(k, torch.tensor([n])).T)

    expected = dot(7, 4)
    return _compare(
        answer, _scalar(expected), rel=1e-3, what="one number, the dot product (a float)",
        mistakes=(
            (_scalar(-expected), "the sign is flipped: that is sin(n - m); the query at m = 7 "
                                 "has turned 3 radians further than the key, not less."),
            (_scalar(math.sin(7 + 4)), "that adds the angles (m + n); rotating the key too "
                                       "subtracts its angle: only m - n survives."),
            (_scalar(math.cos(3)), "that is the cosine: the key (0, 1) picks the second "
                                   "coordinate of the turned query, (cos 3, sin 3)."),
            (_scalar(math.sin(math.radians(3))), "the angles are in radians, not degrees "
                                                 "(theta_0 = 1 radian per position)."),
            (_scalar(expected / math.sqrt(2)), "the question asks for the plain dot product, "
                                               "without the 1/sqrt(d) scaling."),
        ),
    )


@_register("08.2")
def _slowest_wavelength(answer: object) -> str | None:
    """Wavelength 2 pi / theta_63 of Llama 3's slowest pair (d_head = 128, b = 500,000)."""
    from attnlib.memory import LLAMA3_8B
    from attnlib.rope import rope_frequencies

    d, base = LLAMA3_8B.d_head, 500_000.0
    theta = rope_frequencies(d, base=base)
    expected = 2 * math.pi / float(theta[-1])
    return _compare(
        answer, _scalar(expected), rel=1e-3, what="one wavelength, in positions (a float)",
        mistakes=(
            (_scalar(1 / float(theta[-1])), "that is 1 / theta_63, positions per radian; a "
                                            "full turn takes 2 pi radians."),
            (_scalar(float(theta[-1])), "that is the angle theta_63 itself; the wavelength "
                                        "is 2 pi / theta_63."),
            (_scalar(2 * math.pi * base), "that uses the exponent 1; theta_63 = b^(-2 * 63 / "
                                          "128) = b^(-126/128)."),
            (_scalar(2 * math.pi / float(rope_frequencies(d, base=10_000.0)[-1])),
             "that is base 10,000; Llama 3 uses 500,000."),
            (_scalar(2 * math.pi * base ** (2 * 63 / 4096)), "the exponent divides by the head "
                                                             "width 128, not the model width."),
        ),
    )


@_register("08.4")
def _per_head_rotary_cache(answer: object) -> str | None:
    """DeepSeek-V2's cache per token and layer if every head had its own rotated key."""
    from attnlib.memory import DEEPSEEK_V2

    ds = DEEPSEEK_V2
    expected = ds.d_latent + ds.n_heads * ds.d_rope
    got = _integer(answer)
    if got is None:
        if isinstance(answer, float) and answer == expected:
            return None
        return f"expected a whole number of cached numbers (an int); got a {type(answer).__name__}."
    if got == expected:
        return None
    hints = {
        ds.d_latent + ds.d_rope: "that is the real design, with one rotated key shared by all "
                                 "heads; the question gives each head its own.",
        ds.n_heads * ds.d_rope: "that is the rotary keys alone; the latent L is still cached.",
        ds.values_per_token_per_layer("mha"): "that is a full multi-head cache; the latent "
                                              "stays, only the rotary keys multiply.",
        ds.d_latent + 2 * ds.n_heads * ds.d_rope: "that caches a rotary query per head too; "
                                                  "queries are never cached.",
        ds.n_layers * (ds.d_latent + ds.n_heads * ds.d_rope): "that is all 60 layers; the "
                                                             "question asks for one layer.",
    }
    return hints.get(got, "not quite: add the latent width d_L and one rotary key of width "
                          "d_R for each of the H heads.")


# lesson 09: the frontier


@_register("09.1")
def _online_softmax_output(answer: object) -> str | None:
    """Output of the online softmax for logits (0, 2 | 4, 1) and values (1, 2 | 3, 4)."""
    from attnlib.flash import tiled_attention

    # one query whose logits are q . k_j: q = (1), keys (0, 2, 4, 1), scale 1
    t = torch.tensor([[0.0], [2.0], [4.0], [1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    q = torch.ones(1, 1, dtype=torch.float64)
    expected = tiled_attention(q, t, v, block_size=2, scale=1.0).reshape(())
    no_rescale = (math.exp(-2) * 1 + 2 + 3 + math.exp(-3) * 4) / (math.exp(-2) + 1 + 1
                                                                   + math.exp(-3))
    block_means = (float(torch.softmax(t[:2, 0], 0) @ v[:2, 0])
                   + float(torch.softmax(t[2:, 0], 0) @ v[2:, 0])) / 2
    got = _as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())
    return _compare(
        answer, expected, rel=1e-3, what="one number, the output o / l",
        mistakes=(
            (_scalar(no_rescale), "that skips the rescaling: when the second block raises "
                                  "the maximum from 2 to 4, multiply the old l and o by "
                                  "e^(2 - 4) before adding the new terms."),
            (_scalar(block_means), "that averages the two blocks' outputs; the blocks must "
                                   "be weighted by their shares of the normaliser l."),
            (_scalar(float(v.mean())), "that is the plain mean of the values: the weights are "
                                       "a softmax of the logits, not uniform."),
        ),
    )


@_register("09.2")
def _recurrent_state_bytes(answer: object) -> str | None:
    """Bytes of the linear-attention state of one sequence: 48 layers, 32 heads, r = d_V = 128."""
    from attnlib.approx import LinearAttentionState

    layers, heads, r, d_v = 48, 32, 128, 128
    state = LinearAttentionState(lambda x: x.abs())  # any feature map that keeps r = 128
    state.step(torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, d_v, dtype=torch.bfloat16))
    expected = layers * state.nbytes
    got = _integer(answer)
    if got is None:
        if isinstance(answer, float) and answer.is_integer():
            got = int(answer)
        else:
            return f"expected a whole number of bytes; got a {type(answer).__name__}."
    if got == expected:
        return None
    hints = {
        layers * heads * r * d_v * 2: "that counts S_t only; the state also holds the "
                                      "normaliser z_t, r more numbers per head.",
        layers * heads * (r * d_v + r): "that counts numbers; bfloat16 takes 2 bytes each.",
        heads * (r * d_v + r) * 2: "that is one layer; the question asks for all 48.",
        layers * heads * (r * d_v + r) * 4: "that is float32; bfloat16 takes 2 bytes.",
    }
    return hints.get(got, "not quite: per head, S_t has r x d_V numbers and z_t has r; "
                          "multiply by heads, layers and bytes per number.")


@_register("09.3")
def _sparse_query_cost(answer: object) -> str | None:
    """Multiply-adds of one sparse query (indexer + top-k) over those of full attention."""
    n, d, index_cost, k = 131_072, 128, 64, 2_048
    expected = (n * index_cost + k * 2 * d) / (n * 2 * d)
    return _compare(
        answer, _scalar(expected), rel=1e-3, what="one number, a fraction between 0 and 1",
        mistakes=(
            (_scalar(k / n), "that counts the attention to the top-k keys only; the indexer "
                             "scores every one of the 131,072 keys first."),
            (_scalar(index_cost / (2 * d)), "that is the indexer alone; add the attention to "
                                            "the 2,048 chosen keys."),
            (_scalar(100 * expected), "that is a percentage; give the fraction."),
        ),
    )


# ---------------------------------------------------------------------------------------
# lesson 10: randomised attention


@_register("10.1")
def _sampled_row_error(answer: object) -> str | None:
    """E (y_hat - y)^2 of Monte Carlo, m = 4 draws from P_0 = (0.5, 0.25, 0.25), v = (0, 2, 4)."""
    from attnlib.randomised import sampling_variance

    p = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    v = torch.tensor([[0.0], [2.0], [4.0]], dtype=torch.float64)
    variance = float(sampling_variance(p, v)[0])
    second_moment = float(p @ v.pow(2))
    return _compare(
        answer, _scalar(variance / 4), rel=1e-3, what="one number, the mean squared error",
        mistakes=(
            (_scalar(variance), "that is the variance of one sample; the mean of m = 4 "
                                "independent samples has a quarter of it."),
            (_scalar(math.sqrt(variance / 4)), "that is the standard deviation; the question "
                                               "asks for the mean squared error."),
            (_scalar(second_moment / 4), "that uses E[v^2] without subtracting y^2: the "
                                         "variance is sum_j P_j (v_j - y)^2."),
        ),
    )


@_register("10.2")
def _optimal_columns(answer: object) -> str | None:
    """The probabilities p_j ∝ |A_:j| |V_j| for the lesson's 2 x 3 matrix A and V = (1, 2, 2)."""
    from attnlib.randomised import product_probabilities

    A = torch.tensor([[4.0, 0.0, 1.0], [2.0, 1.0, 0.0]], dtype=torch.float64)
    V = torch.tensor([[1.0], [2.0], [2.0]], dtype=torch.float64)
    expected = product_probabilities(A, V)
    columns, rows = A.norm(dim=0), V.norm(dim=1)
    return _compare(
        answer, expected, rel=1e-3, what="three probabilities, rho_0, rho_1, rho_2",
        mistakes=(
            (columns / columns.sum(), "those use the column norms of A only; weigh each "
                                      "column by the norm of its row of V too."),
            ((columns * rows).pow(2) / (columns * rows).pow(2).sum(),
             "those are proportional to the squared products; the optimum is proportional "
             "to |A_:j| |V_j| itself."),
            (torch.full((3,), 1 / 3, dtype=torch.float64), "uniform probabilities are not "
                                                             "optimal here: the first column "
                                                             "is much heavier."),
        ),
    )


@_register("10.3")
def _uniform_ess(answer: object) -> str | None:
    """ESS of m = 100 uniform draws for weights (0.9, 0.1/99, ..., 0.1/99) over N = 100 keys."""
    from attnlib.randomised import effective_sample_size

    P = torch.full((1, 100), 0.1 / 99, dtype=torch.float64)
    P[0, 0] = 0.9
    uniform = torch.full((1, 100), 0.01, dtype=torch.float64)
    expected = float(effective_sample_size(P, uniform, m=100)[0])
    got = _as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())
    return _compare(
        answer, _scalar(expected), rel=1e-3, what="one number, an effective sample size",
        mistakes=(
            (_scalar(expected / 100), "that is the ESS per draw; the question asks for the "
                                      "ESS of all 100 draws."),
            (_scalar(100 * float(P.pow(2).sum())), "that is 1 + chi^2, the factor by which "
                                                   "the draws are discounted: divide m by it."),
        ),
    )
