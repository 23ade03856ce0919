"""Run every attnlib benchmark side by side and print one table.

    python benchmarks/run.py                 # full sizes, default device
    python benchmarks/run.py --quick         # tiny sizes: a smoke test, not a measurement
    python benchmarks/run.py --device cuda --out results.json

1. ``attention(impl="auto")`` and ``impl="explicit"`` against PyTorch's
   ``scaled_dot_product_attention`` at ``(1, 8, N, 64)``, float32.
2. ``TinyDecoder(vocab 256, d_model 128, 2 layers, 4 heads)``: greedy decoding with and
   without a KV cache from an 8-token prompt; the tokens must be identical.
3. ``tiled_attention`` against the explicit path at ``(1, 1, 16384, 64)``: peak extra
   memory (see ``bench_memory.py`` for how it is measured); the outputs must agree.

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
import bench_memory
import torch

import attnlib

FULL = {"attention": [512, 1024, 2048, 4096], "decode": [128, 256, 512], "memory": 16384,
        "repeats": {"attention": 5, "decode": 3}}
QUICK = {"attention": [64, 128], "decode": [8, 16], "memory": 1024,
         "repeats": {"attention": 2, "decode": 1}}
TARGETS = {
    "attention_auto_over_sdpa": {"N": 2048, "max": 1.3},
    "decode_speedup": {"new_tokens": 512, "min": 8.0},
    "memory_ratio": {"N": 16384, "min": 20.0},
}


def _time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def _bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def collect(device: torch.device, quick: bool) -> dict:
    """Run the three benchmarks and return their raw numbers."""
    sizes = QUICK if quick else FULL
    results = {
        "device": str(device),
        "torch": torch.__version__,
        "attnlib": attnlib.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "quick": quick,
        "attention": bench_attention.run(device, sizes["attention"],
                                         sizes["repeats"]["attention"]),
        "decode": bench_decode.run(device, sizes["decode"], sizes["repeats"]["decode"]),
        "memory": bench_memory.run(device, sizes["memory"]),
    }
    targets = {}
    if not quick:
        goal = TARGETS["attention_auto_over_sdpa"]
        at = next(r for r in results["attention"] if r["N"] == goal["N"])
        targets["attention_auto_over_sdpa"] = at["auto_over_sdpa"] <= goal["max"]
        goal = TARGETS["decode_speedup"]
        dec = next(r for r in results["decode"] if r["new_tokens"] == goal["new_tokens"])
        targets["decode_speedup"] = dec["speedup"] >= goal["min"]
        targets["memory_ratio"] = results["memory"]["ratio"] >= TARGETS["memory_ratio"]["min"]
    results["targets"] = {name: {**TARGETS[name], "met": met} for name, met in targets.items()}
    results["checks_passed"] = (
        all(r["outputs_agree"] for r in results["attention"])
        and all(r["tokens_identical"] for r in results["decode"])
        and results["memory"]["outputs_agree"]
    )
    return results


def table(results: dict) -> str:
    """The results as one fixed-width text table."""
    t = results["targets"]
    header = ("benchmark", "case", "attnlib", "baseline", "ratio", "target", "check")
    rows = []
    for r in results["attention"]:
        s = r["seconds"]
        target = ""
        if r["N"] == 2048 and "attention_auto_over_sdpa" in t:
            target = f"<= 1.3: {_verdict(t['attention_auto_over_sdpa']['met'])}"
        check = f"max|dY| {r['max_abs_diff']:.1e}"
        rows.append(("attention auto / SDPA", f"N={r['N']}", _time(s["auto"]), _time(s["sdpa"]),
                     f"{r['auto_over_sdpa']:.2f}x", target, check))
        rows.append(("attention explicit / SDPA", f"N={r['N']}", _time(s["explicit"]),
                     _time(s["sdpa"]), f"{r['explicit_over_sdpa']:.2f}x", "", check))
    for r in results["decode"]:
        s = r["seconds"]
        target = ""
        if r["new_tokens"] == 512 and "decode_speedup" in t:
            target = f">= 8x: {_verdict(t['decode_speedup']['met'])}"
        rows.append(("decode: cache vs none", f"{r['new_tokens']} new", _time(s["cache"]),
                     _time(s["no_cache"]), f"{r['speedup']:.1f}x faster", target,
                     "tokens identical" if r["tokens_identical"] else "TOKENS DIFFER"))
    m = results["memory"]
    target = f">= 20x: {_verdict(t['memory_ratio']['met'])}" if "memory_ratio" in t else ""
    rows.append(("memory: tiled vs explicit", f"N={m['N']}", _bytes(m["extra_bytes"]["tiled"]),
                 _bytes(m["extra_bytes"]["explicit"]), f"{m['ratio']:.0f}x less", target,
                 f"max|dY| {m['max_abs_diff']:.1e}"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    title = (f"attnlib {results['attnlib']} benchmarks: device {results['device']}, "
             f"torch {results['torch']}, {results['threads']} threads"
             + (", QUICK sizes (smoke test only)" if results["quick"] else ""))
    notes = [
        "attention: (1, 8, N, 64) float32, no mask; ratio = attnlib time / SDPA time.",
        f"decode: TinyDecoder {bench_decode.CONFIG}, {bench_decode.PROMPT_LEN}-token prompt, "
        "greedy; ratio = time without cache / time with cache.",
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
