"""Counts: FLGPRegressor(likelihood="poisson") against a dense-kernel Laplace reference
(R&W Algorithm 3.1-3.2 on the m x m covariance), the weight-space Laplace evidence and its
gradient, the predictive interval against numerical integration, and bad counts."""

import numpy as np
import pytest
from scipy import integrate, stats

from flgp import Eigenbasis, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
from flgp.datasets import make_swiss_roll
from flgp.spectral.families import spectral_weights
from flgp.models.inference.laplace import (PoissonLikelihood, binary_predict, laplace_binary,
                                 laplace_weights, laplace_weights_grad)
from flgp.models.inference.poisson import poisson_interval


def _every_prior(**heat):
    """Every representation weighed by evidence, the heat kernel's with these settings."""
    return [HeatKernelPrior(Eigenbasis(**heat)), GraphMaternPrior(), RBFPrior()]


def _offset_poisson(b):
    class OffsetPoisson:
        @staticmethod
        def log_prob(y, f):
            return PoissonLikelihood.log_prob(y, f + b)

        @staticmethod
        def grad_hess(y, f):
            return PoissonLikelihood.grad_hess(y, f + b)

    return OffsetPoisson


def _counts(n=400, m=60, seed=0):
    X, t = make_swiss_roll(n, noise=0.3, random_state=seed)
    rng = np.random.default_rng(seed)
    rate = np.exp(1.0 + np.sin(t))
    y = rng.poisson(rate).astype(float)
    yy = np.full(n, np.nan)
    lab = rng.choice(n, m, replace=False)
    yy[lab] = y[lab]
    return X, y, yy, rate, lab


def test_weight_space_laplace_equals_dense_and_its_gradient_is_exact():
    rng = np.random.default_rng(0)
    m, M = 25, 10
    V = rng.standard_normal((m, M)) / 3
    log_d = rng.normal(size=M)
    b = 0.4
    y = rng.poisson(np.exp(b + V @ (np.exp(0.5 * log_d) * rng.standard_normal(M))))
    y = y.astype(float)

    def run(ld):
        return laplace_weights(V * np.exp(0.5 * ld), y, offset=b)

    st = run(log_d)
    ref = laplace_binary((V * np.exp(log_d)) @ V.T, y, _offset_poisson(b), tol=1e-15)
    assert st.log_evidence == pytest.approx(ref.log_evidence, abs=1e-9)
    np.testing.assert_allclose(st.f - b, ref.f, atol=1e-9)
    grad = laplace_weights_grad(st, V * np.exp(0.5 * log_d), y)
    h = 1e-5
    num = [(run(log_d + h * e).log_evidence - run(log_d - h * e).log_evidence) / (2 * h)
           for e in np.eye(M)]
    np.testing.assert_allclose(grad, num, atol=1e-6)


def test_poisson_regressor_matches_a_dense_laplace_reference():
    X, y, yy, rate, lab = _counts()
    reg = FLGPRegressor(_every_prior(n_induced=100), likelihood="poisson",
                        random_state=0).fit(X, yy)
    ep = reg.eigenpairs_
    V = ep.eigenvectors
    b = reg.offset_
    assert b == pytest.approx(np.log(y[lab].mean()))
    lab = np.sort(lab)
    np.testing.assert_array_equal(np.sort(reg.labelled_indices_), lab)

    def dense(t, s2, nugget):
        # the counts' own log-rate terms (overdispersion σ²) add σ² I to the labelled block
        w = s2 * spectral_weights(ep, t)
        K = (V * w) @ V.T
        K_lab = K[np.ix_(lab, lab)] + nugget * np.eye(lab.size)
        st = laplace_binary(K_lab, y[lab], _offset_poisson(b), tol=1e-15)
        return st, K, w

    s2n = reg.overdispersion_
    assert 0.0 < s2n <= 10.0
    st, K, w = dense(reg.diffusion_time_, reg.outputscale_, s2n)
    assert reg.log_marginal_likelihood_ == pytest.approx(st.log_evidence, abs=1e-7)
    mean, var = binary_predict(st, K[lab], (V * V) @ w)
    var = var + s2n                         # a new count's log-rate: the latent plus ε
    np.testing.assert_allclose(reg.transduction_, np.exp(b + mean + var / 2), rtol=1e-7)
    np.testing.assert_allclose(reg.transduction_std_,
                               np.exp(b + mean + var / 2) * np.sqrt(np.expm1(var)),
                               rtol=1e-6)
    # empirical Bayes: (t, s², σ²) is a maximum of the dense evidence (flat prior in log t)
    best = st.log_evidence
    for dt, ds, dn in [(0.1, 0, 0), (-0.1, 0, 0), (0, 0.1, 0), (0, -0.1, 0), (0, 0, 0.1),
                       (0, 0, -0.1)]:
        other = dense(reg.diffusion_time_ * np.exp(dt), reg.outputscale_ * np.exp(ds),
                      s2n * np.exp(dn))[0]
        assert other.log_evidence <= best + 1e-5, (dt, ds, dn, s2n)
    # and it recovers the rate on the unlabelled points
    unl = np.setdiff1d(np.arange(len(y)), lab)
    assert np.mean(np.abs(reg.transduction_[unl] - rate[unl]) / rate[unl]) < 0.3
    np.testing.assert_allclose(reg.predict(X[:50]), reg.transduction_[:50], rtol=1e-8)


def test_poisson_interval_is_the_poisson_lognormal_quantile():
    mu = np.array([-1.0, 0.5, 2.0, 4.0, 1.0])
    sd = np.array([0.3, 1.0, 0.2, 0.5, 0.0])
    lower, upper = poisson_interval(mu, sd, 0.9)

    def cdf(k, m_, s_):
        if s_ == 0:
            return stats.poisson.cdf(k, np.exp(m_))
        return integrate.quad(lambda z: stats.norm.pdf(z) * stats.poisson.cdf(
            k, np.exp(m_ + s_ * z)), -12, 12, epsabs=1e-12, limit=200)[0]

    for k in range(mu.size):
        for q, level in ((lower[k], 0.05), (upper[k], 0.95)):
            assert q == np.round(q) and q >= 0
            assert cdf(q, mu[k], sd[k]) >= level - 1e-6
            assert q == 0 or cdf(q - 1, mu[k], sd[k]) < level + 1e-6


def test_counts_interval_covers_and_gaussian_interval():
    X, y, yy, rate, lab = _counts(n=600, m=120, seed=1)
    reg = FLGPRegressor(_every_prior(n_induced=120), likelihood="poisson").fit(X, yy)
    lo, hi = reg.predict_interval(X, coverage=0.9)
    inside = np.mean((y >= lo) & (y <= hi))
    assert 0.85 <= inside <= 0.99
    g = FLGPRegressor(_every_prior(n_induced=120)).fit(X, np.log1p(yy))
    mean, sd = g.predict(X[:20], return_std=True)
    lo, hi = g.predict_interval(X[:20], coverage=0.8)
    np.testing.assert_allclose(hi - mean, stats.norm.ppf(0.9) * np.sqrt(sd ** 2 + g.noise_))
    np.testing.assert_allclose(mean - lo, hi - mean)


def test_bad_counts_and_settings_get_clear_errors():
    X, y, yy, rate, lab = _counts(n=200, m=30)
    bad = yy.copy()
    bad[lab[3]] = -2
    with pytest.raises(ValueError, match=f"negative \\(e.g. -2 at row {lab[3]}\\)"):
        FLGPRegressor(_every_prior(n_induced=60), likelihood="poisson").fit(X, bad)
    bad = yy.copy()
    bad[lab[5]] = 2.5
    with pytest.raises(ValueError, match="not whole numbers \\(e.g. 2.5"):
        FLGPRegressor(_every_prior(n_induced=60), likelihood="poisson").fit(X, bad)
    with pytest.raises(ValueError, match="noise is a parameter of likelihood='gaussian'"):
        FLGPRegressor(_every_prior(n_induced=60), likelihood="poisson", noise=0.1).fit(X, yy)
    with pytest.raises(ValueError, match="heat kernel \\(HeatKernelPrior\\) only"):
        FLGPRegressor(RBFPrior(), likelihood="poisson").fit(X, yy)
    with pytest.raises(ValueError, match="likelihood"):
        FLGPRegressor(_every_prior(n_induced=60), likelihood="binomial").fit(X, yy)
    reg = FLGPRegressor(_every_prior(n_induced=60), likelihood="poisson").fit(X, yy)
    with pytest.raises(ValueError, match="coverage"):
        reg.predict_interval(X[:3], coverage=1.5)


def test_all_zero_counts_stay_finite():
    X, y, yy, rate, lab = _counts(n=200, m=30, seed=2)
    zeros = np.where(np.isnan(yy), np.nan, 0.0)
    reg = FLGPRegressor(_every_prior(n_induced=60), likelihood="poisson").fit(X, zeros)
    mean, sd = reg.predict(X, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(sd))
    assert mean.max() < 0.2                    # about half a count over 30 labels at most
    lo, hi = reg.predict_interval(X[:10])
    assert np.all(lo == 0) and np.all(hi >= 0)


def test_mean_counts_far_beyond_the_labels_are_warned_of():
    """Counts unrelated to the cloud at scales 1, 1e3 and 1e6 (the largest up to 1.3e7):
    every posterior mean count is within 100 times the largest labelled count, or a
    warning names the points beyond (where the log-rate's posterior is wide)."""
    import warnings

    from flgp import FLGPRegressor

    warned = 0
    for scale in (1.0, 1e3, 1e6):
        for seed in (0, 4):
            rng = np.random.default_rng(seed)
            t = rng.uniform(0, 2 * np.pi, 2000)
            X = np.c_[np.cos(t), np.sin(t)]
            y = np.full(2000, np.nan)
            lab = rng.choice(2000, 10, replace=False)
            y[lab] = np.round(np.exp(rng.uniform(0, np.log(13.0 * scale), 10)))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reg = FLGPRegressor(likelihood="poisson").fit(X, y)
            beyond = reg.transduction_.max() > 100 * (np.nanmax(y) + 1)
            said = any("times the largest labelled count" in str(w.message)
                       for w in caught)
            assert said == beyond
            warned += said
    assert warned >= 1                 # (the draws include such a case)
