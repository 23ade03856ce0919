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


def _bootstrap_by_loop(a, b, level, resamples, seed, block):
    """The same circular block bootstrap, one draw and one block at a time."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    w = len(d)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, w, (resamples, math.ceil(w / block)), generator=g).tolist()
    means = []
    for row in starts:
        drawn = [d[(start + k) % w] for start in row for k in range(block)][:w]
        means.append(sum(drawn) / w)
    means.sort()

    def quantile(q):  # linear interpolation between order statistics, as torch.quantile
        pos = q * (resamples - 1)
        lo = math.floor(pos)
        return means[lo] + (pos - lo) * (means[min(lo + 1, resamples - 1)] - means[lo])
    return quantile(0.5 - level / 2), quantile(0.5 + level / 2)


@pytest.mark.parametrize("block", [1, 3, 4])
def test_paired_bootstrap_matches_an_explicit_loop(block: int) -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.rand(30, generator=g, dtype=torch.float64)
    b = a + 0.05 * torch.randn(30, generator=g, dtype=torch.float64)
    got = iv.paired_bootstrap(a, b, resamples=500, seed=7, block=block)
    low, high = _bootstrap_by_loop(a.tolist(), b.tolist(), 0.95, 500, 7, block)
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-12)
    assert got.estimate == pytest.approx(float((b - a).mean())) and got.n == 30
    assert got.method == f"paired bootstrap over 30 windows in blocks of {block}"
    assert got == iv.paired_bootstrap(a, b, resamples=500, seed=7, block=block)  # every run


def test_the_default_block_is_the_cube_root_of_the_windows() -> None:
    g = torch.Generator().manual_seed(9)
    for w, block in ((64, 4), (27, 3), (2, 1), (239, 6)):
        a, b = torch.rand(2, w, generator=g, dtype=torch.float64)
        assert iv.paired_bootstrap(a, b, resamples=50) == iv.paired_bootstrap(
            a, b, resamples=50, block=block), w


def test_block_bootstrap_variance_is_the_closed_form() -> None:
    """With W a multiple of the block length l, a draw is the mean of k = W / l blocks whose
    starts are uniform on the circle: the resampled means have mean d_bar exactly and
    variance (1/k) mean_s (B_s - d_bar)^2, B_s the mean of the block that starts at s. With
    k = 64 blocks a draw is close to normal, so the 95% interval is d_bar +- 1.96 sd."""
    g = torch.Generator().manual_seed(10)
    w, block = 256, 4
    d = torch.randn(w, generator=g, dtype=torch.float64).cumsum(0) * 0.1  # strongly dependent
    blocks = torch.stack([d[(s + torch.arange(block)) % w].mean() for s in range(w)])  # (W,)
    sd = math.sqrt(float((blocks - d.mean()).square().mean()) / (w // block))
    got = iv.paired_bootstrap(torch.zeros(w), d, resamples=40_000, seed=3, block=block)
    z = statistics.NormalDist().inv_cdf(0.975)
    assert got.half_width == pytest.approx(z * sd, rel=0.03)
    assert (got.low + got.high) / 2 == pytest.approx(got.estimate, abs=0.03 * sd)  # centred
    # the same data drawn window by window: independence understates this series' noise
    assert iv.paired_bootstrap(torch.zeros(w), d, block=1).half_width < 0.6 * got.half_width


def _autoregression(series: int, w: int, phi: float, seed: int) -> torch.Tensor:
    """``series`` stationary AR(1) sequences x_t = phi x_{t-1} + e_t of length w, mean 0."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(series, w, generator=g, dtype=torch.float64)
    x = torch.empty_like(e)
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi**2)  # started from the stationary distribution
    for t in range(1, w):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def test_blocks_cover_the_mean_of_an_autocorrelated_sequence(one_thread) -> None:
    """64 windows whose differences follow an AR(1) with phi = 0.5, true mean 0: the variance
    of the mean is (1 + phi) / (1 - phi) = 3 times what independence says, so windows drawn
    one by one cover about 1.96 / sqrt(3) of a normal's 95% (74%); blocks of 4 keep the lags
    up to 3 and cover more; with independent windows, blocks lose little."""
    zero = torch.zeros(64, dtype=torch.float64)

    def covered(x, block):
        return sum(i.low <= 0 <= i.high
                   for i in (iv.paired_bootstrap(zero, row, resamples=1000, block=block)
                             for row in x)) / len(x)

    dependent = _autoregression(800, 64, 0.5, seed=8)
    one_by_one, in_blocks = covered(dependent, 1), covered(dependent, None)
    # binomial sd at 800 series: 0.016 near 0.74, 0.013 near 0.85
    assert one_by_one < 0.79 and in_blocks > 0.81 and in_blocks - one_by_one > 0.07
    independent = _autoregression(800, 64, 0.0, seed=9)
    assert covered(independent, None) > 0.89 and covered(independent, 1) > 0.91


def test_serial_correlation_is_the_written_out_estimate() -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(50, generator=g, dtype=torch.float64).tolist()
    m = sum(x) / 50
    for lag in (1, 2, 7):
        by_hand = (sum((x[t] - m) * (x[t + lag] - m) for t in range(50 - lag))
                   / sum((v - m) ** 2 for v in x))
        assert iv.serial_correlation(x, lag) == pytest.approx(by_hand, abs=1e-12)
    long = _autoregression(1, 200_000, 0.5, seed=12)[0]
    assert iv.serial_correlation(long) == pytest.approx(0.5, abs=0.01)  # sd 1/sqrt(200000)
    assert iv.serial_correlation(long, 2) == pytest.approx(0.25, abs=0.01)
    many = _autoregression(2000, 64, 0.0, seed=13)
    r = torch.tensor([iv.serial_correlation(row) for row in many])
    # independent values: mean about -1/W, sd about 1/sqrt(W) = 0.125
    assert abs(float(r.mean()) + 1 / 64) < 0.01 and abs(float(r.std()) - 0.125) < 0.015


def test_paired_bootstrap_width_follows_the_central_limit() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(400, generator=g, dtype=torch.float64)
    b = a + 0.01 + 0.2 * torch.randn(400, generator=g, dtype=torch.float64)
    clt = 1.959964 * float((b - a).std()) / math.sqrt(400)
    assert iv.paired_bootstrap(a, b, block=1).half_width == pytest.approx(clt, rel=0.08)
    # independent windows in blocks of 7: the same width, up to the blocks' own noise
    assert iv.paired_bootstrap(a, b).half_width == pytest.approx(clt, rel=0.15)


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
    with pytest.raises(ValueError,
                       match=r"block must be at most the number of windows \(3\); got 4"):
        iv.paired_bootstrap([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], block=4)
    with pytest.raises(ValueError, match=r"block must be a positive int"):
        iv.paired_bootstrap([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], block=0)
    with pytest.raises(ValueError,
                       match=r"lag must be smaller than the number of values \(3\); got 3"):
        iv.serial_correlation([1.0, 2.0, 4.0], lag=3)
    with pytest.raises(ValueError, match=r"p must lie strictly between 0 and 1; got 1\.0"):
        iv.t_quantile(1.0, 3)
    with pytest.raises(TypeError, match="seeds must be an Interval"):
        iv.gap_interval(0.1, [1.3, 1.4])
    with pytest.raises(ValueError, match="runs"):
        iv.gap_interval(0.1, iv.seed_interval([1.3, 1.4]), runs=(0, 1))


def test_module_example_holds() -> None:
    assert doctest.testmod(iv).failed == 0


def test_format_prints_each_bound_with_its_computed_sign() -> None:
    """A bound of -0.0003 is below zero: it prints as -0.000, never as 0.000 or +0.000, so an
    interval that holds zero never reads as one that starts at it. An exact zero, whatever
    the sign bit of the float, prints unsigned."""
    i = iv.Interval(0.0103, -0.0003, 0.0205, 64, 0.04, 0.95, "paired bootstrap over 64 windows")
    assert i.format(signed=True) == (
        "+0.010 (95% interval -0.000 to +0.021; paired bootstrap over 64 windows)")
    assert str(i) == "0.010 (95% interval -0.000 to 0.021; paired bootstrap over 64 windows)"
    assert i.format(digits=4, signed=True).startswith("+0.0103 (95% interval -0.0003 to +0.0205")
    zero = iv.Interval(-0.0, -0.0, 0.0003, 64, 0.0, 0.95, "m")
    assert zero.format(signed=True) == "+0.000 (95% interval +0.000 to +0.000; m)"
    assert str(zero) == "0.000 (95% interval 0.000 to 0.000; m)"
    assert i._replace(level=0.975).format().startswith("0.010 (97.5% interval")
    assert i._replace(level=1 - 0.05 / 10).format().startswith("0.010 (99.5% interval")
    above = iv.Interval(0.01, 0.0003, 0.02, 64, 0.04, 0.95, "m")
    assert above.format(signed=True) == "+0.010 (95% interval +0.000 to +0.020; m)"
    assert not i.excludes_zero() and above.excludes_zero()
