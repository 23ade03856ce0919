"""The benchmarks' results as rows, for run.py's printed table and the book's performance page.

``run.py`` measures and writes a results dictionary (``--out FILE``, or ``--save`` for the
committed ``benchmarks/results/<device>.json``); this module turns one into words and
nothing else. It imports only the standard library, so the book build
(``book/_ext/benchmarks_table.py``) loads it without torch, and the two tables cannot
disagree: both are made of :func:`rows`.

- :data:`HEADER` and :func:`rows`: one row per measurement, seven text cells each;
- :func:`notes`: what each benchmark ran and how the ratio reads;
- :func:`machine_line`: where and when the results were measured;
- :func:`targets_line`: how many targets were met, and which were missed;
- :func:`targets_text`: each target as the check run.py made, bound and sizes included;
- :func:`problems` and :func:`load`: the schema of a results file, checked.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

# Bumped when a field is renamed or removed (new fields may be added freely).
SCHEMA_VERSION = 2
RESULTS_DIR = Path(__file__).resolve().parent / "results"
HEADER = ("benchmark", "case", "attnlib", "baseline", "ratio", "target", "check")


def results_path(device_type: str, folder: Path = RESULTS_DIR) -> Path:
    """Where ``run.py --save`` writes the results of a device type: ``results/cpu.json``."""
    return folder / f"{device_type}.json"


# ---------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------


def _time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def _bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _tokens(ok: bool) -> str:
    return "tokens identical" if ok else "TOKENS DIFFER"


def _target(results: dict, name: str, **case: int) -> str:
    """``<= 1.3: met`` (or ``MISSED``) when the target was judged in this run and belongs to
    this case (``case`` names the sizes the target was set for), else blank."""
    t = results["targets"].get(name)
    if t is None or any(t.get(key) != value for key, value in case.items()):
        return ""
    goal = f"<= {t['max']:g}" if "max" in t else f">= {t['min']:g}x"
    return f"{goal}: {'met' if t['met'] else 'MISSED'}"


def rows(results: dict) -> list[tuple[str, ...]]:
    """One row of :data:`HEADER`'s seven cells per measurement, in the order they ran."""
    out: list[tuple[str, ...]] = []
    for r in results["attention"]:
        s = r["seconds"]
        check = f"max|dY| {r['max_abs_diff']:.1e}"
        out.append(("attention auto / SDPA", f"N={r['N']}", _time(s["auto"]), _time(s["sdpa"]),
                    f"{r['auto_over_sdpa']:.2f}x",
                    _target(results, "attention_auto_over_sdpa", N=r["N"]), check))
        out.append(("attention explicit / SDPA", f"N={r['N']}", _time(s["explicit"]),
                    _time(s["sdpa"]), f"{r['explicit_over_sdpa']:.2f}x", "", check))
    for r in results["decode"]:
        s = r["seconds"]
        out.append(("decode: cache vs none", f"{r['new_tokens']} new", _time(s["cache"]),
                    _time(s["no_cache"]), f"{r['speedup']:.1f}x faster",
                    _target(results, "decode_speedup", new_tokens=r["new_tokens"]),
                    _tokens(r["tokens_identical"])))
    p = results["profile"]
    c, nc = p["cache"], p["no_cache"]
    out.append(("decode: cached step, late / early", f"{p['new_tokens']} new",
                _time(c["last"]), _time(c["first"]), f"{c['last_over_first']:.2f}x",
                _target(results, "cached_step_flat"), f"no cache: {nc['last_over_first']:.1f}x"))
    h = results["hf"]
    per = h["seconds_per_token"]
    for name, key, label in (("hf_loop", "attnlib_over_hf_loop", "HF loop"),
                             ("hf_generate", "attnlib_over_hf_generate", "HF generate")):
        target = _target(results, "attnlib_over_hf") if name == "hf_loop" else ""
        out.append((f"decode: attnlib / {label}", f"{h['new_tokens']} new",
                    f"{_time(per['attnlib'])}/tok", f"{_time(per[name])}/tok",
                    f"{h[key]:.2f}x", target, _tokens(h["tokens_identical"])))
    out.append(("decode: attnlib / eager PyTorch", f"{h['new_tokens']} new",
                f"{_time(per['attnlib'])}/tok", f"{_time(per['eager'])}/tok",
                f"{h['attnlib_over_eager']:.2f}x", "",
                f"eager / HF loop {h['eager_over_hf_loop']:.2f}x"))
    m = results["memory"]
    out.append(("memory: tiled vs explicit", f"N={m['N']}", _bytes(m["extra_bytes"]["tiled"]),
                _bytes(m["extra_bytes"]["explicit"]), f"{m['ratio']:.0f}x less",
                _target(results, "memory_ratio"), f"max|dY| {m['max_abs_diff']:.1e}"))
    for r in results["step"]:
        s, case = r["seconds"], f"G={r['G']}, N={r['N']}"
        out.append(("decode step: GQA / SDPA", case, _time(s["step"]), _time(s["sdpa"]),
                    f"{r['step_over_sdpa']:.2f}x", "",
                    "cached = causal" if r["outputs_agree"] else "OUTPUTS DIFFER"))
    for r in results["step"]:
        out.append(("decode step: bytes copied, N / N/2", f"G={r['G']}, N={r['N']}",
                    _bytes(r["bytes_copied"]), _bytes(r["bytes_copied_half"]),
                    f"{r['copied_ratio']:.2f}x", _target(results, "step_copies", N=r["N"]),
                    f"new K, V row {_bytes(r['row_bytes'])}"))
    a = results["mla"]
    s, case = a["seconds"], f"N={a['N']}, d_L={a['d_latent']}"
    agree = f"max|dY| {a['max_abs_diff']:.1e}"
    out.append(("MLA step: absorbed auto / explicit", case, _time(s["absorbed"]),
                _time(s["absorbed_explicit"]), f"{a['auto_over_explicit']:.2f}x",
                _target(results, "mla_auto", N=a["N"]), agree))
    out.append(("MLA step: rebuilt / absorbed", case, _time(s["rebuilt"]), _time(s["absorbed"]),
                f"{a['rebuilt_over_absorbed']:.1f}x slower",
                _target(results, "mla_absorbed_speedup", N=a["N"]), agree))
    cache = a["cache_bytes"]
    out.append(("MLA step: expanded / absorbed", case, _time(s["expanded"]),
                _time(s["absorbed"]), f"{a['expanded_over_absorbed']:.2f}x", "",
                f"cache {_bytes(cache['expanded'])} vs {_bytes(cache['latent'])}"))
    out.extend(_serving_rows(results))
    return out


def _ratio_range(ratio: float, spread: list[float]) -> str:
    """A median ratio with the range of the repeats' ratios: ``1.02x (0.97-1.08)``."""
    return f"{ratio:.2f}x ({spread[0]:.2f}-{spread[1]:.2f})"


def _serving_rows(results: dict) -> list[tuple[str, ...]]:
    """Chapter 11's rows: paged decoding, batching, speculative decoding, quantised caches."""
    v = results["serving"]
    out = []
    p = v["paged"]
    per = p["seconds_per_token"]
    out.append(("serving: paged / contiguous cache", f"{p['new_tokens']} new",
                f"{_time(per['paged'])}/tok", f"{_time(per['contiguous'])}/tok",
                _ratio_range(p["paged_over_contiguous"], p["ratio_range"]),
                _target(results, "paged_over_contiguous", new_tokens=p["new_tokens"]),
                _tokens(p["tokens_identical"])))
    out.append(("serving: paged, scattered blocks / contiguous", f"{p['new_tokens']} new",
                f"{_time(per['scattered'])}/tok", f"{_time(per['contiguous'])}/tok",
                _ratio_range(p["scattered_over_contiguous"], p["scattered_ratio_range"]), "",
                _tokens(p["tokens_identical"])))
    sb = p["step_bytes"]
    N, paged = sb["held"][1], sb["paged"]
    out.append(("serving: paged step, bytes allocated N / N/2", f"N={N}",
                _bytes(paged[1]), _bytes(paged[0]), f"{paged[1] / paged[0]:.2f}x",
                _target(results, "paged_step_bytes", N=N),
                f"contiguous {_bytes(sb['contiguous'][1])} vs {_bytes(sb['contiguous'][0])}; "
                f"scattered {_bytes(sb['scattered'][1])} vs {_bytes(sb['scattered'][0])}"))
    b = v["batching"]
    c, st = b["counts"]["continuous"], b["counts"]["static"]
    out.append(("serving: continuous / static batching", f"{b['requests']} requests",
                f"{c['tokens_per_pass']:.2f} tok/pass", f"{st['tokens_per_pass']:.2f} tok/pass",
                f"{b['continuous_over_static']:.2f}x", "",
                f"{c['forward_passes']} vs {st['forward_passes']} passes; "
                + ("outputs = alone" if b["outputs_identical"] else "OUTPUTS DIFFER")))
    u = b["budget"]
    on, res = u["on_demand"], u["reserved"]
    same = on["outputs_identical"] and res["outputs_identical"]
    out.append(("serving: blocks on demand / reserved", f"{u['n_blocks']} blocks",
                f"{on['mean_running']:.2f} in flight (peak {on['peak_running']})",
                f"{res['mean_running']:.2f} in flight (peak {res['peak_running']})",
                f"{u['in_flight_ratio']:.2f}x",
                _target(results, "blocks_in_flight", n_blocks=u["n_blocks"]),
                f"{on['forward_passes']} vs {res['forward_passes']} passes, "
                f"{on['preemptions']} preemptions; "
                + ("outputs = alone" if same else "OUTPUTS DIFFER")))
    for r in v["speculative"]:
        sec = r["seconds"]
        out.append(("serving: speculative / plain greedy", f"k={r['k']}",
                    _time(sec["speculative"]), _time(sec["plain"]),
                    f"{r['speculative_over_plain']:.2f}x", "",
                    f"kept {r['acceptance_rate']:.2f}, {r['target_passes_per_token']:.3f} "
                    "target passes/tok" + ("" if r["tokens_identical"] else ", TOKENS DIFFER")))
    for r in v["quantised"][1:]:
        float_bytes = v["quantised"][0]["cache_bytes"]
        out.append(("serving: quantised / float cache", r["setting"], _bytes(r["cache_bytes"]),
                    _bytes(float_bytes), f"{r['bytes_over_float']:.3f}x", "",
                    f"loss {r['loss']:.4f} ({r['loss_minus_float']:+.4f})"))
    h = v["hf_quantised"]
    agree = ("HF float = attnlib float" if h["float_agrees"] else "FLOAT LOSSES DIFFER")
    for r in h["rows"]:
        out.append((f"serving: HF QuantizedCache ({h['backend']})",
                    f"int{r['nbits']}, axis_key {r['axis_key']}, axis_value {r['axis_value']}",
                    "", f"loss {r['loss']:.4f}", f"{r['loss_minus_float']:+.4f} nats", "",
                    f"float {h['float_loss']:.4f}; {agree}"))
    return out


def notes(results: dict) -> list[str]:
    """What each benchmark ran, and how its ratio reads."""
    p, h, m, a = results["profile"], results["hf"], results["memory"], results["mla"]
    g = results["step"][0]
    config = ", ".join(f"{key} {value}" for key, value in h["config"].items())
    first, last = p["context_first"], p["context_last"]
    return [
        "attention: (1, 8, N, 64) float32, no mask; ratio = attnlib time / SDPA time.",
        f"decode: TinyDecoder ({config}), tied embeddings, {h['prompt_tokens']}-token prompt, "
        "greedy; cache vs none: ratio = time without cache / time with cache.",
        f"cached step: median time of one step over the last {p['window']} steps (context "
        f"{last[0]}-{last[1]}, attnlib column) and the first {p['window']} (context "
        f"{first[0]}-{first[1]}, baseline column); check: the same ratio without a cache.",
        f"attnlib / HF: the same weights in LlamaForCausalLM ({h['hf_attn_implementation']} "
        "attention), time per new token with the prompt included, under inference_mode; "
        "HF loop = forward with a DynamicCache and logits_to_keep=1, HF generate = "
        "generate(do_sample=False, use_cache=True); eager PyTorch = the same operations "
        "on the same weights as straight-line code (no modules, no checks), the least eager "
        "PyTorch spends per token on this model here.",
        f"memory: (1, 1, N, 64) float32, block_size {m['block_size']}; {m['method']}.",
        f"decode step: GroupedQueryAttention (d_in 2048, H {g['H']}, d_head {g['d_head']}, RoPE) "
        "with N tokens in the cache its new_cache(max_tokens) makes, one new token; baseline "
        "= SDPA (enable_gqa) on the same query and cached K, V; bytes copied = bytes written "
        "by cat, copy_, clone, repeat_interleave and the like, at N and at N/2 tokens held.",
        f"MLA step: MultiHeadLatentAttention (d_in 2048, H {a['H']}, d_head {a['d_head']}, "
        f"d_L {a['d_latent']}, no query latent, no RoPE) with N tokens cached, one new token; "
        "absorbed = absorbed=True, rebuilt = absorbed=False (K_h, V_h formed again), expanded "
        "= the same layer as MHA caching K_h and V_h; outputs compared with expanded.",
        f"serving: the trained {results['serving']['model']} model (4 layers, width 128, "
        f"4 heads of 16, RoPE, float32) on prompts from the evaluation set; paged: greedy "
        f"decoding from a {results['serving']['paged']['prompt_tokens']}-character prompt "
        f"through a PagedKVCache (blocks of {results['serving']['paged']['block_size']}) "
        "against the preallocated contiguous caches of generate, time per new token, the "
        "ratio taken within each of "
        f"{results['serving']['paged']['repeats']} interleaved repeats (median, and range in "
        "brackets); a fresh pool gives the sequence consecutive blocks (one run of the "
        "table, read as one view), a shuffled free list scattered ones (every block a run, "
        "read by an online softmax over runs); bytes allocated = bytes of every tensor the "
        "operations of one decoding step create, at N/2 and N tokens held; batching: "
        f"{results['serving']['batching']['requests']} seeded requests (prompts of 2-40, "
        "outputs of 4-48 characters, staggered arrivals), at most "
        f"{results['serving']['batching']['max_batch']} at once, prefill chunks of "
        f"{results['serving']['batching']['chunk']}, real tokens per forward pass (a count); "
        f"on demand / reserved: the same requests under a pool of "
        f"{results['serving']['batching']['budget']['n_blocks']} blocks, blocks taken as the "
        "sequences grow (preempting and recomputing when the pool runs out) against each "
        "request's prompt plus max_new_tokens reserved at admission, requests per forward "
        "pass (a count); "
        f"speculative: {results['serving']['draft']} proposes k characters, greedy, time for "
        f"{results['serving']['speculative'][0]['new_tokens']} new characters; quantised: "
        f"held-out loss over {results['serving']['eval_rows']} windows of the evaluation set, "
        "the control float32 first; HF QuantizedCache: the same weights in LlamaForCausalLM "
        "decoding the same windows one character at a time through "
        f"QuantizedCache(\"{results['serving']['hf_quantised']['backend']}\") (optimum-quanto "
        f"{results['serving']['hf_quantised']['optimum_quanto']}, groups of "
        f"{results['serving']['hf_quantised']['q_group_size']}, residual_length "
        f"{results['serving']['hf_quantised']['residual_length']}"
        f"{_unpack_note(results['serving']['hf_quantised'])}), loss minus the same "
        "decoding through a DynamicCache (its float loss, checked against attnlib's).",
        "times: medians over interleaved repeats.",
    ]


def _unpack_note(hf_quantised: dict) -> str:
    """How optimum-quanto's integers were unpacked: in PyTorch, or (runs recorded before the
    field existed) by its compiled extension."""
    if hf_quantised.get("unpack") == "pytorch":
        return ", integers unpacked in PyTorch rather than by its compiled extension"
    return ""


def machine_line(results: dict) -> str:
    """Where and when: device, CPU, threads, OS, versions and the date (UTC)."""
    machine = results["machine"]
    date = datetime.fromisoformat(results["date"]).strftime("%Y-%m-%d %H:%M UTC")
    gpu = f" ({machine['gpu']})" if machine.get("gpu") else ""
    return (
        f"Measured {date} on device {results['device']}{gpu}: {machine['cpu']} "
        f"({machine['logical_cpus']} logical CPUs, {results['threads']} torch threads), "
        f"{machine['os']}; Python {results['python']}, torch {results['torch']}, "
        f"transformers {results['transformers']}, attnlib {results['attnlib']}"
    )


# The row each target is judged on, by the target's name in the results.
TARGET_ROWS = {
    "attention_auto_over_sdpa": "attention auto / SDPA",
    "decode_speedup": "decode: cache vs none",
    "cached_step_flat": "decode: cached step, late / early",
    "attnlib_over_hf": "decode: attnlib / HF loop",
    "memory_ratio": "memory: tiled vs explicit",
    "step_copies": "decode step: bytes copied, N / N/2",
    "mla_auto": "MLA step: absorbed auto / explicit",
    "mla_absorbed_speedup": "MLA step: rebuilt / absorbed",
    "paged_over_contiguous": "serving: paged / contiguous cache",
    "paged_step_bytes": "serving: paged step, bytes allocated N / N/2",
    "blocks_in_flight": "serving: blocks on demand / reserved",
}


# What each target checks, in words; filled in from the bounds and sizes in the results.
TARGET_TEXT = {
    "attention_auto_over_sdpa": "attention auto / SDPA: at N = {N}, attention(impl=\"auto\") "
                                "takes at most {max:g} times SDPA's time",
    "decode_speedup": "decode: cache vs none: generating {new_tokens} tokens takes at least "
                      "{min:g} times longer without the cache than with it",
    "cached_step_flat": "decode: cached step, late / early: over {new_tokens} new tokens, the "
                        "median step of the last {window} takes at most {max:g} times the "
                        "median of the first {window}",
    "attnlib_over_hf": "decode: attnlib / HF loop: over {new_tokens} new tokens, attnlib's time "
                       "per token is at most {max:g} times that of Hugging Face's loop with a "
                       "DynamicCache",
    "memory_ratio": "memory: tiled vs explicit: at N = {N}, the explicit path's peak extra "
                    "memory is at least {min:g} times the tiled path's",
    "step_copies": "decode step: bytes copied, N / N/2: for every G, a decode step against "
                   "N = {N} cached tokens copies at most {max:g} times the bytes it copies "
                   "against N/2",
    "mla_auto": "MLA step: absorbed auto / explicit: at N = {N}, the absorbed path with "
                "impl=\"auto\" takes at most {max:g} times its impl=\"explicit\" time, so "
                "never more than {max:g} times the faster of the two",
    "mla_absorbed_speedup": "MLA step: rebuilt / absorbed: at N = {N}, rebuilding every cached "
                            "token's K_h and V_h takes at least {min:g} times the absorbed "
                            "path's time",
    "paged_over_contiguous": "serving: paged / contiguous cache: over {new_tokens} new "
                             "tokens, greedy decoding through a paged cache takes at most "
                             "{max:g} times the contiguous caches' time per token (the "
                             "median of the ratios of the repeats)",
    "paged_step_bytes": "serving: paged step, bytes allocated N / N/2: a decoding step "
                        "through a paged cache holding N = {N} tokens allocates at most "
                        "{max:g} times the bytes it allocates holding N/2",
    "blocks_in_flight": "serving: blocks on demand / reserved: under a pool of {n_blocks} "
                        "blocks, taking blocks as the sequences grow keeps at least {min:g} "
                        "times as many requests in flight, per forward pass on average, as "
                        "reserving each request's worst case",
}


def targets_text(results: dict) -> list[str]:
    """Each judged target as the check it is, with the verdict: what run.py compares."""
    out = []
    for name, t in results["targets"].items():
        text = TARGET_TEXT[name].format(**t)
        out.append(f"{text[0].upper()}{text[1:]}: {'met' if t['met'] else 'MISSED'}.")
    return out


def targets_line(results: dict) -> str:
    """``Targets: 4 of 5 met (missed: ...)``; targets are judged on full sizes only."""
    targets = results["targets"]
    if not targets:
        return "Targets: not judged (quick sizes)"
    missed = [TARGET_ROWS.get(name, name) for name, t in targets.items() if not t["met"]]
    line = f"Targets: {len(targets) - len(missed)} of {len(targets)} met"
    return line + (f" (missed: {'; '.join(missed)})" if missed else "")


# ---------------------------------------------------------------------------------------
# The schema of a results file
# ---------------------------------------------------------------------------------------


class Each:
    """Schema of a mapping whose keys are free and whose values all follow ``spec``."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec


# A schema is a type (float: any finite number, int, str, bool), None, a dict of required
# keys (more are allowed), a one-item list (a non-empty list of such items), Each(spec), or
# a tuple of alternatives.
_SECONDS = {"first": float, "last": float, "last_over_first": float}
_UNDER_BUDGET = {"peak_running": int, "mean_running": float, "forward_passes": int,
                 "tokens": int, "preemptions": int, "outputs_identical": bool}
SCHEMA: dict[str, Any] = {
    "schema": int,
    "date": str,
    "device": str,
    "python": str,
    "torch": str,
    "transformers": str,
    "attnlib": str,
    "threads": int,
    "quick": bool,
    "machine": {"cpu": str, "logical_cpus": int, "os": str, "gpu": (str, None)},
    "attention": [{
        "N": int,
        "seconds": {"sdpa": float, "auto": float, "explicit": float},
        "auto_over_sdpa": float,
        "explicit_over_sdpa": float,
        "max_abs_diff": float,
        "outputs_agree": bool,
    }],
    "decode": [{
        "new_tokens": int,
        "seconds": {"cache": float, "no_cache": float},
        "speedup": float,
        "tokens_identical": bool,
    }],
    "profile": {
        "new_tokens": int,
        "window": int,
        "context_first": [int],
        "context_last": [int],
        "cache": _SECONDS,
        "no_cache": _SECONDS,
        "tokens_identical": bool,
    },
    "hf": {
        "new_tokens": int,
        "prompt_tokens": int,
        "config": Each(int),
        "hf_attn_implementation": str,
        "seconds_per_token": {"attnlib": float, "hf_loop": float, "hf_generate": float,
                              "eager": float},
        "attnlib_over_hf_loop": float,
        "attnlib_over_hf_generate": float,
        "attnlib_over_eager": float,
        "eager_over_hf_loop": float,
        "tokens_identical": bool,
    },
    "memory": {
        "N": int,
        "block_size": int,
        "extra_bytes": {"explicit": int, "tiled": int},
        "ratio": float,
        "method": str,
        "max_abs_diff": float,
        "outputs_agree": bool,
    },
    "step": [{
        "G": int,
        "N": int,
        "H": int,
        "d_head": int,
        "seconds": {"step": float, "sdpa": float},
        "step_over_sdpa": float,
        "bytes_copied": int,
        "bytes_copied_half": int,
        "copied_ratio": float,
        "row_bytes": int,
        "outputs_agree": bool,
    }],
    "mla": {
        "N": int,
        "H": int,
        "d_head": int,
        "d_latent": int,
        "seconds": {"absorbed": float, "absorbed_explicit": float, "rebuilt": float,
                    "expanded": float},
        "auto_over_explicit": float,
        "rebuilt_over_absorbed": float,
        "expanded_over_absorbed": float,
        "cache_bytes": {"latent": int, "expanded": int},
        "max_abs_diff": float,
        "outputs_agree": bool,
    },
    "serving": {
        "model": str,
        "draft": str,
        "eval_rows": int,
        "paged": {
            "new_tokens": int,
            "prompt_tokens": int,
            "block_size": int,
            "repeats": int,
            "seconds_per_token": {"contiguous": float, "paged": float, "scattered": float},
            "paged_over_contiguous": float,
            "ratio_range": [float],
            "scattered_over_contiguous": float,
            "scattered_ratio_range": [float],
            "tokens_identical": bool,
            "step_bytes": {"held": [int], "contiguous": [int], "paged": [int],
                           "scattered": [int], "largest": Each([int])},
        },
        "batching": {
            "requests": int,
            "max_batch": int,
            "chunk": int,
            "counts": Each({"forward_passes": int, "tokens": int, "slots": int,
                            "tokens_per_pass": float}),
            "continuous_over_static": float,
            "outputs_identical": bool,
            "budget": {
                "n_blocks": int,
                "on_demand": _UNDER_BUDGET,
                "reserved": _UNDER_BUDGET,
                "in_flight_ratio": float,
            },
        },
        "speculative": [{
            "k": int,
            "new_tokens": int,
            "acceptance_rate": float,
            "target_passes_per_token": float,
            "seconds": {"speculative": float, "plain": float},
            "speculative_over_plain": float,
            "tokens_identical": bool,
        }],
        "quantised": [{
            "setting": str,
            "loss": float,
            "cache_bytes": int,
            "bytes_over_float": float,
            "loss_minus_float": float,
        }],
        "hf_quantised": {
            "backend": str,
            "optimum_quanto": str,
            "q_group_size": int,
            "residual_length": int,
            "float_loss": float,
            "float_agrees": bool,
            "rows": [{"nbits": int, "axis_key": int, "axis_value": int, "loss": float,
                      "loss_minus_float": float}],
        },
    },
    "targets": Each({"met": bool}),
    "checks_passed": bool,
}
_TYPE_NAMES = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}


def _describe(spec: Any) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_describe(s) for s in spec)
    if spec is None:
        return "null"
    if isinstance(spec, (dict, Each)):
        return "an object"
    if isinstance(spec, list):
        return "a non-empty list"
    return _TYPE_NAMES[spec]


def _fits(value: Any, spec: type) -> bool:
    if spec is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # true is not the integer 1 here
        return False
    if spec is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, spec)


def _check(value: Any, spec: Any, where: str, found: list[str]) -> None:
    if isinstance(spec, tuple):
        if not any(not _problems_at(value, s, where) for s in spec):
            found.append(f"{where}: expected {_describe(spec)}, got {value!r}")
    elif spec is None:
        if value is not None:
            found.append(f"{where}: expected null, got {value!r}")
    elif isinstance(spec, dict):
        if not isinstance(value, dict):
            found.append(f"{where}: expected an object, got {value!r}")
            return
        for key, sub in spec.items():
            if key not in value:
                found.append(f"{where}: missing field {key!r}")
            else:
                _check(value[key], sub, f"{where}.{key}", found)
    elif isinstance(spec, Each):
        if not isinstance(value, dict):
            found.append(f"{where}: expected an object, got {value!r}")
            return
        for key, item in value.items():
            _check(item, spec.spec, f"{where}.{key}", found)
    elif isinstance(spec, list):
        if not isinstance(value, list) or not value:
            found.append(f"{where}: expected a non-empty list, got {value!r}")
            return
        for i, item in enumerate(value):
            _check(item, spec[0], f"{where}[{i}]", found)
    elif not _fits(value, spec):
        found.append(f"{where}: expected {_describe(spec)}, got {value!r}")


def _problems_at(value: Any, spec: Any, where: str) -> list[str]:
    found: list[str] = []
    _check(value, spec, where, found)
    return found


def problems(results: Any) -> list[str]:
    """What is wrong with a results dictionary, one line each (empty when nothing is)."""
    found = _problems_at(results, SCHEMA, "results")
    if found:
        return found
    if results["schema"] != SCHEMA_VERSION:
        found.append(f"results.schema: this run.py writes schema {SCHEMA_VERSION}, the file "
                      f"has {results['schema']}; run benchmarks/run.py again")
    try:
        date = datetime.fromisoformat(results["date"])
    except ValueError:
        found.append(f"results.date: expected an ISO 8601 date, got {results['date']!r}")
    else:
        if date.utcoffset() is None:
            found.append(f"results.date: expected a time zone (UTC), got {results['date']!r}")
    for name, t in results["targets"].items():
        if not any(_fits(t.get(bound), float) for bound in ("max", "min")):
            found.append(f"results.targets.{name}: needs a number 'max' or 'min'")
    return found


def load(path: Path) -> dict:
    """Read and check a results file; ``ValueError`` saying what is wrong where, if anything."""
    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from None
    found = problems(results)
    if found:
        raise ValueError(f"{path}: not a results file of benchmarks/run.py:\n  "
                         + "\n  ".join(found))
    return results
