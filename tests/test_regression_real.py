"""FLGP regression on a voxel-grid "activation map" (the setting of He et al., Sec. 5.3)
against independent dense computations.

The map is synthetic (two smooth blobs of opposite sign on a 3 mm grid, the region
``|z| > 1.96``), small enough that every quantity the low-rank route computes can be written
out densely: the evidence ``log N(y | ȳ, s^2 C_t + σ^2 I)``, the MAP conditions of
``(t, s^2, σ^2)`` and the posterior mean at the unlabelled voxels.
"""

import warnings

import numpy as np
import pytest
import scipy.stats

from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior


def _voxel_map(seed=0):
    g = np.arange(16) * 3.0
    X = np.stack(np.meshgrid(g, g, g[:10], indexing="ij"), -1).reshape(-1, 3)
    c1, c2 = np.array([14.0, 14.0, 12.0]), np.array([33.0, 33.0, 15.0])
    z = (10 * np.exp(-((X - c1) ** 2).sum(1) / (2 * 7.0 ** 2))
         - 9 * np.exp(-((X - c2) ** 2).sum(1) / (2 * 6.0 ** 2)))
    z = z + 0.1 * np.random.default_rng(seed).standard_normal(len(z))
    keep = np.abs(z) > 1.96  # 485 voxels in two blobs of opposite sign
    return X[keep], z[keep]


@pytest.fixture(scope="module")
def fitted():
    X, z = _voxel_map()
    n = len(z)
    lab = np.random.default_rng(1).choice(n, size=int(0.3 * n), replace=False)
    y = np.full(n, np.nan)
    y[lab] = z[lab]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the two blobs are two components of the graph
        est = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=200, n_neighbors=3, n_eigenpairs=100)),
                            random_state=0).fit(X, y)
    return est, X, z, lab


def _dense_parts(est, lab):
    ep = est.eigenpairs_
    V = ep.eigenvectors
    w = est.outputscale_ * ep.kernel_scale * np.exp(-est.diffusion_time_ * ep.eigenvalues)
    C = (V * w) @ V.T
    return C, C[np.ix_(lab, lab)]


def _dense_log_evidence(est, C_lab, y_lab, t=None, s2=None, noise=None):
    t = est.diffusion_time_ if t is None else t
    s2 = est.outputscale_ if s2 is None else s2
    noise = est.noise_ if noise is None else noise
    ep = est.eigenpairs_
    V = ep.eigenvectors[est.labelled_indices_]
    K = (V * (s2 * ep.kernel_scale * np.exp(-t * ep.eigenvalues))) @ V.T
    K += noise * np.eye(len(y_lab))
    return scipy.stats.multivariate_normal(np.full(len(y_lab), y_lab.mean()), K).logpdf(y_lab)


def test_log_marginal_likelihood_is_the_dense_evidence(fitted):
    est, X, z, lab = fitted
    C, C_lab = _dense_parts(est, np.sort(lab))
    y_lab = z[np.sort(lab)]
    np.testing.assert_allclose(est.log_marginal_likelihood_,
                               _dense_log_evidence(est, C_lab, y_lab), rtol=1e-8)


def test_hyperparameters_are_a_local_map(fitted):
    """The optimiser converged: no small move of log t, log s^2 or log σ^2 raises the dense
    log posterior ``evidence - (a0 - 1) log t``."""
    est, X, z, lab = fitted
    y_lab = z[np.sort(lab)]
    a = est.diffusion_time_prior_power - 1.0
    base = dict(t=est.diffusion_time_, s2=est.outputscale_, noise=est.noise_)

    def log_post(p):
        return _dense_log_evidence(est, None, y_lab, **p) - a * np.log(p["t"])

    ref = log_post(base)
    for key in base:
        for step in (-0.05, 0.05):
            p = dict(base)
            p[key] = base[key] * np.exp(step)
            assert log_post(p) <= ref + 1e-4, (key, step)


def _assert_dense_posterior(est, X, z, lab):
    """Posterior mean (``transduction_``) and sd of f (``predict``) at the unlabelled points
    against the dense GP formulas with the fitted hyperparameters."""
    C, C_lab = _dense_parts(est, lab)
    y_lab = z[lab]
    alpha = np.linalg.solve(C_lab + est.noise_ * np.eye(len(lab)), y_lab - y_lab.mean())
    ref = y_lab.mean() + C[:, lab] @ alpha
    unl = np.setdiff1d(np.arange(len(z)), lab)
    np.testing.assert_allclose(est.transduction_[unl], ref[unl], atol=1e-8)
    # C_uu - C_ul (C_ll + noise I)^{-1} C_lu
    cov_ul = C[np.ix_(unl, lab)]
    ref_var = np.diag(C)[unl] - np.einsum(
        "ij,ji->i", cov_ul, np.linalg.solve(C_lab + est.noise_ * np.eye(len(lab)), cov_ul.T))
    mean, std = est.predict(X[unl], return_std=True)
    np.testing.assert_allclose(mean, ref[unl], atol=1e-8)
    np.testing.assert_allclose(std, np.sqrt(np.maximum(ref_var, 0.0)), atol=1e-6)
    return unl


def test_long_diffusion_time_skips_negligible_modes_exactly():
    """At a long diffusion time most modes' prior weights fall below 1e-16 of the largest;
    the prediction drops their columns, and still equals the dense posterior."""
    X, z = _voxel_map()
    n = len(z)
    lab = np.sort(np.random.default_rng(2).choice(n, size=int(0.3 * n), replace=False))
    y = np.full(n, np.nan)
    y[lab] = z[lab]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=200, n_neighbors=3, n_eigenpairs=100), diffusion_time=300.0), random_state=0).fit(X, y)
    w = np.exp(-300.0 * est.eigenvalues_)
    assert 5 < np.count_nonzero(w >= 1e-16 * w.max()) < 90
    _assert_dense_posterior(est, X, z, lab)


def test_transduction_is_the_dense_posterior_mean_and_fits_the_map(fitted):
    est, X, z, lab = fitted
    lab = np.sort(lab)
    unl = _assert_dense_posterior(est, X, z, lab)
    # and the map is recovered: error well below its spread
    assert np.mean((est.transduction_[unl] - z[unl]) ** 2) < 0.1 * np.var(z)
