"""Expectation propagation for probit and multinomial-probit GP classification
(:mod:`flgp.models.inference.ep`) against independent computations: the textbook sequential EP in
function space (R&W Algorithm 3.5), importance sampling of the exact posterior, Genz's
multivariate normal probabilities, and the posterior covariance formed and inverted
densely."""

import numpy as np
import pytest
from numpy.polynomial.hermite import hermgauss
from scipy.special import log_ndtr, logsumexp, ndtr
from scipy.stats import multivariate_normal

from flgp.models.inference.ep import (_outer_sites, ep_multinomial_probit, ep_probit,
                            multinomial_latent, multinomial_predict,
                            multinomial_predict_projected, multinomial_projection,
                            orthant_log_probability, probit_latent, probit_latent_projected,
                            probit_probabilities, probit_projection)


def _features(rng, m, d, scale=1.0):
    return scale * rng.normal(size=(m, d)) / np.sqrt(d)


def _sequential_ep(K, y, sweeps=200):
    """R&W Algorithm 3.5/3.6 and eq. 3.65, written out plainly (function space, one site
    at a time, rank-one updates of the m x m posterior covariance)."""
    m = K.shape[0]
    tau, nu = np.zeros(m), np.zeros(m)
    Sigma, mu = K.copy(), np.zeros(m)
    for _ in range(sweeps):
        for i in range(m):
            tc = 1 / Sigma[i, i] - tau[i]
            nc = mu[i] / Sigma[i, i] - nu[i]
            vc, mc = 1 / tc, nc / tc
            z = y[i] * mc / np.sqrt(1 + vc)
            ratio = np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(z))
            mh = mc + y[i] * vc * ratio / np.sqrt(1 + vc)
            vh = vc - vc ** 2 * ratio * (z + ratio) / (1 + vc)
            dt = 1 / vh - tc - tau[i]
            tau[i] += dt
            nu[i] = mh / vh - nc
            s = Sigma[:, i].copy()
            Sigma -= np.outer(s, s) * dt / (1 + dt * s[i])
            mu = Sigma @ nu
        # recompute from scratch (as Alg. 3.5 does after each sweep)
        sw = np.sqrt(tau)
        L = np.linalg.cholesky(np.eye(m) + sw[:, None] * K * sw[None, :])
        V = np.linalg.solve(L, sw[:, None] * K)
        Sigma = K - V.T @ V
        mu = Sigma @ nu
    tc = 1 / np.diag(Sigma) - tau
    nc = mu / np.diag(Sigma) - nu
    vc, mc = 1 / tc, nc / tc
    log_z = log_ndtr(y * mc / np.sqrt(1 + vc))
    mu_t = nu / tau
    # eq. 3.65 term by term
    log_ev = (np.sum(log_z) + 0.5 * np.sum(np.log(vc + 1 / tau))
              + np.sum((mc - mu_t) ** 2 / (2 * (vc + 1 / tau)))
              + multivariate_normal(np.zeros(m), K + np.diag(1 / tau)).logpdf(mu_t)
              + 0.5 * m * np.log(2 * np.pi))
    return mu, Sigma, tau, nu, log_ev, log_z.sum()


def test_probit_ep_matches_textbook_sequential_ep():
    rng = np.random.default_rng(0)
    m, d = 14, 9
    Phi = _features(rng, m, d, 2.0)
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    st = ep_probit(Phi, y, tol=1e-12, max_sweeps=2000)
    K = Phi @ Phi.T + 1e-10 * np.eye(m)
    mu, Sigma, tau, nu, log_ev, log_loo = _sequential_ep(K, y)
    np.testing.assert_allclose(st.tau, tau, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(st.nu, nu, rtol=1e-6, atol=1e-9)
    mean, var = probit_latent(st, Phi)
    np.testing.assert_allclose(mean, mu, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(var, np.diag(Sigma), rtol=1e-6, atol=1e-8)
    assert st.log_evidence == pytest.approx(log_ev, abs=1e-6)
    assert st.log_loo == pytest.approx(log_loo, abs=1e-6)
    # new points: R&W Algorithm 3.6 with the cross covariance
    Phi_new = _features(rng, 5, d, 2.0)
    Ks = Phi @ Phi_new.T
    sw = np.sqrt(tau)
    L = np.linalg.cholesky(np.eye(m) + sw[:, None] * K * sw[None, :])
    z = sw * np.linalg.solve(L.T, np.linalg.solve(L, sw * (K @ nu)))
    f_mean = Ks.T @ (nu - z)
    v = np.linalg.solve(L, sw[:, None] * Ks)
    f_var = (Phi_new * Phi_new).sum(1) - (v * v).sum(0)
    mean, var = probit_latent(st, Phi_new)
    np.testing.assert_allclose(mean, f_mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(var, f_var, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(probit_probabilities(mean, var),
                               ndtr(f_mean / np.sqrt(1 + f_var)), atol=1e-8)


def test_probit_ep_warm_start_reaches_the_same_fixed_point():
    rng = np.random.default_rng(1)
    Phi = _features(rng, 30, 6, 3.0)
    y = np.sign(Phi[:, 0] + 0.3 * rng.normal(size=30))
    cold = ep_probit(Phi, y, tol=1e-12, max_sweeps=2000)
    other = ep_probit(2.0 * Phi, y, tol=1e-12, max_sweeps=2000)
    warm = ep_probit(Phi, y, init=other, tol=1e-12, max_sweeps=2000)
    np.testing.assert_allclose(warm.mean_z, cold.mean_z, atol=1e-8)
    assert warm.log_evidence == pytest.approx(cold.log_evidence, abs=1e-8)


def test_nested_ep_with_two_classes_is_binary_probit_ep():
    """Two classes: P(argmax(f + e) = 1) = Φ((f1 - f0) / √2) and (f1 - f0) / √2 has the
    prior of one latent with the same kernel, so nested EP is exactly binary EP."""
    rng = np.random.default_rng(2)
    m, d = 20, 7
    Phi = _features(rng, m, d, 3.0)
    codes = (Phi[:, 1] + 0.5 * rng.normal(size=m) > 0).astype(np.int64)
    b = ep_probit(Phi, 2.0 * codes - 1, tol=1e-12, max_sweeps=2000)
    mc = ep_multinomial_probit(Phi, codes, 2, tol=1e-12, max_sweeps=2000)
    assert mc.log_evidence == pytest.approx(b.log_evidence, abs=1e-7)
    assert mc.log_loo == pytest.approx(b.log_loo, abs=1e-7)
    Phi_new = _features(rng, 9, d, 3.0)
    p1 = probit_probabilities(*probit_latent(b, Phi_new))
    P = multinomial_predict(mc, Phi_new, top_k=2)
    np.testing.assert_allclose(P[:, 1], p1, atol=1e-7)


def _mnp_log_lik(F, y, nodes=20):
    """log P(argmax(f + e) = y) by Gauss-Hermite in the label's noise; F (..., C)."""
    x, w = hermgauss(nodes)
    fy = np.take_along_axis(F, y[..., None], -1)
    u = fy + np.sqrt(2.0) * x                                      # (..., Q)
    lp = log_ndtr(u[..., :, None] - F[..., None, :])               # (..., Q, C)
    C = F.shape[-1]
    own = np.arange(C) == y[..., None]                             # (..., C)
    lp = np.where(own[..., None, :], 0.0, lp).sum(-1)
    return logsumexp(lp + np.log(w / np.sqrt(np.pi)), axis=-1)


def test_nested_ep_against_importance_sampling_of_the_exact_posterior():
    """Three classes, 10 labels, 3 weights per class: the exact posterior by importance
    sampling from the prior (60,000 draws). EP's log marginal likelihood and predictive
    class probabilities must be close to the exact ones (EP is an approximation: the
    tolerances are a few times the Monte-Carlo error and much smaller than the effects
    they guard, e.g. dropping the between-class dependences moves the probabilities by
    0.05-0.1 here)."""
    rng = np.random.default_rng(3)
    m, d, C = 10, 3, 3
    Phi = _features(rng, m, d, 1.5)
    codes = rng.integers(0, C, m)
    st = ep_multinomial_probit(Phi, codes, C, tol=1e-10, max_sweeps=2000)
    Phi_new = _features(rng, 8, d, 1.5)
    S = 60_000
    Z = rng.normal(size=(S, d, C))
    log_w = _mnp_log_lik(np.einsum("md,sdc->smc", Phi, Z), np.broadcast_to(codes, (S, m)))
    log_w = log_w.sum(1)
    log_ev = logsumexp(log_w) - np.log(S)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    assert 1.0 / np.sum(w * w) > 1000                             # effective sample size
    assert st.log_evidence == pytest.approx(log_ev, abs=0.1)
    F_new = np.einsum("nd,sdc->snc", Phi_new, Z)                   # (S, n, C)
    exact = np.stack([np.exp(_mnp_log_lik(F_new, np.full((S, Phi_new.shape[0]), c))).T @ w
                      for c in range(C)], 1)
    P = multinomial_predict(st, Phi_new, top_k=C)
    assert np.abs(P - exact).max() < 0.02
    # the latent means too
    mean, _ = multinomial_latent(st, Phi_new)
    np.testing.assert_allclose(mean, np.einsum("snc,s->nc", F_new, w), atol=0.1)


def test_multinomial_posterior_matches_the_dense_joint_posterior():
    """The Woodbury algebra (per-class factors and one m x m correction) against the
    (C d) x (C d) posterior precision formed from the outer sites and inverted densely."""
    rng = np.random.default_rng(4)
    m, d, C = 16, 5, 4
    Phi = _features(rng, m, d, 2.0)
    codes = rng.integers(0, C, m)
    st = ep_multinomial_probit(Phi, codes, C, tol=1e-10, max_sweeps=2000)
    dd, s, h = _outer_sites(st.tau, st.nu, codes, st.others, C)
    prec = np.eye(C * d)
    eta = np.zeros(C * d)
    for i in range(m):
        T = np.diag(dd[i]) - np.outer(dd[i], dd[i]) / s[i]         # site precision in f_i
        prec += np.kron(T, np.outer(Phi[i], Phi[i]))                # class-major weights
        eta += np.kron(h[i], Phi[i])
    cov = np.linalg.inv(prec)
    mean = cov @ eta
    np.testing.assert_allclose(st.mean_z.T.ravel(), mean, rtol=1e-8, atol=1e-10)
    Phi_new = _features(rng, 7, d, 2.0)
    mu, Sig = multinomial_latent(st, Phi_new)
    E = np.stack([np.kron(np.eye(C), p) for p in Phi_new])           # (n, C, C d)
    np.testing.assert_allclose(mu, E @ mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Sig, E @ cov @ E.transpose(0, 2, 1), rtol=1e-7, atol=1e-10)
    # the predictive variances multinomial_predict returns are that covariance's diagonal
    _, mu2, var2 = multinomial_predict(st, Phi_new, moments=True)
    np.testing.assert_allclose(mu2, mu, atol=1e-10)
    np.testing.assert_allclose(var2, np.einsum("nii->ni", Sig), rtol=1e-5)


def test_orthant_probability_against_genz():
    rng = np.random.default_rng(5)
    for k in (1, 2, 3):
        A = rng.normal(size=(40, k, k))
        S = A @ A.transpose(0, 2, 1) + 0.2 * np.eye(k)
        mean = rng.normal(size=(40, k)) * np.sqrt(np.einsum("nii->ni", S))
        got = np.exp(orthant_log_probability(mean, S))
        ref = np.array([multivariate_normal(np.zeros(k), S[i]).cdf(mean[i])
                        for i in range(40)])                      # P(x - mean <= mean)
        tol = 1e-10 if k == 1 else 0.03
        assert np.abs(got - ref).max() < tol, k
        if k > 1:
            assert np.abs(got - ref).mean() < 0.005


def test_multinomial_probabilities_against_monte_carlo_of_the_ep_posterior():
    """``multinomial_predict`` against a Monte-Carlo average of P(argmax(f + e) = c | f)
    over the EP posterior's correlated latent (full covariance): the orthant
    approximation with every class, and the default ``top_k`` (the rest by the
    probability of beating the leader)."""
    rng = np.random.default_rng(6)
    m, d, C = 40, 6, 5
    Phi = _features(rng, m, d, 4.0)
    codes = np.argmax(Phi[:, :C] + 0.3 * rng.normal(size=(m, C)), 1)
    st = ep_multinomial_probit(Phi, codes, C)
    Phi_new = _features(rng, 30, d, 4.0)
    mu, Sig = multinomial_latent(st, Phi_new)
    L = np.linalg.cholesky(Sig + 1e-12 * np.eye(C))
    F = mu[None] + np.einsum("nij,snj->sni", L, rng.normal(size=(4000, 30, C)))
    mc = np.stack([np.exp(_mnp_log_lik(F, np.full(F.shape[:2], c))).mean(0)
                   for c in range(C)], 1)
    full = multinomial_predict(st, Phi_new, top_k=C)
    part = multinomial_predict(st, Phi_new)
    assert np.abs(full - mc).max() < 0.03 and np.abs(full - mc).mean() < 0.006
    assert np.abs(part - mc).max() < 0.05 and np.abs(part - mc).mean() < 0.01
    for P in (full, part):
        assert np.all(np.isfinite(P)) and np.all(P >= 0)
        np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)


def test_projected_predictions_equal_the_direct_ones():
    """Predictions from ``φ · projection`` (what FLGP computes on the induced points) equal
    the direct ones: the binary latent moments from triangular solves, and the multi-class
    latent means and variances from the dense joint posterior (``multinomial_latent``)."""
    rng = np.random.default_rng(8)
    m, d, C = 30, 7, 4
    Phi = _features(rng, m, d, 3.0)
    y = np.sign(Phi[:, 0] + 0.2 * rng.normal(size=m))
    st = ep_probit(Phi, y)
    Phi_new = _features(rng, 25, d, 3.0)
    mean, var = probit_latent(st, Phi_new)
    pm, pv = probit_latent_projected(Phi_new @ probit_projection(st))
    np.testing.assert_allclose(pm, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pv, var, rtol=1e-10)
    codes = np.argmax(Phi[:, :C] + 0.3 * rng.normal(size=(m, C)), 1)
    mst = ep_multinomial_probit(Phi, codes, C)
    mu, Sig = multinomial_latent(mst, Phi_new)
    proba, mmean, mvar = multinomial_predict_projected(
        Phi_new @ multinomial_projection(mst), C, d, moments=True)
    np.testing.assert_allclose(mmean, mu, atol=1e-12)
    np.testing.assert_allclose(mvar, np.diagonal(Sig, axis1=1, axis2=2), rtol=1e-9)
    np.testing.assert_allclose(proba, multinomial_predict(mst, Phi_new), atol=1e-12)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_extreme_amplitudes_give_finite_probabilities(scale):
    rng = np.random.default_rng(7)
    Phi = _features(rng, 25, 8, scale)
    codes = rng.integers(0, 4, 25)
    st = ep_multinomial_probit(Phi, codes, 4)
    P = multinomial_predict(st, _features(rng, 50, 8, scale))
    assert np.all(np.isfinite(P)) and np.isfinite(st.log_evidence)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    b = ep_probit(Phi, np.where(codes > 1, 1.0, -1.0))
    p = probit_probabilities(*probit_latent(b, _features(rng, 50, 8, scale)))
    assert np.all(np.isfinite(p)) and np.isfinite(b.log_evidence)
