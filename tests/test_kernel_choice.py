"""The regressor's default weighs the manifold (heat kernel) against the Euclidean (RBF)
GP by their evidence; the RBF GP is exact."""

import warnings

import numpy as np
import pytest

from flgp import FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
from flgp.datasets import make_concentric_circles, make_spiral


def _blob(n=8000, seed=0):
    """A smooth bump in 3-D cut at a threshold: smooth in the ambient space, the region's
    own geometry irrelevant - the RBF must win."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    f = np.exp(-np.sum((X - 0.2) ** 2, 1) / 0.3)
    keep = f > 0.25
    X, f = X[keep], f[keep]
    return X, f + 0.02 * rng.standard_normal(f.size), f


def _rings(n=2400, seed=0):
    """Six concentric circles with opposite values on neighbouring circles: the value
    follows the folded curve, not the plane - the manifold must win."""
    X, c = make_concentric_circles(n, random_state=seed)
    f = 2.0 * c - 1.0
    return X, f + 0.05 * np.random.default_rng(seed).standard_normal(n), f


def _semi(y, frac, seed):
    rng = np.random.default_rng(seed)
    obs = rng.random(y.size) < frac
    return np.where(obs, y, np.nan), obs


@pytest.mark.parametrize("make, manifold_wins", [(_blob, False), (_rings, True)])
def test_the_default_chooses_the_prior_the_map_follows(make, manifold_wins):
    """A map that follows the manifold gets a graph prior (the low-rank heat kernel or the
    graph Matérn prior on the k-NN graph, whichever has the higher evidence: on the rings
    the graph Matérn prior, whose error is a sixteenth of the heat kernel's), a map smooth
    in the plane the RBF GP."""
    X, y, f = make()
    y_semi, obs = _semi(y, 0.15, 1)
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, prior in (("flgp", HeatKernelPrior()), ("graph_matern", GraphMaternPrior()),
                              ("rbf", RBFPrior()), ("auto", None)):
            fits[method] = FLGPRegressor(prior).fit(X, y_semi)
    auto = fits["auto"]
    assert FLGPRegressor().method == "auto"
    winner = max(auto.log_evidence_, key=auto.log_evidence_.get)
    assert auto.method_ == winner
    assert (winner in ("flgp", "graph_matern")) == manifold_wins
    mse = {k: float(np.mean((r.transduction_[~obs] - f[~obs]) ** 2)) for k, r in fits.items()}
    losers = ["rbf"] if manifold_wins else ["flgp", "graph_matern"]
    for loser in losers:          # the sets are built so that it does
        assert mse[winner] < 0.5 * mse[loser], mse
    assert mse["auto"] == pytest.approx(mse[winner], rel=1e-6)
    # the evidences it compared are those of the fits alone; a prior it left out (by the
    # heat kernel's ceiling, or screened out) indeed ends below the winner fitted alone
    for method in ("flgp", "graph_matern", "rbf"):
        # (the graph Matérn fit's maximum: its log_marginal_likelihood_ is the evidence
        # at the cross-validated amplitude it reports)
        alone = (fits[method].matern_log_evidence_[fits[method].matern_order_]
                 if method == "graph_matern" else fits[method].log_marginal_likelihood_)
        if method in auto.log_evidence_:
            assert auto.log_evidence_[method] == pytest.approx(alone, rel=1e-9)
        else:
            assert method in auto.skipped_methods_ and alone < auto.log_evidence_[winner]
    lo, hi = auto.predict_interval(X[~obs], coverage=0.95)
    cover = np.mean((y[~obs] >= lo) & (y[~obs] <= hi))
    assert 0.88 <= cover <= 0.99, cover


def test_the_rbf_gp_is_exact():
    """The RBF GP's posterior mean and sd are those of the dense formulas at its fitted
    hyperparameters (GPyTorch's fast variances inflated the sd 14-fold on a brain map)."""
    X, y, f = make_spiral(600, noise=0.3, random_state=0)
    y_semi, obs = _semi(y, 0.3, 2)
    reg = FLGPRegressor(RBFPrior()).fit(X, y_semi)
    rbf = reg.rbf_
    Z = (X - rbf.mu_) / rbf.sd_
    Zl, yl = Z[obs], y[obs]

    def k(A, B):
        d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
        return rbf.outputscale_ * np.exp(-d2 / (2 * rbf.lengthscale_ ** 2))

    K = k(Zl, Zl) + rbf.noise_ * np.eye(obs.sum())
    Ks = k(Z[:50], Zl)
    mean = rbf.constant_ + Ks @ np.linalg.solve(K, yl - rbf.constant_)
    var = rbf.outputscale_ - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
    got_mean, got_sd = reg.predict(X[:50], return_std=True)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got_sd, np.sqrt(np.maximum(var, 0)), rtol=1e-5, atol=1e-8)
    # the transduction (every row in one block) agrees with row-by-row predictions
    one = [reg.predict(X[i:i + 1], return_std=True) for i in (0, 17, 599)]
    np.testing.assert_allclose([m[0] for m, _ in one], reg.transduction_[[0, 17, 599]],
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose([s[0] for _, s in one], reg.transduction_std_[[0, 17, 599]],
                               rtol=1e-8, atol=1e-12)
    sign, logdet = np.linalg.slogdet(K)
    r = yl - rbf.constant_
    lml = -0.5 * r @ np.linalg.solve(K, r) - 0.5 * logdet - 0.5 * r.size * np.log(2 * np.pi)
    assert reg.log_marginal_likelihood_ == pytest.approx(lml, rel=1e-6)
