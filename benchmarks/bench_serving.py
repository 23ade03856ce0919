"""Benchmark 7: serving the trained ``book`` model (chapter 11), on its held-out text.

All parts use the shipped ``book`` model (4 layers, width 128, 4 heads of 16, RoPE,
float32) and prompts cut from ``attnlib.models.train.eval_set()``, the evaluation set of every
card.

* paged: greedy decoding of one sequence through a :class:`~attnlib.serving.paged.PagedKVCache`
  (blocks of 16 tokens), against the contiguous caches ``generate`` preallocates; time per
  new token, the ratio taken repeat by repeat (median and range), and the tokens must be
  identical. A fresh pool hands one sequence consecutive blocks, so its table is one run,
  read as one view of the pool; the same decoding through a pool whose free list is
  shuffled (every block its own run, read by the online softmax over runs) is timed beside
  it. Then the bytes one decoding step allocates (every tensor an operation creates; views
  and in-place writes create none) at two lengths held, ``N / 2`` and ``N``: a step that
  reads the cache in place allocates the same at both.
* batching: a mix of requests (prompt and output lengths, arrival steps) served by
  :func:`~attnlib.serving.batching.continuous_batching`, against the counts of static batches of
  the same size (:func:`~attnlib.serving.batching.static_batching_counts`): real tokens per forward
  pass, a count, not a time; each request's output must equal its run alone. The same
  requests are then served under a fixed budget of blocks twice, side by side: blocks
  taken as sequences grow, with preemption, against each request's worst case reserved at
  admission (``reserve=True``): requests in flight, passes, preemptions.
* speculative: greedy :func:`~attnlib.serving.speculative.speculative_generate` with the shipped
  ``book-draft`` proposing ``k`` characters, against plain greedy ``generate``: the kept
  fraction of proposals, target passes per generated character, and the wall-clock ratio
  (the tokens must be identical).
* quantised: :func:`~attnlib.serving.quant.quantised_loss` for several key and value choices
  (bits, per-token or per-channel scales): the caches' bytes over the float cache's, and
  the held-out loss.
* Hugging Face's quantised cache: the same weights in ``LlamaForCausalLM``
  (:func:`bench_hf.llama_twin`) decode the same windows one character at a time through
  ``QuantizedCache("quanto", ...)`` (optimum-quanto's group-wise integer quantiser): the
  held-out loss for each choice, against the same decoding through a ``DynamicCache``, which
  must give attnlib's float loss. optimum-quanto unpacks its 2- and 4-bit integers with a C++
  (or CUDA) extension that it compiles on first use, inside the run, and guards with a lock
  file that a killed run leaves behind; the benchmark unpacks them in PyTorch instead
  (:func:`quanto_unpack_in_pytorch`, the same bits, no compiler), and records so.
"""

from __future__ import annotations

import statistics
import warnings
from collections import deque
from functools import partial
from itertools import pairwise

import torch
import transformers
from bench_hf import llama_twin
from timing import interleaved_seconds, median_seconds
from torch.utils._python_dispatch import TorchDispatchMode

import attnlib
from attnlib.serving.batching import Request, continuous_batching, static_batching_counts
from attnlib.serving.paged import PagedKVCache
from attnlib.serving.quant import quantised_loss
from attnlib.serving.speculative import speculative_generate

PROMPT_LEN = 32
BLOCK_SIZE = 16
# (label, k_bits, k_axis, k_group, v_bits, v_axis, v_group): the float control first.
QUANT_SETTINGS = (
    ("float32", None, "token", None, None, "token", None),
    ("int8 K, V per token", 8, "token", None, 8, "token", None),
    ("int4 K per channel, V per token", 4, "channel", 32, 4, "token", None),
    ("int4 K per token, V per channel", 4, "token", None, 4, "channel", 32),
    ("int4 K, V per token", 4, "token", None, 4, "token", None),
)


def _models(device: torch.device) -> tuple:
    target = attnlib.models.pretrained.load("book", device=device).eval()
    draft = attnlib.models.pretrained.load("book-draft", device=device).eval()
    return target, draft


def _requests(n: int, ids: torch.Tensor) -> list[Request]:
    """``n`` requests with prompts of 2 to 40 characters from the held-out rows, 4 to 48 to
    generate, arriving over the first 2 n steps (seeded)."""
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(2, 41, (n,), generator=gen).tolist()
    new = torch.randint(4, 49, (n,), generator=gen).tolist()
    arrival = sorted(torch.randint(0, 2 * n, (n,), generator=gen).tolist())
    return [Request(ids[r % ids.shape[0], : prompt[r]].tolist(), new[r], arrival[r])
            for r in range(n)]


def _infer(fn, out: dict, name: str) -> None:
    with torch.inference_mode():
        out[name] = fn()


class AllocationCounter(TorchDispatchMode):
    """Adds up the bytes of the tensors that operations create while it is active.

    An output counts when its storage is none of the inputs' (a view or an in-place write
    shares one); ``largest`` is the biggest single one. What a fused kernel allocates inside
    itself is not seen, on either side of a comparison.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bytes = self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        seen = {t.untyped_storage().data_ptr() for t in _tensors([*args, *kwargs.values()])}
        out = func(*args, **kwargs)
        for t in _tensors(out if isinstance(out, (tuple, list)) else [out]):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                self.bytes += t.untyped_storage().nbytes()
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def _tensors(items) -> list[torch.Tensor]:
    out = []
    for item in items:
        out.extend(t for t in (item if isinstance(item, (list, tuple)) else [item])
                   if isinstance(t, torch.Tensor))
    return out


def _paged_cache(model, n_blocks: int, shuffled: bool) -> PagedKVCache:
    """A pool for ``model``; ``shuffled``: its free list in a seeded random order, so that no
    two blocks a sequence takes are consecutive (each is a run of its own)."""
    cache = PagedKVCache(len(model.blocks), n_blocks, BLOCK_SIZE)
    if shuffled:
        gen, order = torch.Generator().manual_seed(0), [0, 1]
        while any(b + 1 == c for b, c in pairwise(order)):  # draw again
            order = torch.randperm(n_blocks, generator=gen).tolist()
        cache.manager.free = deque(order)
    return cache


def step_bytes(model, ids: torch.Tensor, held: int, caches) -> tuple[int, int]:
    """Bytes allocated (in all, and the largest tensor) by one decoding step of ``model``
    with ``held`` tokens of ``ids`` in ``caches``."""
    with torch.inference_mode():
        model(ids[:, :held - 1], caches=caches)
        model(ids[:, held - 1:held], caches=caches)  # warm-up: a first step may allocate
        with AllocationCounter() as counter:
            model(ids[:, held:held + 1], caches=caches)
    return counter.bytes, counter.largest


def paged(device: torch.device, model, ids: torch.Tensor, n: int, repeats: int) -> dict:
    """Seconds per new token, contiguous against paged caches, side by side; the bytes a
    decoding step allocates at two lengths."""
    prompt = ids[:1, :PROMPT_LEN].to(device)
    n_blocks = -(-(PROMPT_LEN + n) // BLOCK_SIZE)

    def through(shuffled: bool):
        return model.generate(prompt, n, caches=_paged_cache(model, n_blocks, shuffled).layers)

    out: dict[str, torch.Tensor] = {}
    fns = {"contiguous": partial(_infer, partial(model.generate, prompt, n), out, "contiguous"),
           "paged": partial(_infer, partial(through, False), out, "paged"),
           "scattered": partial(_infer, partial(through, True), out, "scattered")}
    times = interleaved_seconds(fns, device, repeats=repeats)
    per = {name: statistics.median(t) / n for name, t in times.items()}
    ratios = {name: [a / b for a, b in zip(times[name], times["contiguous"], strict=True)]
              for name in ("paged", "scattered")}
    long = PROMPT_LEN + n  # the tokens held: N and N / 2
    row = ids.reshape(1, -1)[:, :long + 1].to(device)  # eval rows end to end: long enough
    allocated = {}
    for name in ("contiguous", "paged", "scattered"):
        for held in (long // 2, long):
            caches = (model.new_caches(long + 1) if name == "contiguous" else
                      _paged_cache(model, n_blocks + 1, name == "scattered").layers)
            allocated[name, held] = step_bytes(model, row, held, caches)
    return {
        "new_tokens": n,
        "prompt_tokens": PROMPT_LEN,
        "block_size": BLOCK_SIZE,
        "repeats": repeats,
        "seconds_per_token": per,
        "paged_over_contiguous": statistics.median(ratios["paged"]),
        "ratio_range": [min(ratios["paged"]), max(ratios["paged"])],
        "scattered_over_contiguous": statistics.median(ratios["scattered"]),
        "scattered_ratio_range": [min(ratios["scattered"]), max(ratios["scattered"])],
        "tokens_identical": (torch.equal(out["paged"], out["contiguous"])
                             and torch.equal(out["scattered"], out["contiguous"])),
        "step_bytes": {
            "held": [long // 2, long],
            **{name: [allocated[name, long // 2][0], allocated[name, long][0]]
               for name in ("contiguous", "paged", "scattered")},
            "largest": {name: [allocated[name, long // 2][1], allocated[name, long][1]]
                        for name in ("contiguous", "paged", "scattered")},
        },
    }


def batching(device: torch.device, model, ids: torch.Tensor, n_requests: int,
             max_batch: int, chunk: int, n_blocks: int) -> dict:
    """Forward passes and real tokens per pass, continuous against static batching; then
    requests in flight under ``n_blocks`` blocks, taken on demand against reserved."""
    requests = _requests(n_requests, ids)
    with torch.inference_mode():
        served = continuous_batching(model, requests, max_batch=max_batch, n_blocks=512,
                                     block_size=BLOCK_SIZE, chunk=chunk)
        alone = [model.generate(torch.tensor([r.prompt], device=device),
                                r.max_new_tokens)[0, len(r.prompt):].tolist() for r in requests]
        budget = {name: continuous_batching(model, requests, max_batch=max_batch,
                                            n_blocks=n_blocks, block_size=BLOCK_SIZE,
                                            chunk=chunk, reserve=reserve)
                  for name, reserve in (("on_demand", False), ("reserved", True))}
    static = static_batching_counts(requests, max_batch=max_batch)
    counts = {name: {"forward_passes": c.forward_passes, "tokens": c.tokens, "slots": c.slots,
                     "tokens_per_pass": c.tokens_per_pass}
              for name, c in (("continuous", served.counts), ("static", static))}
    under = {name: {"peak_running": res.peak_running, "mean_running": res.mean_running,
                    "forward_passes": res.counts.forward_passes, "tokens": res.counts.tokens,
                    "preemptions": res.preemptions, "outputs_identical": res.outputs == alone}
             for name, res in budget.items()}
    return {
        "requests": n_requests,
        "max_batch": max_batch,
        "chunk": chunk,
        "counts": counts,
        "continuous_over_static": (counts["continuous"]["tokens_per_pass"]
                                   / counts["static"]["tokens_per_pass"]),
        "outputs_identical": served.outputs == alone,
        "budget": {"n_blocks": n_blocks, **under,
                   "in_flight_ratio": (under["on_demand"]["mean_running"]
                                       / under["reserved"]["mean_running"])},
    }


def speculative(device: torch.device, target, draft, ids: torch.Tensor, n: int,
                ks: list[int], repeats: int) -> list[dict]:
    """For each ``k``: kept fraction, target passes per token, and the time against plain
    greedy decoding, measured side by side."""
    prompt = ids[:1, :PROMPT_LEN].to(device)
    out: dict[str, object] = {}
    fns = {"plain": partial(_infer, partial(target.generate, prompt, n), out, "plain")}
    for k in ks:
        fns[f"k={k}"] = partial(_infer, partial(speculative_generate, target, draft, prompt, n,
                                                k=k), out, f"k={k}")
    seconds = median_seconds(fns, device, repeats=repeats)
    rows = []
    for k in ks:
        res = out[f"k={k}"]
        rows.append({
            "k": k,
            "new_tokens": n,
            "acceptance_rate": res.acceptance_rate,
            "target_passes_per_token": res.passes_per_token,
            "seconds": {"speculative": seconds[f"k={k}"], "plain": seconds["plain"]},
            "speculative_over_plain": seconds[f"k={k}"] / seconds["plain"],
            "tokens_identical": torch.equal(res.ids, out["plain"]),
        })
    return rows


def quantised(device: torch.device, model, ids: torch.Tensor, targets: torch.Tensor) -> list[dict]:
    """Held-out loss and cache bytes for each of :data:`QUANT_SETTINGS`."""
    ids, targets = ids.to(device), targets.to(device)
    rows = []
    with torch.inference_mode():
        for label, kb, ka, kg, vb, va, vg in QUANT_SETTINGS:
            loss, nbytes = quantised_loss(model, ids, targets, k_bits=kb, k_axis=ka,
                                          k_group=kg, v_bits=vb, v_axis=va, v_group=vg)
            rows.append({"setting": label, "loss": loss, "cache_bytes": nbytes})
    for row in rows:
        row["bytes_over_float"] = row["cache_bytes"] / rows[0]["cache_bytes"]
        row["loss_minus_float"] = row["loss"] - rows[0]["loss"]
    return rows


def unpack_uint8(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The ``8 // bits`` integers of ``bits`` bits held in each byte of ``packed``, as uint8.

    optimum-quanto packs the ``i``-th of them into bits ``[bits * i, bits * (i + 1))`` of a
    byte, the ``i``-th slice of the unpacked tensor along dimension 0; unpacking shifts each
    down and masks it: ``(packed >> bits * i) & (2**bits - 1)``, concatenated along dim 0.
    """
    mask = (1 << bits) - 1
    return torch.cat([(packed >> shift) & mask for shift in range(0, 8, bits)]).to(torch.uint8)


def quanto_unpack_in_pytorch(device: torch.device) -> str:
    """Route ``quanto::unpack`` on ``device`` to :func:`unpack_uint8`; return what now runs.

    Importing optimum-quanto registers, for the CPU (and CUDA), an unpacking kernel that
    compiles a C++ (CUDA) extension the first time it runs, in the middle of a measurement,
    waiting on a lock file in the installed package that a killed compile leaves behind.
    The PyTorch version computes the same integers and needs no compiler.
    """
    import optimum.quanto  # noqa: F401  (defines quanto::unpack and its compiled kernels)

    key = "CUDA" if device.type == "cuda" else "CPU"
    library = torch.library.Library("quanto", "IMPL")
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        library.impl("unpack", unpack_uint8, key)
    _KEEP.append(library)  # a Library's registrations last as long as the object
    return "pytorch"


_KEEP: list = []


# (nbits, axis_key, axis_value) of Hugging Face's QuantizedCache, in its own terms. Axis 0
# cuts each token's head vector into groups of HF_GROUP channels (16: one group per head,
# attnlib's "per token"), each with a scale and a zero point; no token is kept in float
# (residual_length 1: every step's keys and values are quantised with the rest). Its axis
# -1 groups a channel across the batch and the heads, so it is not compared.
HF_QUANT_SETTINGS = ((4, 0, 0), (2, 0, 0))
HF_GROUP = 16


def hf_quantised(device: torch.device, model, ids: torch.Tensor, targets: torch.Tensor,
                 attnlib_float_loss: float) -> dict:
    """Held-out loss of the Llama twin decoding through Hugging Face's caches."""
    from importlib.metadata import version

    from transformers import DynamicCache, QuantizedCache

    transformers.logging.set_verbosity_error()
    unpack = quanto_unpack_in_pytorch(device)
    hf = llama_twin(model)
    ids, targets = ids.to(device), targets.to(device)

    def loss(cache) -> float:
        logits = []
        with torch.inference_mode():
            for t in range(ids.shape[1]):  # one character at a time, as a server decodes
                logits.append(hf(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True).logits)
        z = torch.cat(logits, dim=1)
        return float(torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]).float(),
                                                       targets.reshape(-1)))

    float_loss = loss(DynamicCache(config=hf.config))
    rows = []
    for nbits, axis_key, axis_value in HF_QUANT_SETTINGS:
        cache = QuantizedCache("quanto", hf.config, nbits=nbits, axis_key=axis_key,
                               axis_value=axis_value, q_group_size=HF_GROUP, residual_length=1)
        value = loss(cache)
        rows.append({"nbits": nbits, "axis_key": axis_key, "axis_value": axis_value,
                     "loss": value, "loss_minus_float": value - float_loss})
    return {
        "backend": "quanto",
        "optimum_quanto": version("optimum-quanto"),
        "unpack": unpack,
        "q_group_size": HF_GROUP,
        "residual_length": 1,
        "float_loss": float_loss,
        "float_agrees": abs(float_loss - attnlib_float_loss) <= 1e-4,
        "rows": rows,
    }


def run(device: torch.device, sizes: dict, repeats: dict) -> dict:
    """All parts; ``sizes`` holds ``paged`` (new tokens), ``batching`` (requests,
    max_batch, chunk, n_blocks: the budget), ``speculative`` (new tokens, ks) and
    ``eval_rows``."""
    target, draft = _models(device)
    ids, targets = attnlib.models.train.eval_set()
    ids, targets = ids[: sizes["eval_rows"]], targets[: sizes["eval_rows"]]
    b, s = sizes["batching"], sizes["speculative"]
    quant = quantised(device, target, ids, targets)
    return {
        "model": "book",
        "draft": "book-draft",
        "eval_rows": int(ids.shape[0]),
        "paged": paged(device, target, ids, sizes["paged"], repeats["paged"]),
        "batching": batching(device, target, ids, b["requests"], b["max_batch"], b["chunk"],
                             b["n_blocks"]),
        "speculative": speculative(device, target, draft, ids, s["new_tokens"], s["ks"],
                                   repeats["speculative"]),
        "quantised": quant,
        "hf_quantised": hf_quantised(device, target, ids, targets, quant[0]["loss"]),
    }
