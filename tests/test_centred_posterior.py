"""The centred graph Matérn posterior through its sparse posterior precision
(flgp.precision.centred_posterior) against the dense Gaussian-process algebra."""

import numpy as np
import pytest

from flgp.graph.knn import self_tuning_knn_graph
from flgp.graph.lattice import lattice_graph
from flgp.precision import SparsePrecisionPrior
from flgp.precision.centred_posterior import CentredPosterior
from flgp.precision.matern import matern_precision


def _knn_problem(n=240, seed=0, m=12):
    rng = np.random.default_rng(seed)
    X = np.r_[rng.standard_normal((n // 2, 3)), rng.standard_normal((n - n // 2, 3)) + 3.0]
    g = self_tuning_knn_graph(X, 8)
    nodes = np.sort(rng.choice(n, m, replace=False))
    return g, nodes, rng


def _dense_prior(g, kappa2, nu):
    n = g.n_nodes
    Q = matern_precision(g, kappa2, nu).toarray()
    P = np.eye(n) - 1.0 / n
    return P @ np.linalg.inv(Q) @ P


def _dense_posterior(K, observed, c):
    """Mean operator, covariance of the centred prior K given observations at ``observed``
    (rows, repeats allowed) with noise precision c: K Hᵀ (H K Hᵀ + I/c)⁻¹ and
    K - K Hᵀ (H K Hᵀ + I/c)⁻¹ H K."""
    Kl = K[:, observed]
    S = K[np.ix_(observed, observed)] + np.eye(observed.size) / c
    gain = Kl @ np.linalg.inv(S)
    return gain, K - gain @ Kl.T, np.linalg.slogdet(np.eye(observed.size) + c * K[np.ix_(observed, observed)])[1]


@pytest.mark.parametrize("solver,nu", [("cholesky", 1), ("cholesky", 2), ("amg", 1)])
def test_posterior_mean_covariance_and_log_det_are_the_dense_ones(solver, nu):
    """c P Q̂⁻¹ B equals the dense K Hᵀ (K_ll + I/c)⁻¹ T, the covariance columns the dense
    posterior covariance, the log-determinant log|I + c K_ll| (factored), for a node
    observed twice too."""
    g, nodes, rng = _knn_problem()
    kappa2 = 1e-3
    observed = np.r_[nodes, nodes[:2]]               # two nodes observed twice
    counts = np.bincount(observed, minlength=g.n_nodes).astype(float)
    T = rng.standard_normal((observed.size, 3))
    T -= T.mean(axis=0)
    B = np.zeros((g.n_nodes, 3))
    np.add.at(B, observed, T)
    K = _dense_prior(g, kappa2, nu)
    prior = SparsePrecisionPrior(g, nu=nu, kappa2=kappa2, centred=True, solver=solver,
                                 tol=1e-12)
    for c in (1e-3, 0.3, 30.0):
        post = CentredPosterior(prior, counts, c)
        gain, cov, logdet = _dense_posterior(K, observed, c)
        scale = np.abs(gain @ T).max()
        np.testing.assert_allclose(c * post.solve(B), gain @ T, atol=1e-8 * scale)
        cols = post.covariance_columns(nodes[:3])
        np.testing.assert_allclose(cols, cov[:, nodes[:3]] * 1.0,
                                   atol=1e-8 * np.abs(cov).max())
        if solver == "cholesky":
            assert post.log_det_ratio() == pytest.approx(logdet, rel=1e-9, abs=1e-9)
        else:
            assert post.log_det_ratio() is None


@pytest.mark.parametrize("solver,nu", [("cholesky", 1), ("cholesky", 2), ("amg", 1)])
def test_posterior_variances_by_rao_blackwellised_draws(solver, nu):
    """The Rao-Blackwellised variances agree with the dense posterior's diagonal within
    five of their standard errors at every node (and to a few per cent on average)."""
    g, nodes, rng = _knn_problem(seed=1)
    kappa2 = 1e-3
    counts = np.bincount(nodes, minlength=g.n_nodes).astype(float)
    K = _dense_prior(g, kappa2, nu)
    prior = SparsePrecisionPrior(g, nu=nu, kappa2=kappa2, centred=True, solver=solver,
                                 tol=1e-12)
    for c in (1e-3, 30.0):
        post = CentredPosterior(prior, counts, c)
        _, cov, _ = _dense_posterior(K, nodes, c)
        var, se = post.variances(400, random_state=0)
        exact = np.diag(cov)
        assert np.all(np.abs(var - exact) <= 5 * se + 1e-9 * exact.max())
        assert abs(var.mean() / exact.mean() - 1.0) < 0.05


def test_the_factor_follows_the_posterior_that_asks():
    """Two posteriors of one prior share its factor: each solve refactors when the other
    held it last, and both give their own dense answers."""
    g, nodes, rng = _knn_problem(seed=2)
    prior = SparsePrecisionPrior(g, nu=1, kappa2=1e-3, centred=True, solver="cholesky")
    counts = np.bincount(nodes, minlength=g.n_nodes).astype(float)
    K = _dense_prior(g, 1e-3, 1)
    T = rng.standard_normal((nodes.size, 1))
    T -= T.mean()
    B = np.zeros((g.n_nodes, 1))
    B[nodes] = T
    a, b = CentredPosterior(prior, counts, 0.1), CentredPosterior(prior, counts, 10.0)
    for post, c in ((a, 0.1), (b, 10.0), (a, 0.1)):
        gain, _, _ = _dense_posterior(K, nodes, c)
        np.testing.assert_allclose(c * post.solve(B), gain @ T, atol=1e-9)


def test_iterative_posterior_refuses_what_it_cannot_solve():
    """The iterative path solves order 1 on uniform mass only; bad counts and precisions
    are refused with the fix."""
    lat = lattice_graph(np.argwhere(np.ones((6, 5, 1), bool)))
    g, nodes, _ = _knn_problem(seed=3)
    counts = np.bincount(nodes, minlength=g.n_nodes).astype(float)
    with pytest.raises(ValueError, match="order 1 on a graph of uniform mass"):
        CentredPosterior(SparsePrecisionPrior(g, nu=2, kappa2=1e-3, centred=True,
                                              solver="amg"), counts, 1.0)
    prior = SparsePrecisionPrior(g, nu=1, kappa2=1e-3, centred=True, solver="amg")
    with pytest.raises(ValueError, match="one non-negative count a node"):
        CentredPosterior(prior, counts[:-1], 1.0)
    with pytest.raises(ValueError, match="at least one of them positive"):
        CentredPosterior(prior, np.zeros(g.n_nodes), 1.0)
    with pytest.raises(ValueError, match="precision must be finite"):
        CentredPosterior(prior, counts, np.nan)
    with pytest.raises(ValueError, match="centred prior of amplitude 1"):
        CentredPosterior(SparsePrecisionPrior(lat, nu=1, kappa2=1.0), np.ones(30), 1.0)
