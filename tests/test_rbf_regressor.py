"""The exact RBF GP regressor (``RBFGPRegressor``, ``FLGPRegressor(method="rbf")``): its
evidence, its optimum, its posterior and its units, each against a dense reference."""

import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from flgp.models.baselines import RBFGPRegressor, _median_scale, _ProfiledEvidence


def _truth(X):
    return 5.0 + 3.0 * np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])


def _toy(m=200, seed=0, noise=0.3):
    """A smooth function of two inputs on [-2, 2]^2, observed with noise sd ``noise``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (m, 2))
    return X, _truth(X) + noise * rng.normal(size=m)


def _kernel(reg, A, B):
    """The fitted RBF kernel (unit amplitude) between raw inputs ``A`` and ``B``."""
    Za, Zb = (A - reg.mu_) / reg.sd_, (B - reg.mu_) / reg.sd_
    d2 = ((Za[:, None, :] - Zb[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2.0 * reg.lengthscale_ ** 2))


def _log_density(reg, X, y, amplitude, constant, ell, ratio):
    """log N(y | c 1, A (K_ell + r I)), dense (scipy)."""
    Z = (X - reg.mu_) / reg.sd_
    d2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    cov = amplitude * (np.exp(-d2 / (2.0 * ell ** 2)) + ratio * np.eye(len(y)))
    return multivariate_normal(np.full(len(y), constant), cov).logpdf(y)


def _profiled(reg, X, y, ell, ratio):
    """The evidence at (ell, r) with the constant (generalised least squares) and the
    amplitude (q / m) at their maximum-likelihood values, densely with numpy."""
    Z = (X - reg.mu_) / reg.sd_
    d2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    S = np.exp(-d2 / (2.0 * ell ** 2)) + ratio * np.eye(len(y))
    one = np.ones(len(y))
    constant = one @ np.linalg.solve(S, y) / (one @ np.linalg.solve(S, one))
    resid = y - constant
    amplitude = resid @ np.linalg.solve(S, resid) / len(y)
    return _log_density(reg, X, y, amplitude, constant, ell, ratio)


@pytest.fixture(scope="module")
def fitted():
    X, y = _toy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # the fit warns about nothing
        reg = RBFGPRegressor().fit(X, y)
    return X, y, reg


def test_the_evidence_is_the_log_density_at_the_fitted_hyperparameters(fitted):
    X, y, reg = fitted
    ratio = reg.noise_ / reg.outputscale_
    ref = _log_density(reg, X, y, reg.outputscale_, reg.constant_, reg.lengthscale_, ratio)
    assert abs(reg.log_marginal_likelihood_ - ref) < 1e-8
    # A and c are the profile's: the evidence is also the densely profiled one
    assert abs(_profiled(reg, X, y, reg.lengthscale_, ratio) - ref) < 1e-8
    assert reg.noise_ == pytest.approx(reg.noise_pre_ * reg.y_unit_ ** 2, rel=1e-15)
    assert 0 < reg.n_iter_ <= 40


def test_the_fitted_point_is_a_local_maximum_of_the_profiled_evidence(fitted):
    """Moving log ell and log r by 0.1 (8 neighbours) does not raise the evidence; the point
    lies inside the search box, so this is the optimiser's work, not a bound's."""
    X, y, reg = fitted
    ell, ratio = reg.lengthscale_, reg.noise_ / reg.outputscale_
    med = _median_scale((X - reg.mu_) / reg.sd_)
    margin = np.exp(0.1)
    assert med / 100 * margin < ell < med * 10 / margin
    assert 1e-6 * margin < ratio < 10.0 / margin
    best = reg.log_marginal_likelihood_
    for d_ell in (-0.1, 0.0, 0.1):
        for d_ratio in (-0.1, 0.0, 0.1):
            if d_ell or d_ratio:
                moved = _profiled(reg, X, y, ell * np.exp(d_ell), ratio * np.exp(d_ratio))
                assert moved <= best + 1e-6, (d_ell, d_ratio, moved - best)


def test_predictions_are_the_dense_posterior(fitted):
    X, y, reg = fitted
    X_new = np.random.default_rng(1).uniform(-2.5, 2.5, (60, 2))
    cov = reg.outputscale_ * _kernel(reg, X, X) + reg.noise_ * np.eye(len(y))
    cross = reg.outputscale_ * _kernel(reg, X_new, X)
    mean = reg.constant_ + cross @ np.linalg.solve(cov, y - reg.constant_)
    var = reg.outputscale_ - np.einsum("ij,ji->i", cross, np.linalg.solve(cov, cross.T))
    got_mean, got_sd = reg.predict(X_new, return_std=True)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(got_sd, np.sqrt(np.maximum(var, 0.0)), rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(reg.predict(X_new, return_std=False), got_mean)


def test_the_fit_is_equivariant_to_a_power_of_two_unit(fitted):
    X, y, reg = fitted
    big = RBFGPRegressor().fit(X, y * 2.0 ** 40)
    X_new = X[:30] + 0.05
    mean, sd = reg.predict(X_new)
    mean_big, sd_big = big.predict(X_new)
    np.testing.assert_allclose(mean_big, mean * 2.0 ** 40, rtol=1e-12)
    np.testing.assert_allclose(sd_big, sd * 2.0 ** 40, rtol=1e-12)
    assert big.lengthscale_ == pytest.approx(reg.lengthscale_, rel=1e-12)
    assert big.log_marginal_likelihood_ == pytest.approx(
        reg.log_marginal_likelihood_ - len(y) * 40 * np.log(2.0), rel=1e-12)


def test_the_fit_recovers_a_smooth_function():
    """200 noisy points (noise sd 0.3; the signal's sd is 1.45): on a 25 x 25 grid inside
    the data the posterior mean is within RMSE 0.15 of the truth. Measured: 0.087-0.109 over
    seeds 0-5; the same GP with its length-scale 3x too short or too long gives 0.28 and
    0.59. The noise sd is recovered within 0.05 (measured 0.288-0.306)."""
    X, y = _toy(seed=0)
    reg = RBFGPRegressor().fit(X, y)
    g = np.linspace(-1.8, 1.8, 25)
    grid = np.c_[np.repeat(g, 25), np.tile(g, 25)]
    rmse = np.sqrt(np.mean((reg.predict(grid, return_std=False) - _truth(grid)) ** 2))
    assert rmse < 0.15, rmse
    assert abs(np.sqrt(reg.noise_) - 0.3) < 0.05


def test_duplicate_points_fit_exactly():
    """Each labelled point three times with different targets, and a cloud collapsed to one
    point: S = K + r I stays positive definite (r >= 1e-6), and the evidence is still the
    dense log density."""
    X, y = _toy(m=60, seed=2)
    X3 = np.repeat(X, 3, axis=0)
    y3 = _truth(X3) + 0.3 * np.random.default_rng(3).normal(size=180)
    reg = RBFGPRegressor().fit(X3, y3)
    mean, sd = reg.predict(X[:10])
    assert np.isfinite(mean).all() and np.isfinite(sd).all()
    ratio = reg.noise_ / reg.outputscale_
    ref = _log_density(reg, X3, y3, reg.outputscale_, reg.constant_, reg.lengthscale_, ratio)
    assert abs(reg.log_marginal_likelihood_ - ref) < 1e-8
    same = RBFGPRegressor().fit(np.zeros((8, 2)), y[:8])
    mean, sd = same.predict(X[:3])
    assert np.isfinite(mean).all() and np.isfinite(sd).all()
    assert np.isfinite(same.log_marginal_likelihood_)


def test_few_or_bad_targets():
    """Two labels fit; one label, NaN or a shape mismatch is a clear error; constant
    targets predict the constant (finite evidence)."""
    X, y = _toy(m=20, seed=4)
    two = RBFGPRegressor().fit(X[:2], y[:2])
    assert np.isfinite(two.predict(X)[0]).all() and np.isfinite(two.log_marginal_likelihood_)
    with pytest.raises(ValueError, match="at least 2"):
        RBFGPRegressor().fit(X[:1], y[:1])
    with pytest.raises(ValueError, match="finite"):
        RBFGPRegressor().fit(X, np.r_[np.nan, y[1:]])
    with pytest.raises(ValueError, match="shape"):
        RBFGPRegressor().fit(X, y[:-1])
    flat = RBFGPRegressor().fit(X, np.full(20, 3.0))
    np.testing.assert_allclose(flat.predict(X[:5], return_std=False), 3.0, rtol=1e-12)
    assert np.isfinite(flat.log_marginal_likelihood_)


def test_the_evidence_gradient_matches_finite_differences():
    X, y = _toy(m=80, seed=5)
    z = (y - y.mean()) / y.std()
    evidence = _ProfiledEvidence(X / X.std(0), z)
    point = np.array([np.log(0.8), np.log(0.05)])
    value, grad = evidence(*point, gradient=True)
    h = 1e-5
    numeric = [(evidence(*(point + h * e))[0] - evidence(*(point - h * e))[0]) / (2 * h)
               for e in np.eye(2)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
    assert evidence(*point)[0] == value


def test_the_keops_backend_runs_the_same_fit(fitted):
    X, y, reg = fitted
    other = RBFGPRegressor(backend="keops").fit(X, y)
    np.testing.assert_array_equal(other.predict(X[:20])[0], reg.predict(X[:20])[0])


def test_median_scale_is_the_median_over_the_pairs():
    """The median heuristic equals sqrt(median over the pairs i < j of |z_i - z_j|^2 / 2)
    from the dense distance matrix's upper triangle (ties, an even and an odd number of
    pairs, more than the 2,000 rows it reads), and 1 where every row coincides."""
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(3)
    for n, p, rounded in ((5, 1, False), (6, 2, True), (300, 3, False), (2100, 2, True)):
        Z = rng.standard_normal((n, p)) * 3.0
        if rounded:
            Z = np.round(Z)
        sub = Z[:2000]
        d2 = cdist(sub, sub, "sqeuclidean")
        expected = np.sqrt(np.median(d2[np.triu_indices_from(d2, 1)]) / 2.0)
        # the same pairs' median (pdist and cdist may round a distance apart on other
        # processors' vector paths)
        assert _median_scale(Z) == pytest.approx(expected, rel=1e-12)
    assert _median_scale(np.ones((7, 3))) == 1.0


@pytest.mark.parametrize("noise", [None, 0.05])
def test_a_screened_search_is_the_unscreened_one(noise):
    """fit_steps(screen=True): its screen is the best evidence over the grid's last noise
    ratio (each point's evidence computed again here), its tightened value at or above that
    and at or below the search's end; sent on, the search fits exactly what fit() fits (the
    rest of the grid evaluated, the refinement from the whole grid's best point)."""
    from flgp.precision.gaussian import Screen

    X, y = _toy(m=150, seed=4)
    whole = RBFGPRegressor(noise=noise).fit(X, y)
    reg = RBFGPRegressor(noise=noise)
    steps = reg.fit_steps(X, y, screen=True)
    screen = next(steps)
    assert isinstance(screen, Screen) and screen.loose
    Z = (X - reg.mu_) / reg.sd_
    z = (y / reg.y_unit_ - reg.y_mean_ / reg.y_unit_) / (reg.y_scale_ / reg.y_unit_)
    noise_z = None if noise is None else noise / reg.y_unit_ ** 2 / (reg.y_scale_
                                                                     / reg.y_unit_) ** 2
    evidence = _ProfiledEvidence(Z, z, noise_z)
    med = _median_scale(Z)
    ratio = (RBFGPRegressor.RATIO_GRID[-1] if noise is None
             else float(np.clip(noise_z / 1.0, *RBFGPRegressor.RATIO_RANGE)))
    best = max(evidence(np.log(med * f), np.log(ratio))[0]
               for f in RBFGPRegressor.LENGTH_FACTORS)
    m = y.size
    to_y = -m * np.log(reg.y_scale_)
    assert screen.log_evidence == pytest.approx(best + to_y, abs=1e-8)
    tight = screen.tighten()
    assert screen.log_evidence - 1e-9 <= tight <= whole.log_marginal_likelihood_ + 1e-6
    try:
        steps.send(None)
    except StopIteration as stop:
        done = stop.value
    # the same search from the same start: equal far inside the search's tolerance
    assert done.log_marginal_likelihood_ == pytest.approx(whole.log_marginal_likelihood_,
                                                          rel=1e-12)
    assert done.lengthscale_ == pytest.approx(whole.lengthscale_, rel=1e-10)
    assert done.noise_ == pytest.approx(whole.noise_, rel=1e-10)
    for a, b in zip(done.predict(X[:20]), whole.predict(X[:20])):       # mean and sd
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_the_screens_part_of_the_grid_falls_back_to_the_whole_grid():
    """Where no point of the grid's last noise ratio can be factored, the screen's grid is
    the whole grid (its best point among the others), not an error."""
    class Fake:
        noise = None
        calls = []

        def __call__(self, log_ell, log_ratio, gradient=False):
            self.calls.append((log_ell, log_ratio))
            if np.isclose(log_ratio, np.log(RBFGPRegressor.RATIO_GRID[-1])):
                return -np.inf, None
            return -abs(log_ell), None

    fake = Fake()
    known = {}
    best, started = RBFGPRegressor()._grid(fake, 1.0, known=known, ratios=(-1,))
    assert not started and np.isclose(best[1][1], np.log(RBFGPRegressor.RATIO_GRID[0]))
    assert best[0] == max(-abs(np.log(f)) for f in RBFGPRegressor.LENGTH_FACTORS)
    # every point evaluated once, and all of them known for the grid's completion
    assert len(fake.calls) == len(set(fake.calls)) == len(known) == 10
