"""Intervals for the book's comparisons of trained models: seed noise and paired differences.

Two kinds of noise sit under a difference of held-out losses, and each comparison names the
one it faces:

- **Seed noise**: the same recipe trained again from another initial seed lands elsewhere.
  It is measured by training the recipe ``n`` times; :func:`seed_interval` gives the mean
  of the runs with its Student-t interval and the standard deviation ``s`` of one run, and
  :func:`gap_interval` the interval of a difference between models trained once (or a few
  times) each, assuming they share that noise. Two models trained from scratch with
  different layouts face this noise.
- **Evaluation noise**: one fixed model against another derived from it (a conversion, a
  quantised cache, a fine-tune from the same weights), scored on one fixed evaluation set.
  Seed noise cancels from such a pair, because both sides come from one run; what remains
  is which text was scored. :func:`paired_bootstrap` resamples the evaluation windows and
  gives an interval for the mean per-window difference. The windows are consecutive slices
  of one text, so it resamples blocks of consecutive windows, and
  :func:`serial_correlation` measures how much neighbours share. It says nothing about a
  second training run: that is checked by repeating the comparison on a second seed.

Example:
    >>> s = seed_interval([1.306, 1.318, 1.323, 1.317, 1.312])
    >>> s.n, round(s.estimate, 4), round(s.sd, 4)
    (5, 1.3152, 0.0065)
    >>> round(t_quantile(0.975, 4), 4)
    2.7764
    >>> g = gap_interval(1.337 - s.estimate, s, runs=(1, 5))
    >>> g.low > 0
    True

Lesson: 06_gqa, 07_mla, 09_frontier, 11_serving.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple

import torch

from attnlib._checks import check_positive_int

__all__ = ["Interval", "gap_interval", "paired_bootstrap", "seed_interval", "serial_correlation",
           "t_quantile"]


class Interval(NamedTuple):
    """An estimate with a ``level`` interval ``[low, high]``, from ``n`` observations.

    ``sd`` is the standard deviation of one observation (one training run for
    :func:`seed_interval`, one window's difference for :func:`paired_bootstrap`);
    ``method`` says what the interval is over.
    """

    estimate: float
    low: float
    high: float
    n: int
    sd: float
    level: float
    method: str

    @property
    def half_width(self) -> float:
        """Half the interval's width (the ``±`` of a symmetric interval)."""
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        """Whether zero lies outside the interval: the sign of the estimate is resolved."""
        return self.low > 0 or self.high < 0

    def format(self, digits: int = 3, signed: bool = False) -> str:
        """``"0.020 (95% interval -0.004 to 0.044; t, n = 5 seeds)"``.

        Each number keeps the sign it was computed with: a bound of -0.0003 prints as
        ``-0.000``, so an interval that holds zero never reads as one that starts there.
        Only an exact zero prints unsigned (``0.000``, or ``+0.000`` when ``signed``).
        """
        sign = "+" if signed else ""

        def show(x: float) -> str:  # + 0.0 turns an exact -0.0 into 0.0 and nothing else
            return f"{x + 0.0:{sign}.{digits}f}"

        return (f"{show(self.estimate)} ({self.level * 100:g}% interval {show(self.low)} to "
                f"{show(self.high)}; {self.method})")

    def __str__(self) -> str:
        return self.format()


def _regularised_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``, the regularised incomplete beta function, by its continued fraction
    (modified Lentz), for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast below the mean: use symmetry
        return 1.0 - _regularised_beta(1.0 - x, b, a)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a


def _t_cdf(t: float, df: float) -> float:
    """The Student-t distribution function with ``df`` degrees of freedom."""
    tail = 0.5 * _regularised_beta(df / (df + t * t), df / 2, 0.5)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: int | float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (float64 accuracy).

    ``t_quantile(0.975, n - 1)`` is the factor of a 95% interval from ``n`` observations:
    12.706 for two, 2.776 for five, 1.960 in the limit. Found by bisection on the
    distribution function, written with the regularised incomplete beta function.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1; got {p!r}")
    if not df > 0:
        raise ValueError(f"df must be positive; got {df!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2
        if _t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-14 * max(1.0, high):
            break
    return (low + high) / 2


def _check_level(level: object) -> float:
    if not isinstance(level, float) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a float strictly between 0 and 1; got {level!r}")
    return level


def seed_interval(values: Sequence[float], *, level: float = 0.95) -> Interval:
    """The mean of ``n`` training runs of one recipe, with its Student-t ``level`` interval.

    ``sd`` is the sample standard deviation of one run (``n - 1`` in the denominator): the
    seed noise. The interval is ``mean ± t_{n-1} sd / sqrt(n)``; it assumes the runs are
    independent draws from one normal distribution, which a handful of seeds cannot check.
    With ``n = 2`` the factor ``t_1`` is 12.7: one pair of seeds says almost nothing.

    Args:
        values: one number per run (a held-out loss), at least two.
        level: the coverage, 0.95 by default.
    """
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"values must hold at least two runs; got {len(values)}")
    _check_level(level)
    n = len(values)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, sd, level, f"t, n = {n} seeds")


def gap_interval(gap: float, seeds: Interval, *, runs: tuple[int, int] = (1, 1),
                 level: float | None = None) -> Interval:
    """A difference between two recipes' losses, with the interval seed noise allows.

    ``gap`` is the mean of ``runs[0]`` runs of one recipe minus the mean of ``runs[1]``
    runs of the other. If both recipes have the seed noise ``seeds.sd`` (measured from
    ``seeds.n`` runs of one of them, :func:`seed_interval`), the gap's standard error is
    ``sd sqrt(1/runs[0] + 1/runs[1])`` and its interval uses ``t_{n-1}``. A model trained
    once against the mean of the ``n`` seeds is ``runs=(1, n)``; two models trained once
    each are ``runs=(1, 1)``.

    Args:
        gap: the difference of the two means.
        seeds: the seed noise, from :func:`seed_interval`.
        runs: how many runs each side's mean is over.
        level: the coverage; ``seeds.level`` by default.
    """
    if not isinstance(seeds, Interval):
        raise TypeError(f"seeds must be an Interval from seed_interval; got {type(seeds).__name__}")
    for name, r in zip(("runs[0]", "runs[1]"), runs, strict=True):
        check_positive_int(name, r)
    level = seeds.level if level is None else _check_level(level)
    se = seeds.sd * math.sqrt(1 / runs[0] + 1 / runs[1])
    half = t_quantile(0.5 + level / 2, seeds.n - 1) * se
    return Interval(float(gap), gap - half, gap + half, seeds.n, seeds.sd, level,
                    f"t, seed noise from n = {seeds.n} seeds, runs {runs[0]} and {runs[1]}")


def serial_correlation(x: torch.Tensor | Sequence[float], lag: int = 1) -> float:
    """The lag-``lag`` autocorrelation of a sequence: how much neighbours move together.

    ``sum_t (x_t - mean)(x_{t+lag} - mean) / sum_t (x_t - mean)^2``, the usual estimate
    (its denominator over all ``W`` terms keeps it between -1 and 1). For independent values
    it scatters around ``-1/W`` with a standard deviation of about ``1/sqrt(W)``; a first-order
    autoregression ``x_t = phi x_{t-1} + noise`` gives about ``phi`` at lag 1.

    Args:
        x: ``(W,)`` values in order, for example the per-window differences of two models.
        lag: how far apart the paired values sit, ``1 <= lag < W``.
    """
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    check_positive_int("lag", lag)
    if not lag < x.numel():
        raise ValueError(f"lag must be smaller than the number of values ({x.numel()}); got {lag}")
    centred = x - x.mean()
    return float((centred[lag:] * centred[:-lag]).sum() / centred.square().sum())


def paired_bootstrap(a: torch.Tensor | Sequence[float], b: torch.Tensor | Sequence[float], *,
                     level: float = 0.95, resamples: int = 10_000, seed: int = 0,
                     block: int | None = None) -> Interval:
    """The mean of ``b - a`` over paired evaluation windows, with a block bootstrap interval.

    ``a[i]`` and ``b[i]`` are two models' losses on window ``i`` of one evaluation set, the
    windows in the order of the text. Each draw resamples the ``W`` differences in blocks of
    ``block`` consecutive windows, the same draw for both models, which keeps the pairing: it
    picks ``ceil(W / block)`` starts uniformly among the ``W`` windows, takes ``block``
    windows from each, wrapping from the last window to the first, and keeps the first ``W``
    (the circular block bootstrap of Politis and Romano, 1992). The interval is the
    percentile interval of the resampled mean differences.

    Why blocks: consecutive windows of one text can share what makes them hard for one model
    and not the other, and resampling windows one by one would treat them as independent,
    which narrows the interval when neighbours move together
    (:func:`serial_correlation` measures it). A block keeps that dependence inside it. Every
    window lies in ``block`` of the ``W`` circular blocks, so the resampled means centre on the
    observed mean. ``block=None`` takes ``round(W ** (1/3))`` windows, 4 of 64, fixed by ``W``
    before any data is seen. ``W^(1/3)`` is the order of block length that Hall, Horowitz
    and Jing (1995) found best for estimating the variance of a mean; for the quantiles of a
    two-sided interval their order is ``W^(1/5)`` (2 of 64), and the constant in front (here
    1) is a convention, not a result. With as few windows as the book's 64, percentile
    intervals from blocks run a little narrower than their level. ``block=1``
    is the ordinary bootstrap of independent windows.

    The interval measures how much the result depends on which text was scored, for these
    two fixed models; a second training run is a separate question.

    Args:
        a, b: ``(W,)`` per-window losses, ``W >= 2``, in the order of the text.
        level: the coverage, 0.95 by default.
        resamples: bootstrap draws.
        seed: seed of the draws, so that the interval is the same on every run.
        block: consecutive windows per block, ``1 <= block <= W``; ``round(W ** (1/3))``
            when None.
    """
    a = torch.as_tensor(a, dtype=torch.float64).flatten()
    b = torch.as_tensor(b, dtype=torch.float64).flatten()
    if a.shape != b.shape or a.numel() < 2:
        raise ValueError(f"a and b must hold the same number (at least 2) of per-window "
                         f"losses; got {a.numel()} and {b.numel()}")
    check_positive_int("resamples", resamples)
    _check_level(level)
    d = b - a  # (W,)
    w = d.numel()
    if block is None:
        block = max(1, round(w ** (1 / 3)))
    check_positive_int("block", block)
    if block > w:
        raise ValueError(f"block must be at most the number of windows ({w}); got {block}")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, w, (resamples, -(-w // block)), generator=g)  # (resamples, k)
    draws = (starts[:, :, None] + torch.arange(block)).flatten(1)[:, :w] % w  # (resamples, W)
    means = d[draws].mean(dim=1)  # (resamples,)
    tails = torch.tensor([0.5 - level / 2, 0.5 + level / 2], dtype=torch.float64)
    low, high = torch.quantile(means, tails).tolist()
    return Interval(d.mean().item(), low, high, w, d.std().item(), level,
                    f"paired bootstrap over {w} windows in blocks of {block}")
