"""Counts of order 10^7 and counts over four decades (issue 42): FLGPRegressor(likelihood=
"poisson") used to predict mean counts of 10^21..10^136 where the heat kernel's prior
variance of the log-rate is large - a piece of the graph without a label (its prior
variance grows as one over the piece's size) and the sparse tails of a blob - because the
mean of the log-normal rate is exp(m + v/2). Now: means of the order of the data and
intervals that cover held-out counts at about their level; a piece without a label
predicts the labelled counts' population; the log-rate is bounded at RATE_CEILING times
the largest count (the truncated moments and quantiles checked against quadrature)."""

import copy

import numpy as np
import pytest
from scipy import integrate, stats

from flgp import FLGPRegressor
from flgp.datasets import make_spiral, make_swiss_roll
from flgp.models.inference.poisson import (RATE_CEILING, bounded_rate_moments,
                                           poisson_interval, rate_ceiling)
from flgp.models.regression_predictor import CountPredictor


def _counts(kind, seed=0, n=2000, frac=0.07):
    """``(X, y, semi, rate, labelled)``: Poisson counts of a smooth rate on a cloud,
    ``frac`` of them labelled (``semi`` NaN elsewhere)."""
    rng = np.random.default_rng(seed)
    if kind == "1e7":                      # 3.7e6 .. 2.7e7 along the spiral
        X, _, f = make_spiral(n, random_state=seed)
        rate = 1e7 * np.exp(0.1 * f)
    elif kind == "decades":                # 10^3 .. 10^7 along the spiral
        X, _, f = make_spiral(n, random_state=seed)
        rate = 1e3 * 1e4 ** ((f - f.min()) / np.ptp(f))
    elif kind == "roll":                   # 10^3 .. 10^7 around the Swiss roll
        X, t = make_swiss_roll(n, noise=0.3, random_state=seed)
        rate = 1e3 * 1e4 ** ((np.sin(t) + 1) / 2)
    elif kind == "blob":                   # 10^3 .. 10^7 across a Gaussian blob
        X = rng.standard_normal((n, 2))
        rate = 1e3 * 1e4 ** ((np.tanh(X[:, 0] + 0.5 * X[:, 1]) + 1) / 2)
    else:
        raise ValueError(kind)
    y = rng.poisson(rate).astype(float)
    lab = rng.choice(n, int(frac * n), replace=False)
    semi = np.full(n, np.nan)
    semi[lab] = y[lab]
    return X, y, semi, rate, lab


def _unlabelled(n, lab):
    return np.setdiff1d(np.arange(n), lab)


@pytest.mark.parametrize("kind", ["1e7", "decades", "roll"])
def test_large_counts_predict_means_of_the_order_of_the_data(kind):
    X, y, semi, rate, lab = _counts(kind)
    reg = FLGPRegressor(likelihood="poisson").fit(X, semi)
    mean, sd = reg.predict(X, return_std=True)
    lo, hi = reg.predict_interval(X, coverage=0.9)
    for a in (mean, sd, lo, hi, reg.transduction_, reg.transduction_std_):
        assert np.all(np.isfinite(a))
    np.testing.assert_allclose(mean, reg.transduction_, rtol=1e-8)
    unl = _unlabelled(y.size, lab)
    rel = np.abs(mean[unl] - rate[unl]) / rate[unl]
    # measured 0.003 (1e7), 0.02 (decades on the spiral), 0.16 (around the roll, where
    # the heat kernel fits the log-rate less well)
    assert np.median(rel) < 0.2
    assert mean.max() < 10 * np.nanmax(semi)
    assert mean.min() > 0.1 * np.nanmin(semi)
    # 90% intervals of a new count cover the held-out counts at about their level
    inside = np.mean((y[unl] >= lo[unl]) & (y[unl] <= hi[unl]))
    assert 0.8 <= inside <= 0.98, inside
    assert np.all(lo <= mean) and np.all(mean <= hi)


def test_a_piece_without_labels_predicts_the_labelled_population():
    """Eight points far from the spiral form a piece of the graph that holds no label.
    The heat kernel's prior variance there grows as one over the piece's size, and its
    prior predicted mean counts of 10^21..10^25 (counts below 10^7); now the piece
    predicts a count drawn like the labelled ones."""
    X, y, semi, rate, lab = _counts("decades", seed=0)
    rng = np.random.default_rng(1)
    island = np.array([40.0, 40.0]) + 0.3 * rng.standard_normal((8, 2))
    X = np.vstack([X, island])
    y_island = rng.poisson(2e5, 8).astype(float)
    semi = np.r_[semi, np.full(8, np.nan)]
    with pytest.warns(UserWarning, match="hold no labelled point"):
        reg = FLGPRegressor(likelihood="poisson").fit(X, semi)
    mean, sd = reg.predict(X, return_std=True)
    lo, hi = reg.predict_interval(X, coverage=0.9)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(sd)) and np.all(np.isfinite(hi))
    counts = semi[lab]
    # one prediction for the whole piece, between the labels' median and largest count
    assert np.ptp(mean[-8:]) <= 1e-9 * mean[-1]
    assert np.median(counts) < mean[-1] < counts.max()
    # its interval is that of the labelled counts' spread: it covers about 90% of them,
    # and the island's own counts (2e5, inside the labels' range)
    covered = np.mean((counts >= lo[-1]) & (counts <= hi[-1]))
    assert 0.8 <= covered <= 0.99, covered
    assert np.all((y_island >= lo[-8:]) & (y_island <= hi[-8:]))
    # the labelled piece is untouched: its predictions follow the rate
    unl = _unlabelled(y.size, lab)
    assert np.median(np.abs(mean[unl] - rate[unl]) / rate[unl]) < 0.2


def test_sparse_tails_keep_the_mean_bounded_by_the_data():
    """A Gaussian blob: in its sparse tails the heat kernel's prior variance of the
    log-rate is tens of times that at the labels, and the posterior sd of the log-rate
    reaches 5-10 - the log-normal mean exp(m + v/2) was 10^38 times the largest count.
    The bounded-rate prior keeps every mean below RATE_CEILING times the largest count,
    while the medians and the intervals elsewhere stay as they were."""
    X, y, semi, rate, lab = _counts("blob", seed=0, frac=0.05)
    reg = FLGPRegressor(likelihood="poisson").fit(X, semi)
    mean = reg.predict(X)
    lo, hi = reg.predict_interval(X, coverage=0.9)
    ymax = np.nanmax(semi)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(hi))
    # without the bound (the same posterior, ceiling at infinity) the tails explode
    unbounded = copy.copy(reg._chosen_fit.predictor)
    unbounded.ceiling = np.inf
    raw = reg.eigenpairs_.map_chunks(unbounded, n_columns=2, project=unbounded.project)[:, 0]
    assert raw.max() > 1e6 * ymax
    assert mean.max() <= RATE_CEILING * (ymax + 1)
    assert np.exp(reg._chosen_fit.predictor.ceiling) == pytest.approx(RATE_CEILING * (ymax + 1))
    # only the points whose log-normal mean was beyond the data move much
    moved = np.abs(mean - raw) > 1e-6 * raw
    assert moved.sum() < 0.05 * y.size
    unl = _unlabelled(y.size, lab)
    assert np.median(np.abs(mean[unl] - rate[unl]) / rate[unl]) < 0.2
    inside = np.mean((y[unl] >= lo[unl]) & (y[unl] <= hi[unl]))
    assert 0.8 <= inside <= 0.98, inside
    assert np.all(hi <= np.exp(reg._chosen_fit.predictor.ceiling) * 1.01 + 10)


def test_bounded_rate_moments_match_quadrature_and_vanish_far_from_the_ceiling():
    ceiling = 10.0
    mu = np.array([2.0, 5.0, 8.0, 12.0, 0.0, 9.5])
    var = np.array([0.3, 4.0, 9.0, 16.0, 600.0, 0.01])
    mean, sd = bounded_rate_moments(mu, var, ceiling)
    for k in range(mu.size):
        dist = stats.truncnorm(-np.inf, (ceiling - mu[k]) / np.sqrt(var[k]), loc=mu[k],
                               scale=np.sqrt(var[k]))
        lo, hi = dist.ppf(1e-15), ceiling
        m1 = integrate.quad(lambda x: np.exp(x) * dist.pdf(x), lo, hi, limit=400,
                            epsrel=1e-11)[0]
        m2 = integrate.quad(lambda x: np.exp(2 * x) * dist.pdf(x), lo, hi, limit=400,
                            epsrel=1e-11)[0]
        assert mean[k] == pytest.approx(m1, rel=1e-6), k
        assert sd[k] == pytest.approx(np.sqrt(m2 - m1 ** 2), rel=1e-5), k
        assert mean[k] <= np.exp(ceiling)
    # far below the ceiling: the log-normal's moments, to the last bit
    mu = np.array([1.0, -3.0, 2.5])
    var = np.array([0.5, 2.0, 0.1])
    mean, sd = bounded_rate_moments(mu, var, 40.0)
    free_mean, free_sd = bounded_rate_moments(mu, var)
    np.testing.assert_array_equal(mean, np.exp(mu + var / 2))
    np.testing.assert_array_equal(sd, np.exp(mu + var / 2) * np.sqrt(np.expm1(var)))
    np.testing.assert_array_equal(free_mean, mean)
    np.testing.assert_array_equal(free_sd, sd)
    assert rate_ceiling(np.array([3.0, 0.0, 9.0])) == pytest.approx(np.log(RATE_CEILING * 10))


def test_truncated_interval_is_the_truncated_mixture_quantile():
    ceiling = 10.0
    mu = np.array([5.0, 12.0, 2.0, 9.0])
    sd = np.array([3.0, 4.0, 0.5, 1.0])
    lower, upper = poisson_interval(mu, sd, 0.9, ceiling=ceiling)
    plain = poisson_interval(mu, sd, 0.9)
    # far below the ceiling (row 2) nothing changes
    assert lower[2] == plain[0][2] and upper[2] == plain[1][2]
    assert np.all(upper <= plain[1]) and np.all(lower <= plain[0])

    def cdf(k, m_, s_):
        top = (ceiling - m_) / s_
        dist = stats.truncnorm(-np.inf, top, loc=m_, scale=s_)
        return integrate.quad(lambda x: dist.pdf(x) * stats.poisson.cdf(k, np.exp(x)),
                              dist.ppf(1e-13), ceiling, limit=400, epsabs=1e-12)[0]

    for k in range(mu.size):
        for q, level in ((lower[k], 0.05), (upper[k], 0.95)):
            assert q == np.round(q) and 0 <= q <= np.exp(ceiling) + 10 * np.exp(ceiling / 2)
            # the 24-node Gauss-Hermite CDF: within 2e-3 of the level
            assert cdf(q, mu[k], sd[k]) >= level - 2e-3, (k, level)
            assert q == 0 or cdf(q - 1, mu[k], sd[k]) < level + 2e-3, (k, level)


def test_a_posterior_far_above_the_ceiling_gets_quantiles_just_below_it():
    """All but 1e-24 of the log-rate's mass above the ceiling: the truncated log-rate lies
    within a few tenths of it (an exponential tail of rate (mu - c)/sd²)."""
    lower, upper = poisson_interval(np.array([30.0]), np.array([2.0]), 0.9, ceiling=10.0)
    dist = stats.truncnorm(-np.inf, -10.0, loc=30.0, scale=2.0)
    for q, level in ((lower[0], 0.05), (upper[0], 0.95)):
        assert q == pytest.approx(np.exp(dist.ppf(level)), rel=0.02)
        assert q <= np.exp(10.0) * 1.02


def test_count_predictors_give_pieces_without_a_label_the_population():
    """A CountPredictor predicts, in a piece of the graph without a label, the labelled
    counts' population's log-normal."""
    rng = np.random.default_rng(0)
    M = 6
    sd = np.exp(-np.arange(M) / 3.0)
    w_cov = np.eye(M) * 0.1
    pr = CountPredictor(sd, rng.normal(size=M), w_cov, 2.0, np.array([True, False]), 0.05,
                        population=(0.3, 0.7), ceiling=30.0)
    V = rng.normal(size=(5, M))
    pieces = np.array([0, 0, 1, 1, 0])
    Z = tuple(p.of_rows(V) if hasattr(p, "of_rows") else V @ p for p in pr.project)
    new = pr(Z, pieces)
    # the piece without a label: the population's log-normal
    np.testing.assert_allclose(new[2:4, 0], np.exp(2.0 + 0.3 + (0.7 + 0.05) / 2))
