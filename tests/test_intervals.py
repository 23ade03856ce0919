"""attnlib.analysis.intervals against closed forms, explicit loops and simulated coverage."""

from __future__ import annotations

import doctest
import math
import statistics

import pytest
import torch

import attnlib.analysis.intervals as iv


def _t_closed_form(p: float, df: int) -> float:
    """Student-t quantiles with closed forms: df = 1 (Cauchy), 2 and 4."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    alpha = 4 * p * (1 - p)  # df == 4
    q = math.cos(math.acos(math.sqrt(alpha)) / 3) / math.sqrt(alpha)
    return math.copysign(2 * math.sqrt(q - 1), p - 0.5)


@pytest.mark.parametrize("df", [1, 2, 4])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.025])
def test_t_quantile_matches_the_closed_forms(p: float, df: int) -> None:
    assert iv.t_quantile(p, df) == pytest.approx(_t_closed_form(p, df), rel=1e-10, abs=1e-12)


def test_t_quantile_tends_to_the_normal_and_matches_the_table() -> None:
    assert iv.t_quantile(0.975, 10**7) == pytest.approx(
        statistics.NormalDist().inv_cdf(0.975), rel=1e-6)
    # Printed tables: t_{0.975} with 3, 9 and 30 degrees of freedom.
    for df, table in ((3, 3.182446), (9, 2.262157), (30, 2.042272)):
        assert iv.t_quantile(0.975, df) == pytest.approx(table, abs=2e-6)


def test_t_distribution_function_matches_the_integrated_density() -> None:
    df = 3
    front = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def density(x: float) -> float:
        return front * (1 + x * x / df) ** (-(df + 1) / 2)

    for t in (0.3, 1.0, 2.5):
        n = 2000  # Simpson's rule on [0, t], plus the half below zero
        h = t / n
        s = density(0) + density(t) + sum((4 if k % 2 else 2) * density(k * h) for k in range(1, n))
        assert iv._t_cdf(t, df) == pytest.approx(0.5 + s * h / 3, abs=1e-10)
        assert iv._t_cdf(-t, df) == pytest.approx(0.5 - s * h / 3, abs=1e-10)


def test_seed_interval_is_the_t_interval_written_out() -> None:
    values = [1.306, 1.318, 1.323, 1.317, 1.312]
    s = iv.seed_interval(values)
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    half = 2.7764451 * sd / math.sqrt(5)
    assert (s.n, s.level) == (5, 0.95)
    assert s.estimate == pytest.approx(mean) and s.sd == pytest.approx(sd)
    assert (s.low, s.high) == pytest.approx((mean - half, mean + half), abs=1e-9)
    assert s.half_width == pytest.approx(half, abs=1e-9)
    # One pair of seeds: the factor is t_1 = 12.706, the interval enormous.
    pair = iv.seed_interval(values[:2])
    assert pair.half_width == pytest.approx(12.7062047 * pair.sd / math.sqrt(2), rel=1e-7)


def test_seed_interval_covers_the_mean_95_times_in_100() -> None:
    g = torch.Generator().manual_seed(0)
    draws = torch.randn(4000, 5, generator=g, dtype=torch.float64) * 0.01 + 1.3
    covered = sum(s.low <= 1.3 <= s.high for s in map(iv.seed_interval, draws.tolist()))
    # Binomial(4000, 0.95): sd 13.8, so 3800 +- 55 is 4 sd.
    assert 3745 <= covered <= 3855, covered


def test_gap_interval_uses_the_standard_error_of_a_difference() -> None:
    s = iv.seed_interval([1.306, 1.318, 1.323, 1.317, 1.312])
    t4 = iv.t_quantile(0.975, 4)
    one_each = iv.gap_interval(0.02, s)
    assert one_each.half_width == pytest.approx(t4 * s.sd * math.sqrt(2))
    against_mean = iv.gap_interval(0.02, s, runs=(1, 5))
    assert against_mean.half_width == pytest.approx(t4 * s.sd * math.sqrt(1.2))
    assert against_mean.estimate == 0.02 and against_mean.low < 0.02 < against_mean.high
    assert iv.gap_interval(0.5, s).excludes_zero() and not iv.gap_interval(0.001, s).excludes_zero()


def test_a_t_interval_for_a_gap_covers_as_promised() -> None:
    """Two one-run recipes with the same mean: the gap's interval holds 0 about 95% of the
    time, the seed noise measured from five other runs."""
    g = torch.Generator().manual_seed(1)
    runs = torch.randn(4000, 7, generator=g, dtype=torch.float64)
    covered = 0
    for row in runs.tolist():
        gap = iv.gap_interval(row[5] - row[6], iv.seed_interval(row[:5]))
        covered += gap.low <= 0 <= gap.high
    assert 3745 <= covered <= 3855, covered


def _bootstrap_by_loop(a, b, level, resamples, seed):
    """The same percentile bootstrap, one draw at a time."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    w = len(d)
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, w, (resamples, w), generator=g).tolist()
    means = sorted(sum(d[i] for i in row) / w for row in draws)
    def quantile(q):  # linear interpolation between order statistics, as torch.quantile
        pos = q * (resamples - 1)
        lo = math.floor(pos)
        return means[lo] + (pos - lo) * (means[min(lo + 1, resamples - 1)] - means[lo])
    return quantile(0.5 - level / 2), quantile(0.5 + level / 2)


def test_paired_bootstrap_matches_an_explicit_loop() -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.rand(30, generator=g, dtype=torch.float64)
    b = a + 0.05 * torch.randn(30, generator=g, dtype=torch.float64)
    got = iv.paired_bootstrap(a, b, resamples=500, seed=7)
    low, high = _bootstrap_by_loop(a.tolist(), b.tolist(), 0.95, 500, 7)
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-12)
    assert got.estimate == pytest.approx(float((b - a).mean())) and got.n == 30
    assert got == iv.paired_bootstrap(a, b, resamples=500, seed=7)  # the same on every run


def test_paired_bootstrap_width_follows_the_central_limit() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(400, generator=g, dtype=torch.float64)
    b = a + 0.01 + 0.2 * torch.randn(400, generator=g, dtype=torch.float64)
    got = iv.paired_bootstrap(a, b)
    clt = 1.959964 * float((b - a).std()) / math.sqrt(400)
    assert got.half_width == pytest.approx(clt, rel=0.08)


def test_pairing_cancels_what_the_windows_share() -> None:
    """Hard windows are hard for both models: the paired interval is far narrower than what
    the two models' own spreads would give, and identical models give a zero interval."""
    g = torch.Generator().manual_seed(4)
    difficulty = 0.5 * torch.randn(64, generator=g, dtype=torch.float64)
    a = 1.3 + difficulty
    b = 1.32 + difficulty + 0.005 * torch.randn(64, generator=g, dtype=torch.float64)
    paired = iv.paired_bootstrap(a, b)
    unpaired = 1.96 * math.sqrt((a.var() + b.var()).item() / 64)
    assert paired.excludes_zero() and paired.half_width < unpaired / 20
    same = iv.paired_bootstrap(a, a)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def test_bad_arguments_say_what_was_given() -> None:
    with pytest.raises(ValueError, match=r"values must hold at least two runs; got 1"):
        iv.seed_interval([1.3])
    with pytest.raises(ValueError, match=r"level must be a float strictly between 0 and 1; got 95"):
        iv.seed_interval([1.3, 1.4], level=95)
    with pytest.raises(ValueError, match=r"same number .* got 3 and 4"):
        iv.paired_bootstrap([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"p must lie strictly between 0 and 1; got 1\.0"):
        iv.t_quantile(1.0, 3)
    with pytest.raises(TypeError, match="seeds must be an Interval"):
        iv.gap_interval(0.1, [1.3, 1.4])
    with pytest.raises(ValueError, match="runs"):
        iv.gap_interval(0.1, iv.seed_interval([1.3, 1.4]), runs=(0, 1))


def test_module_example_holds() -> None:
    assert doctest.testmod(iv).failed == 0


def test_format_names_the_interval_and_prints_no_negative_zero() -> None:
    i = iv.Interval(0.0103, -0.0003, 0.0205, 64, 0.04, 0.95, "paired bootstrap over 64 windows")
    assert i.format(signed=True) == (
        "+0.010 (95% interval +0.000 to +0.021; paired bootstrap over 64 windows)")
    assert str(i) == "0.010 (95% interval 0.000 to 0.021; paired bootstrap over 64 windows)"
