"""Run every attnlib benchmark side by side and print one table.

    python benchmarks/run.py                 # full sizes, default device
    python benchmarks/run.py --quick         # tiny sizes: a smoke test, not a measurement
    python benchmarks/run.py --device cuda --out results.json
    python benchmarks/run.py --save          # full sizes, into benchmarks/results/<device>.json

``--save`` writes the file the book's performance page shows (book/performance.md, rendered
by book/_ext/benchmarks_table.py); ``--out FILE`` writes the same JSON anywhere else. The
results record the machine (CPU model, logical CPUs, torch threads, OS, GPU), the versions
of Python, torch, transformers and attnlib, and the date; report.py formats them, for the
printed table and for the page alike, and checks their schema.

1. ``attention(impl="auto")`` and ``impl="explicit"`` against PyTorch's
   ``scaled_dot_product_attention`` at ``(1, 8, N, 64)``, float32.
2. ``TinyDecoder(vocab 256, d_model 128, 2 layers, 4 heads, SwiGLU 512, tied embeddings)``:
   greedy decoding with and without a KV cache from an 8-token prompt (the tokens must be
   identical), and the time of one decoding step early and late in a long generation.
3. The same TinyDecoder against Hugging Face's ``LlamaForCausalLM`` holding the same
   weights: greedy cached decoding, time per new token (the tokens must be identical);
   beside both, the same operations as straight-line PyTorch (``bench_hf.eager_greedy``),
   the least eager PyTorch spends per token on this model.
4. ``tiled_attention`` against the explicit path at ``(1, 1, 16384, 64)``: peak extra
   memory (see ``bench_memory.py`` for how it is measured); the outputs must agree.
5. One cached decode step of ``GroupedQueryAttention`` (H 32, d_head 64) against 8,192
   cached tokens, G = 32, 8, 1: time against SDPA, and the bytes it copies at N and N/2.
6. One decode step of ``MultiHeadLatentAttention`` (H 32, d_L 256) against 4,096 cached
   tokens: absorbed (``impl="auto"`` and ``"explicit"``), rebuilt and expanded.
7. Serving the trained ``book`` model (chapter 11): greedy decoding through a paged cache
   against contiguous ones (time per token, identical tokens), with its blocks consecutive
   and scattered, and the bytes a paged decoding step allocates at N / 2 and N tokens held;
   continuous against static batching of 24 requests (tokens per forward pass, each output
   equal to its run alone), and the same requests under a budget of 16 blocks, taken as
   the sequences grow against reserved for each request's worst case (requests in flight);
   greedy speculative decoding with ``book-draft`` at k = 2, 4, 8 (kept proposals, target
   passes per token, time against plain decoding, identical tokens); quantised caches
   (bytes and held-out loss), and Hugging Face's QuantizedCache (optimum-quanto) on the
   same weights and text.

The cached step counts as flat when the median step over the last 128 of 1,024 new
tokens takes at most 1.5 times the median over the first 128, while the context grows
from about 70 to about 970 tokens (about 14 times); without a cache it grows with it.
The targets (``TARGETS``, judged on full sizes only): ``attention(impl="auto")`` at most
1.3 times SDPA at N = 2,048; the cache at least 10 times faster over 1,024 new tokens; the
flat step above; attnlib's TinyDecoder at most 0.4 times Hugging Face's DynamicCache loop
per token; tiled attention at least 20 times less peak memory at N = 16,384; a decode step
copying at N = 8,192 no more bytes than at N = 4,096, for every G; absorbed MLA with
``impl="auto"`` at most 1.1 times its ``impl="explicit"`` (so never more than 1.1 times the
faster of the two); rebuilt MLA at least 5 times slower than absorbed; paged decoding at
most 1.1 times the contiguous cache's time per token over 256 new tokens (the median of the
ratios taken repeat by repeat), its decoding step allocating no more bytes at N = 288
tokens held than at N / 2; under 16 blocks, blocks taken on demand keeping at least 1.2
times as many requests in flight as reserving each request's worst case.

Times are medians over repeats in which the variants take turns. The script exits with
status 1 when a correctness check fails (outputs disagree, tokens differ); missing a
speed or memory target is reported in the table, not treated as an error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import bench_attention
import bench_decode
import bench_hf
import bench_memory
import bench_mla
import bench_serving
import bench_step
import report
import torch
import transformers

import attnlib

FULL = {
    "attention": [512, 1024, 2048, 4096],
    "decode": [256, 1024],
    "profile": {"new_tokens": 1024, "window": 128},
    "hf": 512,
    "memory": 16384,
    "step": {"N": 8192, "kv_heads": [32, 8, 1]},
    "mla": {"N": 4096, "d_latent": 256},
    "serving": {"paged": 256,
                "batching": {"requests": 24, "max_batch": 8, "chunk": 16, "n_blocks": 16},
                "speculative": {"new_tokens": 128, "ks": [2, 4, 8]}, "eval_rows": 64},
    "repeats": {"attention": 5, "decode": 3, "profile": 3, "hf": 5, "step": 5, "mla": 5,
                "serving": {"paged": 15, "speculative": 5}},
}
QUICK = {
    "attention": [64, 128],
    "decode": [8, 16],
    "profile": {"new_tokens": 24, "window": 8},
    "hf": 16,
    "memory": 1024,
    "step": {"N": 64, "kv_heads": [32, 8, 1]},
    "mla": {"N": 64, "d_latent": 256},
    "serving": {"paged": 8,
                "batching": {"requests": 4, "max_batch": 2, "chunk": 4, "n_blocks": 6},
                "speculative": {"new_tokens": 8, "ks": [2, 4, 8]}, "eval_rows": 2},
    "repeats": {"attention": 2, "decode": 1, "profile": 1, "hf": 1, "step": 1, "mla": 1,
                "serving": {"paged": 1, "speculative": 1}},
}
TARGETS = {
    "attention_auto_over_sdpa": {"N": 2048, "max": 1.3},
    "decode_speedup": {"new_tokens": 1024, "min": 10.0},
    "cached_step_flat": {"new_tokens": 1024, "window": 128, "max": 1.5},
    "attnlib_over_hf": {"new_tokens": 512, "max": 0.4},
    "memory_ratio": {"N": 16384, "min": 20.0},
    "step_copies": {"N": 8192, "max": 1.0},
    "mla_auto": {"N": 4096, "max": 1.1},
    "mla_absorbed_speedup": {"N": 4096, "min": 5.0},
    "paged_over_contiguous": {"new_tokens": 256, "max": 1.1},
    "paged_step_bytes": {"N": 288, "max": 1.0},
    "blocks_in_flight": {"n_blocks": 16, "min": 1.2},
}


def _cpu_model() -> str:
    """The CPU's model name as the operating system reports it."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    if sys.platform == "darwin":
        done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def machine(device: torch.device) -> dict:
    """The machine the benchmarks ran on (the torch threads are recorded beside it)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count() or 0,
        "os": platform.platform(),
        "gpu": gpu,
    }


def collect(device: torch.device, quick: bool) -> dict:
    """Run the benchmarks and return their raw numbers."""
    sizes = QUICK if quick else FULL
    reps = sizes["repeats"]
    results = {
        "schema": report.SCHEMA_VERSION,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attnlib": attnlib.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "quick": quick,
        "machine": machine(device),
        "attention": _part("attention", bench_attention.run, device, sizes["attention"],
                           reps["attention"]),
        "decode": _part("decode", bench_decode.run, device, sizes["decode"], reps["decode"]),
        "profile": _part("profile", bench_decode.profile, device, **sizes["profile"],
                         repeats=reps["profile"]),
        "hf": _part("hf", bench_hf.run, device, sizes["hf"], reps["hf"]),
        "memory": _part("memory", bench_memory.run, device, sizes["memory"]),
        "step": _part("step", bench_step.run, device, sizes["step"]["N"], reps["step"],
                      sizes["step"]["kv_heads"]),
        "mla": _part("mla", bench_mla.run, device, sizes["mla"]["N"],
                     sizes["mla"]["d_latent"], reps["mla"]),
        "serving": _part("serving", bench_serving.run, device, sizes["serving"],
                         reps["serving"]),
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
        goal = TARGETS["step_copies"]
        met["step_copies"] = all(r["copied_ratio"] <= goal["max"] for r in results["step"])
        mla = results["mla"]
        met["mla_auto"] = mla["auto_over_explicit"] <= TARGETS["mla_auto"]["max"]
        speedup = TARGETS["mla_absorbed_speedup"]["min"]
        met["mla_absorbed_speedup"] = mla["rebuilt_over_absorbed"] >= speedup
        paged = results["serving"]["paged"]
        met["paged_over_contiguous"] = (paged["paged_over_contiguous"]
                                        <= TARGETS["paged_over_contiguous"]["max"])
        held, allocated = paged["step_bytes"]["held"], paged["step_bytes"]["paged"]
        goal = TARGETS["paged_step_bytes"]
        met["paged_step_bytes"] = (held[-1] == goal["N"]
                                   and allocated[1] / allocated[0] <= goal["max"])
        budget = results["serving"]["batching"]["budget"]
        met["blocks_in_flight"] = (budget["n_blocks"] == TARGETS["blocks_in_flight"]["n_blocks"]
                                   and budget["in_flight_ratio"]
                                   >= TARGETS["blocks_in_flight"]["min"])
    results["targets"] = {name: {**TARGETS[name], "met": ok} for name, ok in met.items()}
    results["checks_passed"] = (
        all(r["outputs_agree"] for r in results["attention"])
        and all(r["tokens_identical"] for r in results["decode"])
        and results["profile"]["tokens_identical"]
        and results["hf"]["tokens_identical"]
        and results["memory"]["outputs_agree"]
        and all(r["outputs_agree"] for r in results["step"])
        and results["mla"]["outputs_agree"]
        and results["serving"]["paged"]["tokens_identical"]
        and results["serving"]["batching"]["outputs_identical"]
        and all(results["serving"]["batching"]["budget"][name]["outputs_identical"]
                for name in ("on_demand", "reserved"))
        and all(r["tokens_identical"] for r in results["serving"]["speculative"])
        and results["serving"]["hf_quantised"]["float_agrees"]
    )
    return results


def _part(name: str, run, *args, **kwargs):
    """``run(*args, **kwargs)``, after a line on stderr that names the part now running (a run
    stopped half-way, or a test's timeout, then says where it was)."""
    print(f"benchmark: {name} ...", file=sys.stderr, flush=True)
    return run(*args, **kwargs)


def table(results: dict) -> str:
    """The results as one fixed-width text table (the rows of the book's performance page)."""
    rows = report.rows(results)
    widths = [max(len(row[i]) for row in [report.HEADER, *rows])
              for i in range(len(report.HEADER))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    title = (f"attnlib {results['attnlib']} benchmarks"
             + (", QUICK sizes (smoke test only)" if results["quick"] else ""))
    rule = "-" * len(line(report.HEADER))
    return "\n".join([title, report.machine_line(results), rule, line(report.HEADER), rule,
                      *map(line, rows), rule, report.targets_line(results),
                      *report.targets_text(results), *report.notes(results)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="attnlib benchmarks, one table.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--device", default=None,
                        help="torch device; default attnlib.default_device()")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    parser.add_argument("--save", action="store_true",
                        help="also write the results to benchmarks/results/<device>.json, "
                             "the file the book's performance page shows (full sizes only)")
    args = parser.parse_args(argv)
    if args.save and args.quick:
        parser.error("--save records a measurement for the book: drop --quick "
                     "(or write a quick run elsewhere with --out FILE)")
    device = attnlib.default_device() if args.device is None else torch.device(args.device)
    results = collect(device, args.quick)
    found = report.problems(results)
    if found:  # a bug in this script: the page would refuse the file
        raise RuntimeError("results do not follow report.SCHEMA:\n" + "\n".join(found))
    print(table(results))
    text = json.dumps(results, indent=2) + "\n"
    paths = [args.out] if args.out is not None else []
    if args.save:
        paths.append(report.results_path(device.type))
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"results written to {path}")
    if not results["checks_passed"]:
        print("A correctness check failed: see the check column.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
