"""Benchmark 3: peak extra memory of tiled (online-softmax) attention against the explicit path.

The explicit path holds ``N x N`` logits and weights; :func:`attnlib.tiled_attention` holds
an ``N x block_size`` slice at a time. Each variant runs in a fresh Python process, so
neither sees memory the other left behind, and the process reports:

* on CUDA: ``torch.cuda.max_memory_allocated()`` minus the memory allocated before the call;
* on CPU (torch's allocations are invisible to tracemalloc): the process's peak resident
  set size after the call minus its resident set size before it. On Linux the peak is
  first reset through ``/proc/self/clear_refs``, so an earlier peak (importing torch)
  cannot hide a small one, and read as ``VmHWM`` from ``/proc/self/status``. Not from
  ``getrusage(RUSAGE_SELF).ru_maxrss``: across fork and exec a child inherits its
  parent's peak there, so a probe started by a large parent would report the parent's.
  Elsewhere ``ru_maxrss`` before and after is the (approximate) fallback.

Run as a script it is that fresh process: ``bench_memory.py --variant tiled --n 16384
--device cpu --save Y.pt`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from attnlib import attention, tiled_attention

D_HEAD, BLOCK_SIZE = 64, 128


def _proc_status_bytes(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, Linux only."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS; False where that is impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (Linux >= 4.0)
        _proc_status_bytes("VmHWM")
    except (OSError, AttributeError):
        return False
    return True


def _ru_maxrss_bytes() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def probe(variant: str, n: int, device: torch.device, save: Path | None) -> dict:
    """Run one variant at ``(1, 1, n, 64)`` and measure the peak memory it adds."""
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, 1, n, D_HEAD, generator=gen).to(device) for _ in range(3))

    def call(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        if variant == "tiled":
            return tiled_attention(Q, K, V, block_size=BLOCK_SIZE)
        return attention(Q, K, V, impl="explicit")

    with torch.no_grad():
        call(Q[..., :256, :], K[..., :256, :], V[..., :256, :])  # load kernels, start threads
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            Y = call(Q, K, V)
            torch.cuda.synchronize(device)
            extra = torch.cuda.max_memory_allocated(device) - before
            method = "torch.cuda.max_memory_allocated minus allocated before, fresh process"
        else:
            if _reset_peak_rss():
                before = _proc_status_bytes("VmRSS")
                Y = call(Q, K, V)
                extra = _proc_status_bytes("VmHWM") - before
                method = ("peak RSS (VmHWM, reset via /proc/self/clear_refs) minus RSS before, "
                          "fresh process")
            else:
                before = _ru_maxrss_bytes()
                Y = call(Q, K, V)
                extra = _ru_maxrss_bytes() - before
                method = "ru_maxrss after minus before (approximate), fresh process"
    if save is not None:
        torch.save(Y.cpu(), save)
    return {"variant": variant, "n": n, "extra_bytes": int(extra), "method": method}


def run(device: torch.device, n: int) -> dict:
    """Probe both variants in fresh processes and compare their outputs."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("explicit", "tiled"):
            save = Path(tmp) / f"{variant}.pt"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--variant", variant,
                   "--n", str(n), "--device", str(device), "--save", str(save)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"memory probe {variant!r} failed:\n{done.stderr}")
            results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant]["Y"] = torch.load(save)
    Y_explicit, Y_tiled = results["explicit"].pop("Y"), results["tiled"].pop("Y")
    diff = (Y_explicit - Y_tiled).abs().max().item()
    explicit, tiled = results["explicit"]["extra_bytes"], results["tiled"]["extra_bytes"]
    return {
        "N": n,
        "shape": [1, 1, n, D_HEAD],
        "block_size": BLOCK_SIZE,
        "extra_bytes": {"explicit": explicit, "tiled": tiled},
        "ratio": explicit / max(tiled, 1),
        "method": results["tiled"]["method"],
        "max_abs_diff": diff,
        "outputs_agree": diff <= 1e-4,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=["explicit", "tiled"], required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    print(json.dumps(probe(args.variant, args.n, torch.device(args.device), args.save)))


if __name__ == "__main__":
    main()
