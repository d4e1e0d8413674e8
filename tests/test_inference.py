"""The inference cores against independent dense computations."""

import numpy as np
import pytest
import scipy.stats
from scipy.special import expit, softmax

from flgp.spectral.gaussian import LowRankGaussianEvidence
from flgp.models.inference.laplace import (LogisticLikelihood, PoissonLikelihood, binary_predict,
                                 active_columns, binary_predict_low_rank,
                                 binary_predict_low_rank_many,
                                 laplace_binary, laplace_softmax, softmax_predict)


def _kernel(rng, m, rank=None):
    rank = m if rank is None else rank
    F = rng.standard_normal((m, rank))
    return F @ F.T / rank * 2.0 + (1e-8 * np.eye(m) if rank < m else 0)


def test_gaussian_evidence_matches_dense_and_gradient(rng):
    m, M = 30, 8
    V = rng.standard_normal((m, M))
    y = rng.standard_normal(m)
    log_d = rng.normal(size=M)
    log_noise = np.log(0.3)
    ev = LowRankGaussianEvidence(V, y)
    nll, g, gn = ev.value_and_grad(log_d, log_noise)
    K = V @ np.diag(np.exp(log_d)) @ V.T + 0.3 * np.eye(m)
    ref = -scipy.stats.multivariate_normal(np.zeros(m), K).logpdf(y)
    np.testing.assert_allclose(nll, ref, rtol=1e-10)
    h = 1e-6
    for l in range(M):
        e = np.zeros(M)
        e[l] = h
        num = (ev.value_and_grad(log_d + e, log_noise)[0]
               - ev.value_and_grad(log_d - e, log_noise)[0]) / (2 * h)
        np.testing.assert_allclose(g[l], num, rtol=1e-5, atol=1e-7)
    num = (ev.value_and_grad(log_d, log_noise + h)[0]
           - ev.value_and_grad(log_d, log_noise - h)[0]) / (2 * h)
    np.testing.assert_allclose(gn, num, rtol=1e-5)
    # posterior mean of f at the training points = dense GP posterior mean
    sd, mean, cov = ev.posterior(log_d, 0.3)
    f_lowrank = (V * sd) @ mean
    Kf = K - 0.3 * np.eye(m)
    np.testing.assert_allclose(f_lowrank, Kf @ np.linalg.solve(K, y), atol=1e-10)
    cov_f = (V * sd) @ cov @ (V * sd).T
    np.testing.assert_allclose(cov_f, Kf - Kf @ np.linalg.solve(K, Kf), atol=1e-10)


@pytest.mark.parametrize("likelihood", [LogisticLikelihood, PoissonLikelihood])
def test_laplace_binary_mode_and_evidence(rng, likelihood):
    m = 25
    K = _kernel(rng, m)
    if likelihood is LogisticLikelihood:
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    else:
        y = rng.poisson(2.0, m).astype(float)
    st = laplace_binary(K, y, likelihood)
    g, w = likelihood.grad_hess(y, st.f)
    np.testing.assert_allclose(st.f, K @ g, atol=1e-7)  # stationarity f = K ∇log p
    # Laplace evidence written out with the dense inverse (R&W eq. 3.32)
    Kinv = np.linalg.inv(K)
    ref = (likelihood.log_prob(y, st.f).sum() - 0.5 * st.f @ Kinv @ st.f
           - 0.5 * np.linalg.slogdet(np.eye(m) + np.sqrt(w)[:, None] * K * np.sqrt(w))[1])
    np.testing.assert_allclose(st.log_evidence, ref, rtol=1e-7)


def test_laplace_binary_prediction_matches_dense(rng):
    m, n = 20, 7
    F = rng.standard_normal((m + n, 4))
    Kall = F @ F.T + 0.1 * np.eye(m + n)
    K, Ks, kss = Kall[:m, :m], Kall[:m, m:], np.diag(Kall)[m:]
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    st = laplace_binary(K, y)
    mean, var = binary_predict(st, Ks, kss)
    W = np.diag(expit(st.f) * (1 - expit(st.f)))
    np.testing.assert_allclose(mean, Ks.T @ np.linalg.solve(K, st.f), atol=1e-7)
    ref_var = kss - np.einsum("ij,ij->j", Ks, np.linalg.solve(K + np.linalg.inv(W), Ks))
    np.testing.assert_allclose(var, ref_var, atol=1e-8)


@pytest.mark.parametrize("m, M, n_zero", [(12, 30, 0), (30, 12, 0), (12, 30, 20),
                                          (30, 12, 4)])
def test_low_rank_binary_prediction_matches_dense(rng, m, M, n_zero):
    """Both branches (m < M: n x m GEMM; m >= M: M x M form) against the dense formula,
    also with weights that are exactly 0 (their columns are skipped; with 20 of 30 zero
    the m < M case takes the M x M form)."""
    n = 9
    V = rng.standard_normal((m + n, M)) / np.sqrt(M)
    w = np.exp(rng.normal(size=M))
    w[rng.choice(M, n_zero, replace=False)] = 0.0
    Kall = (V * w) @ V.T
    K, Ks, kss = Kall[:m, :m], Kall[:m, m:], np.diag(Kall)[m:]
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    st = laplace_binary(K, y)
    mean, var = binary_predict_low_rank(st, V[:m], w, V[m:])
    ref_mean, ref_var = binary_predict(st, Ks, kss)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-10)
    np.testing.assert_allclose(var, ref_var, atol=1e-10)
    with pytest.raises(ValueError, match="columns"):
        binary_predict_low_rank(st, V[:m], w, V[m:, :-1])
    with pytest.raises(ValueError, match="one weight per column"):
        active_columns(V[:m], w[:-1], V[m:])


@pytest.mark.parametrize("m, M, zeros", [(12, 30, False), (30, 12, False), (12, 30, True)])
def test_stacked_binary_predictions_match_the_dense_formula(rng, m, M, zeros):
    """Several posteriors (one per spectral weighting) at once, against the dense
    R&W formula for each; ``zeros``: the weightings zero different columns (a long
    diffusion time zeroes the fast modes)."""
    n = 9
    V = rng.standard_normal((m + n, M)) / np.sqrt(M)
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    W = np.exp(rng.normal(size=(3, M))) * np.array([[0.5], [1.0], [2.0]])
    if zeros:
        W[1, 10:] = 0.0
        W[2, 25:] = 0.0
    states = [laplace_binary((V[:m] * w) @ V[:m].T, y) for w in W]
    mean, var = binary_predict_low_rank_many(states, V[:m], W, V[m:])
    assert mean.shape == var.shape == (n, 3)
    for k, (st, w) in enumerate(zip(states, W)):
        Kall = (V * w) @ V.T
        ref_mean, ref_var = binary_predict(st, Kall[:m, m:], np.diag(Kall)[m:])
        np.testing.assert_allclose(mean[:, k], ref_mean, atol=1e-10)
        np.testing.assert_allclose(var[:, k], ref_var, atol=1e-10)
    with pytest.raises(ValueError, match="one row of"):
        binary_predict_low_rank_many(states[:2], V[:m], W, V[m:])


def test_laplace_softmax_mode_and_evidence(rng):
    m, C = 18, 3
    K = _kernel(rng, m)
    codes = rng.integers(0, C, m)
    Y = np.eye(C)[codes]
    st = laplace_softmax(K, Y)
    pi = softmax(st.f, axis=1)
    np.testing.assert_allclose(st.f, K @ (Y - pi), atol=1e-7)
    # dense reference: W = diag(π) - Π Π^T over the stacked (class-major) vector
    Wfull = np.zeros((m * C, m * C))
    for i in range(m):
        idx = np.arange(C) * m + i
        Wfull[np.ix_(idx, idx)] = np.diag(pi[i]) - np.outer(pi[i], pi[i])
    Kbig = np.kron(np.eye(C), K)
    f = st.f.T.ravel()
    Kinv = np.linalg.inv(Kbig)
    lp = np.sum(Y * np.log(pi))
    ref = lp - 0.5 * f @ Kinv @ f - 0.5 * np.linalg.slogdet(np.eye(m * C) + Kbig @ Wfull)[1]
    np.testing.assert_allclose(st.log_evidence, ref, rtol=1e-6)
    # predictive mean and per-class variance (R&W eq. 3.40, 3.43 diagonal)
    Ks = _kernel(rng, m)[:, :4]
    kss = np.full(4, 2.0)
    mean, var = softmax_predict(st, Ks, kss)
    np.testing.assert_allclose(mean, Ks.T @ (Y - pi), atol=1e-8)
    Ksbig = np.kron(np.eye(C), Ks)
    cov = np.kron(np.eye(C), np.diag(kss)) - Ksbig.T @ np.linalg.solve(
        Kbig + np.linalg.pinv(Wfull + 1e-12 * np.eye(m * C)), Ksbig)
    np.testing.assert_allclose(var, np.diag(cov).reshape(C, 4).T, rtol=1e-4, atol=1e-6)


def test_softmax_probabilities_match_independent_integrals(rng):
    """The quasi-Monte-Carlo ``E[softmax(f)]``, f_c ~ N(mu_c, var_c) independent, against
    (i) plain Monte Carlo with 40,000 samples, (ii) Gauss-Hermite quadrature of the
    logistic-normal integral for two classes, (iii) the softmax itself at zero variance."""
    from flgp.models.inference.laplace import softmax_probabilities
    mu = 2.0 * rng.standard_normal((600, 5))
    var = rng.uniform(0.0, 6.0, (600, 5))
    eps = np.random.default_rng(9).standard_normal((40_000, 5))
    ref = np.concatenate([softmax(mu[i:i + 50, None] + np.sqrt(var[i:i + 50, None]) * eps,
                                  axis=2).mean(1) for i in range(0, 600, 50)])
    p = softmax_probabilities(mu, var)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    assert np.abs(p - ref).mean() < 0.008          # measured 0.004 (plain MC-256: 0.012)
    assert np.abs(softmax_probabilities(mu, var, n_samples=512) - ref).mean() < 0.003
    # two classes: E[sigma(f1 - f0)], f1 - f0 ~ N(mu1 - mu0, var0 + var1)
    x, w = np.polynomial.hermite_e.hermegauss(200)
    d, s = mu[:, 1] - mu[:, 0], np.sqrt(var[:, :2].sum(1))
    exact = (expit(d[:, None] + s[:, None] * x[None]) * w).sum(1) / w.sum()
    p2 = softmax_probabilities(mu[:, :2], var[:, :2])
    assert np.abs(p2[:, 1] - exact).max() < 0.02   # measured 0.008
    np.testing.assert_allclose(softmax_probabilities(mu, 0.0 * var), softmax(mu, axis=1),
                               rtol=1e-5)
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        softmax_probabilities(mu, var, n_samples=0)
