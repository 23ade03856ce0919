"""Benchmark: attnlib's Triton FlashAttention-2 kernels against PyTorch's SDPA, on a GPU.

    python benchmarks/bench_kernels.py                 # on a CUDA GPU: the full grid, saved
    python benchmarks/bench_kernels.py --quick         # N 512 and 4,096 only
    python benchmarks/bench_kernels.py --out FILE      # save elsewhere

For float16 and bfloat16, head widths 64 and 128, causal and not, and N from 512 to 16,384
(B = 16,384 / N sequences of H = 16 heads, so every N times the same number of tokens), it
times :func:`attnlib.kernels.triton_flash.flash_attention` and
``torch.nn.functional.scaled_dot_product_attention``, forward and forward+backward, with
``triton.testing.do_bench`` (the median of its repeats, with the 20th and 80th percentiles as
the range), after checking that both compute the same output. The results, with the card,
the date and the versions, go to ``benchmarks/results/kernels/<card>.json`` (a folder of its
own: the performance page reads the files of ``benchmarks/results/``); lesson 13 quotes them
only from such a file.

Without CUDA there is nothing to time: Triton's interpreter runs each program as Python, so
its times say nothing about the kernels. The script says so and exits with status 0, writing
nothing. It exits with status 1 when a kernel's output disagrees with SDPA's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).resolve().parent / "results" / "kernels"  # beside the page's files
SCHEMA = 1
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HEADS = 16384, 16
# The tolerance of the output check, per dtype: 16-bit inputs and outputs, float32 sums.
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2}


def cases(quick: bool) -> list[dict]:
    """The grid: dtype, head width, causal, N."""
    lengths = (512, 4096) if quick else LENGTHS
    return [{"dtype": dtype, "d": d, "causal": causal, "N": n}
            for dtype in (torch.float16, torch.bfloat16) for d in (64, 128)
            for causal in (False, True) for n in lengths]


def _timing(ms: tuple[float, float, float]) -> dict:
    median, low, high = ms
    return {"median_ms": median, "low_ms": low, "high_ms": high}


def run_case(case: dict, block_m: int, block_n: int) -> dict:
    """Time one point of the grid; raise AssertionError when the outputs disagree."""
    import triton.testing

    from attnlib.kernels.triton_flash import flash_attention

    n, d, dtype, causal = case["N"], case["d"], case["dtype"], case["causal"]
    batch = max(1, TOKENS // n)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(batch, HEADS, n, d, device="cuda", dtype=dtype, generator=g)
                   for _ in range(4))

    def kernel(*x):
        return flash_attention(*x, causal=causal, block_m=block_m, block_n=block_n)

    def sdpa(*x):
        return F.scaled_dot_product_attention(*x, is_causal=causal)

    error = (kernel(q, k, v).float() - sdpa(q, k, v).float()).abs().max().item()
    if not error <= TOLERANCE[dtype]:
        raise AssertionError(f"{case}: the kernel's output is {error:.3g} from SDPA's")
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def both(fn):
        def step():
            out = fn(*leaves)
            torch.autograd.grad(out, leaves, do)
        return step

    row = {"dtype": str(dtype).removeprefix("torch."), "d": d, "causal": causal, "N": n,
           "B": batch, "H": HEADS, "block_m": block_m, "block_n": block_n,
           "max_abs_error_vs_sdpa": error}
    quantiles = [0.5, 0.2, 0.8]
    for name, fn in (("kernel", kernel), ("sdpa", sdpa)):
        row[f"{name}_forward"] = _timing(triton.testing.do_bench(
            lambda fn=fn: fn(q, k, v), quantiles=quantiles))
        row[f"{name}_forward_backward"] = _timing(triton.testing.do_bench(
            both(fn), quantiles=quantiles))
    for part in ("forward", "forward_backward"):
        row[f"ratio_{part}"] = (row[f"kernel_{part}"]["median_ms"]
                                / row[f"sdpa_{part}"]["median_ms"])
    return row


def card_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 512 and 4,096 only")
    parser.add_argument("--out", type=Path, help="where to write the JSON results")
    parser.add_argument("--blocks", type=int, nargs=2, default=(64, 64),
                        metavar=("BLOCK_M", "BLOCK_N"), help="the kernels' tile (default 64 64)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernels: no CUDA GPU here, so nothing is timed and nothing is written. "
              "Triton's interpreter runs each program as Python; its times would measure the "
              "interpreter, not the kernels.")
        return 0
    from attnlib.analysis.timing import machine

    rows = []
    for case in cases(args.quick):
        try:
            row = run_case(case, *args.blocks)
        except AssertionError as exc:
            print(f"bench_kernels: {exc}", file=sys.stderr)
            return 1
        rows.append(row)
        print(f"{row['dtype']:8s} d={row['d']:3d} causal={row['causal']!s:5} N={row['N']:5d}: "
              f"forward {row['kernel_forward']['median_ms']:8.3f} ms "
              f"({row['ratio_forward']:.2f}x SDPA), forward+backward "
              f"{row['kernel_forward_backward']['median_ms']:8.3f} ms "
              f"({row['ratio_forward_backward']:.2f}x SDPA)", flush=True)
    import triton

    name = torch.cuda.get_device_name()
    result = {"schema": SCHEMA, "date": datetime.date.today().isoformat(),
              "machine": machine("cuda"), "card": name, "torch": torch.__version__,
              "triton": triton.__version__, "quick": args.quick,
              "timer": "triton.testing.do_bench: median, 20th and 80th percentiles",
              "rows": rows}
    out = args.out or RESULTS / f"{card_slug(name)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
