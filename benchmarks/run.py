"""Run every attnlib benchmark side by side and print one table.

    python benchmarks/run.py                 # full sizes, default device
    python benchmarks/run.py --quick         # tiny sizes: a smoke test, not a measurement
    python benchmarks/run.py --device cuda --out results.json

1. ``attention(impl="auto")`` and ``impl="explicit"`` against PyTorch's
   ``scaled_dot_product_attention`` at ``(1, 8, N, 64)``, float32.
2. ``TinyDecoder(vocab 256, d_model 128, 2 layers, 4 heads, SwiGLU 512, tied embeddings)``:
   greedy decoding with and without a KV cache from an 8-token prompt (the tokens must be
   identical), and the time of one decoding step early and late in a long generation.
3. The same TinyDecoder against Hugging Face's ``LlamaForCausalLM`` holding the same
   weights: greedy cached decoding, time per new token (the tokens must be identical).
4. ``tiled_attention`` against the explicit path at ``(1, 1, 16384, 64)``: peak extra
   memory (see ``bench_memory.py`` for how it is measured); the outputs must agree.

The cached step counts as flat when the median step over the last 128 of 1,024 new
tokens takes at most 1.5 times the median over the first 128, while the context grows
from about 70 to about 970 tokens (about 14 times); without a cache it grows with it.

Times are medians over repeats in which the variants take turns. The script exits with
status 1 when a correctness check fails (outputs disagree, tokens differ); missing a
speed or memory target is reported in the table, not treated as an error.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import bench_attention
import bench_decode
import bench_hf
import bench_memory
import torch
import transformers

import attnlib

FULL = {
    "attention": [512, 1024, 2048, 4096],
    "decode": [256, 1024],
    "profile": {"new_tokens": 1024, "window": 128},
    "hf": 512,
    "memory": 16384,
    "repeats": {"attention": 5, "decode": 3, "profile": 3, "hf": 5},
}
QUICK = {
    "attention": [64, 128],
    "decode": [8, 16],
    "profile": {"new_tokens": 24, "window": 8},
    "hf": 16,
    "memory": 1024,
    "repeats": {"attention": 2, "decode": 1, "profile": 1, "hf": 1},
}
TARGETS = {
    "attention_auto_over_sdpa": {"N": 2048, "max": 1.3},
    "decode_speedup": {"new_tokens": 1024, "min": 10.0},
    "cached_step_flat": {"new_tokens": 1024, "window": 128, "max": 1.5},
    "attnlib_over_hf": {"new_tokens": 512, "max": 0.8},
    "memory_ratio": {"N": 16384, "min": 20.0},
}


def _time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def _bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _target(results: dict, name: str, text: str) -> str:
    """``text: met`` (or ``MISSED``) when the target was checked in this run, else blank."""
    t = results["targets"].get(name)
    return "" if t is None else f"{text}: {'met' if t['met'] else 'MISSED'}"


def collect(device: torch.device, quick: bool) -> dict:
    """Run the benchmarks and return their raw numbers."""
    sizes = QUICK if quick else FULL
    reps = sizes["repeats"]
    results = {
        "device": str(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attnlib": attnlib.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "quick": quick,
        "attention": bench_attention.run(device, sizes["attention"], reps["attention"]),
        "decode": bench_decode.run(device, sizes["decode"], reps["decode"]),
        "profile": bench_decode.profile(device, **sizes["profile"], repeats=reps["profile"]),
        "hf": bench_hf.run(device, sizes["hf"], reps["hf"]),
        "memory": bench_memory.run(device, sizes["memory"]),
    }
    met = {}
    if not quick:
        goal = TARGETS["attention_auto_over_sdpa"]
        at = next(r for r in results["attention"] if r["N"] == goal["N"])
        met["attention_auto_over_sdpa"] = at["auto_over_sdpa"] <= goal["max"]
        goal = TARGETS["decode_speedup"]
        dec = next(r for r in results["decode"] if r["new_tokens"] == goal["new_tokens"])
        met["decode_speedup"] = dec["speedup"] >= goal["min"]
        prof = results["profile"]["cache"]
        met["cached_step_flat"] = prof["last_over_first"] <= TARGETS["cached_step_flat"]["max"]
        ratio = results["hf"]["attnlib_over_hf_loop"]
        met["attnlib_over_hf"] = ratio <= TARGETS["attnlib_over_hf"]["max"]
        met["memory_ratio"] = results["memory"]["ratio"] >= TARGETS["memory_ratio"]["min"]
    results["targets"] = {name: {**TARGETS[name], "met": ok} for name, ok in met.items()}
    results["checks_passed"] = (
        all(r["outputs_agree"] for r in results["attention"])
        and all(r["tokens_identical"] for r in results["decode"])
        and results["profile"]["tokens_identical"]
        and results["hf"]["tokens_identical"]
        and results["memory"]["outputs_agree"]
    )
    return results


def _tokens(ok: bool) -> str:
    return "tokens identical" if ok else "TOKENS DIFFER"


def table(results: dict) -> str:
    """The results as one fixed-width text table."""
    header = ("benchmark", "case", "attnlib", "baseline", "ratio", "target", "check")
    rows = []
    for r in results["attention"]:
        s = r["seconds"]
        target = ""
        if r["N"] == TARGETS["attention_auto_over_sdpa"]["N"]:
            target = _target(results, "attention_auto_over_sdpa", "<= 1.3")
        check = f"max|dY| {r['max_abs_diff']:.1e}"
        rows.append(("attention auto / SDPA", f"N={r['N']}", _time(s["auto"]), _time(s["sdpa"]),
                     f"{r['auto_over_sdpa']:.2f}x", target, check))
        rows.append(("attention explicit / SDPA", f"N={r['N']}", _time(s["explicit"]),
                     _time(s["sdpa"]), f"{r['explicit_over_sdpa']:.2f}x", "", check))
    for r in results["decode"]:
        s = r["seconds"]
        target = ""
        if r["new_tokens"] == TARGETS["decode_speedup"]["new_tokens"]:
            target = _target(results, "decode_speedup", ">= 10x")
        rows.append(("decode: cache vs none", f"{r['new_tokens']} new", _time(s["cache"]),
                     _time(s["no_cache"]), f"{r['speedup']:.1f}x faster", target,
                     _tokens(r["tokens_identical"])))
    p = results["profile"]
    c, nc = p["cache"], p["no_cache"]
    rows.append(("decode: cached step, late / early", f"{p['new_tokens']} new",
                 _time(c["last"]), _time(c["first"]), f"{c['last_over_first']:.2f}x",
                 _target(results, "cached_step_flat", "<= 1.5"),
                 f"no cache: {nc['last_over_first']:.1f}x"))
    h = results["hf"]
    per = h["seconds_per_token"]
    for name, key, label in (("hf_loop", "attnlib_over_hf_loop", "HF loop"),
                             ("hf_generate", "attnlib_over_hf_generate", "HF generate")):
        target = _target(results, "attnlib_over_hf", "<= 0.8") if name == "hf_loop" else ""
        rows.append((f"decode: attnlib / {label}", f"{h['new_tokens']} new",
                     f"{_time(per['attnlib'])}/tok", f"{_time(per[name])}/tok",
                     f"{h[key]:.2f}x", target, _tokens(h["tokens_identical"])))
    m = results["memory"]
    rows.append(("memory: tiled vs explicit", f"N={m['N']}", _bytes(m["extra_bytes"]["tiled"]),
                 _bytes(m["extra_bytes"]["explicit"]), f"{m['ratio']:.0f}x less",
                 _target(results, "memory_ratio", ">= 20x"), f"max|dY| {m['max_abs_diff']:.1e}"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    title = (f"attnlib {results['attnlib']} benchmarks: device {results['device']}, "
             f"torch {results['torch']}, transformers {results['transformers']}, "
             f"{results['threads']} threads"
             + (", QUICK sizes (smoke test only)" if results["quick"] else ""))
    first, last = p["context_first"], p["context_last"]
    notes = [
        "attention: (1, 8, N, 64) float32, no mask; ratio = attnlib time / SDPA time.",
        f"decode: TinyDecoder {bench_decode.CONFIG}, tied embeddings, "
        f"{bench_decode.PROMPT_LEN}-token prompt, greedy; cache vs none: ratio = time "
        "without cache / time with cache.",
        f"cached step: median time of one step over the last {p['window']} steps (context "
        f"{last[0]}-{last[1]}, attnlib column) and the first {p['window']} (context "
        f"{first[0]}-{first[1]}, baseline column); check: the same ratio without a cache.",
        f"attnlib / HF: the same weights in LlamaForCausalLM ({h['hf_attn_implementation']} "
        "attention), time per new token with the prompt included, under inference_mode; "
        "HF loop = forward with a DynamicCache and logits_to_keep=1, HF generate = "
        "generate(do_sample=False, use_cache=True).",
        f"memory: (1, 1, N, 64) float32, block_size {m['block_size']}; {m['method']}.",
        "times: medians over interleaved repeats.",
    ]
    rule = "-" * len(line(header))
    return "\n".join([title, rule, line(header), rule, *map(line, rows), rule, *notes])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="attnlib benchmarks, one table.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--device", default=None,
                        help="torch device; default attnlib.default_device()")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args(argv)
    device = attnlib.default_device() if args.device is None else torch.device(args.device)
    results = collect(device, args.quick)
    print(table(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if not results["checks_passed"]:
        print("A correctness check failed: see the check column.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
