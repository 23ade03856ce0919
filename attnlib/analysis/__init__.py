"""What attention costs and how to approximate it: bytes, multiply-adds, tiles, estimators.

- ``memory``      cache byte accounting and published model presets      (lessons 00, 05-07)
- ``costs``       multiply-adds of decoding, MLA's decoding paths         (01, 05, 07)
- ``flash``       exact tiled attention with an online softmax            (09)
- ``approx``      linear attention, random features, top-k, delta rule    (09)
- ``randomised``  sampling, sketching and low-rank estimators             (10)
- ``timing``      interleaved wall-clock timings with their range, and the machine (05, 13, 14)
- ``intervals``   seed noise and paired bootstrap intervals of loss differences (06, 07, 11)

- ``experiments`` the lessons' experiments as tables, one module per chapter (00-10);
                  loaded on first use (they need pandas)

Each name lives in its module (``attnlib.analysis.memory.LLAMA3_8B``).
"""

import importlib

from attnlib.analysis import approx, costs, flash, intervals, memory, randomised, timing

__all__ = ["approx", "costs", "experiments", "flash", "intervals", "memory", "randomised",
           "timing"]


def __getattr__(name: str):
    if name == "experiments":  # loaded on first use: `import attnlib` needs no pandas
        return importlib.import_module("attnlib.analysis.experiments")
    raise AttributeError(f"module 'attnlib.analysis' has no attribute {name!r}")
