"""The sparse-precision priors at full resolution (flgp.precision) and the graphs on the
data points (lattice, k-NN), against dense references."""

import numpy as np
import pytest
import scipy.sparse as sp

from flgp.graph import knn_point_graph, lattice_graph
from flgp.precision import NotPositiveDefiniteError, PatternCholesky
from flgp.precision.gaussian import MaternRegression, fit_matern, rbmc_variances
from flgp.precision.matern import matern_precision
from flgp.precision.posterior import NodePosterior


def _dense_evidence(Q, obs, z, ratio):
    """log N(z | 0, Â (P Q⁻¹ Pᵀ + r I)) at the profiled Â, densely."""
    m = obs.size
    S = np.linalg.inv(Q)[np.ix_(obs, obs)] + ratio * np.eye(m)
    A = z @ np.linalg.solve(S, z) / m
    sign, logdet = np.linalg.slogdet(A * S)
    return -0.5 * m * np.log(2 * np.pi) - 0.5 * logdet - 0.5 * z @ np.linalg.solve(A * S, z), A


# -- graphs ----------------------------------------------------------------------------

@pytest.mark.parametrize("connectivity", [6, 18, 26])
def test_lattice_laplacian_is_the_finite_difference_laplacian(connectivity):
    """On a box of anisotropic voxels, ``G f`` for a quadratic ``f`` is ``-Δf`` at interior
    voxels (exactly: the stencils are second-order and exact on quadratics), in mm⁻²."""
    affine = np.diag([2.0, 2.0, 3.0, 1.0])
    affine[:3, 3] = [10.0, -5.0, 1.0]
    g = lattice_graph(np.argwhere(np.ones((8, 9, 7), bool)), affine,
                      connectivity=connectivity)
    x = g.points
    f = 0.5 * x[:, 0] ** 2 + x[:, 1] ** 2 + 1.5 * x[:, 2] ** 2 + x[:, 0] * 0.3
    interior = np.all((x > x.min(0) + 3.5) & (x < x.max(0) - 3.5), axis=1)
    Lf = g.operator() @ f
    if connectivity == 6:
        np.testing.assert_allclose(Lf[interior], -(1.0 + 2.0 + 3.0), rtol=1e-10)
    else:     # normalised to the identity's trace: exact for an isotropic quadratic
        f_iso = (x ** 2).sum(1)
        np.testing.assert_allclose((g.operator() @ f_iso)[interior], -6.0, rtol=0.35)
    assert np.allclose(np.asarray(g.stiffness.sum(1)).ravel(), 0.0)
    assert (g.stiffness - g.stiffness.T).nnz == 0
    np.testing.assert_allclose(x[0], [10.0, -5.0, 1.0])


def test_lattice_neighbours_and_bad_input():
    g = lattice_graph(np.argwhere(np.ones((3, 3, 3), bool)), connectivity=26)
    deg = np.asarray((g.adjacency > 0).sum(1)).ravel()
    assert deg.max() == 26 and deg.min() == 7         # the centre and a corner
    with pytest.raises(ValueError, match="more than once"):
        lattice_graph(np.array([[0, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="connectivity"):
        lattice_graph(np.array([[0, 0, 0]]), connectivity=8)
    with pytest.raises(ValueError, match="shape"):
        lattice_graph(np.zeros((4, 2), int))
    # a mask that falls apart: two components, reported
    two = np.array([[0, 0, 0], [0, 0, 1], [5, 5, 5]])
    assert lattice_graph(two).pieces()[0] == 2


def test_knn_point_graph_approximates_the_laplacian():
    """``C⁻¹ G`` on a uniform planar cloud is close to ``-Δ``: ``-Δ(x² + y²) = -4``,
    within the truncation of the kernel at 10 neighbours (measured -3.4)."""
    X = np.random.default_rng(0).random((3000, 2))
    g = knn_point_graph(X, 10)
    inner = np.all((X > 0.2) & (X < 0.8), 1)
    Lf = g.operator() @ (X ** 2).sum(1)
    assert -4.5 < np.median(Lf[inner]) < -3.0
    assert g.kind == "knn" and 0.005 < g.spacing < 0.02
    # the spacing: the median distance to the nearest other point (brute force)
    sub = knn_point_graph(X[:400], 10)
    d = np.sqrt(((X[:400, None] - X[None, :400]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    assert sub.spacing == pytest.approx(np.median(d.min(axis=1)), rel=1e-12)


# -- the factor ----------------------------------------------------------------------------

def test_pattern_cholesky_solves_logdets_and_samples():
    rng = np.random.default_rng(0)
    B = sp.random(200, 200, density=0.03, random_state=1)
    A = (B @ B.T + sp.eye(200)).tocsc()
    chol = PatternCholesky(A)
    A2 = A.copy()
    A2.data *= 2.0
    A2 = (A2 + 0.5 * sp.eye(200)).tocsc()
    chol.factor(A2)
    D = A2.toarray()
    np.testing.assert_allclose(D @ chol.solve(np.arange(200.0)), np.arange(200.0), atol=1e-9)
    assert chol.logdet() == pytest.approx(np.linalg.slogdet(D)[1], abs=1e-9)
    X = chol.sample(4000, rng)
    C = np.linalg.inv(D)
    assert np.abs(np.cov(X) - C).max() < 6 * np.sqrt(2.0 / 4000) * np.abs(C).max()
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        chol.factor((A2 - 100.0 * sp.eye(200)).tocsc())


def test_nested_dissection_order_cuts_the_fill_and_changes_no_result(monkeypatch):
    """On a 16³ lattice the factor of a second-order precision by METIS's order holds
    under 85 % of the non-zeros of CHOLMOD's own (AMD) order's (measured: 75 %), and
    solves and log-determinants agree with the dense ones either way."""
    import cvxopt.cholmod as cholmod

    import flgp.precision.cholesky as cholesky

    g = lattice_graph(np.argwhere(np.ones((16, 16, 16), bool)))
    Q = matern_precision(g, 0.1, 2)
    order = cholesky.fill_reducing_order(Q)
    np.testing.assert_array_equal(np.sort(order), np.arange(g.n_nodes))
    np.testing.assert_array_equal(cholesky.fill_reducing_order(Q), order)   # seeded, kept
    b = np.random.default_rng(0).standard_normal(g.n_nodes)
    ref = np.linalg.solve(Q.toarray(), b)
    logdet = np.linalg.slogdet(Q.toarray())[1]
    fills = []
    for min_nodes in (cholesky.NESTED_DISSECTION_MIN_NODES, 10 ** 9):  # METIS, then AMD
        monkeypatch.setattr(cholesky, "NESTED_DISSECTION_MIN_NODES", min_nodes)
        chol = PatternCholesky(Q)
        chol.factor(Q)
        np.testing.assert_allclose(chol.solve(b), ref, rtol=1e-8, atol=1e-10)
        assert chol.logdet() == pytest.approx(logdet, rel=1e-10)
        fills.append(len(cholmod.getfactor(chol._symbolic).V))   # (the factor's last use)
    assert fills[0] < 0.85 * fills[1]
    assert cholesky.fill_reducing_order(sp.eye(50)) is None       # small: CHOLMOD orders
    with pytest.raises(ValueError, match="square pattern"):
        cholesky.fill_reducing_order(sp.random(3000, 2000, density=0.001))


# -- the Matérn family and its regression ------------------------------------------------

def _graph():
    return lattice_graph(np.argwhere(np.ones((7, 6, 5), bool)),
                         np.diag([2.0, 2.0, 3.0, 1.0]), connectivity=18)


def test_matern_precision_is_the_operator_power():
    g = _graph()
    K = 0.3 * np.diag(g.mass) + g.stiffness.toarray()
    Cinv = np.diag(1.0 / g.mass)
    for nu in (1, 2, 3):
        ref = K @ np.linalg.matrix_power(Cinv @ K, nu - 1)
        np.testing.assert_allclose(matern_precision(g, 0.3, nu).toarray(), ref, atol=1e-12)
    with pytest.raises(ValueError, match="nu"):
        matern_precision(g, 0.3, 0)


def test_heat_kernel_limit():
    """``κ^{2ν} Q_ν⁻¹ C`` with ``κ² = ν/t`` tends to ``e^{-t C⁻¹G}`` as ``ν`` grows."""
    g = lattice_graph(np.argwhere(np.ones((4, 4, 1), bool)))
    t = 0.7
    Lop = g.operator().toarray()
    w, V = np.linalg.eig(-t * Lop)
    heat = (V * np.exp(w)) @ np.linalg.inv(V)
    errs = []
    for nu in (1, 3, 12):
        Q = matern_precision(g, nu / t, nu).toarray()
        approx = (nu / t) ** nu * np.linalg.inv(Q) @ np.diag(g.mass)
        errs.append(np.abs(approx - heat.real).max())
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.02


@pytest.mark.parametrize("nu", [1, 2, 3])
def test_graph_matern_evidence_and_mean_equal_the_dense_formulas(nu):
    g = _graph()
    rng = np.random.default_rng(nu)
    obs = np.sort(rng.choice(g.n_nodes, 60, replace=False))
    z = rng.standard_normal(60)
    reg = MaternRegression(g, obs, z, nu)
    fit = reg.evaluate(0.05, 0.3)
    Q = matern_precision(g, 0.05, nu).toarray()
    ref, A = _dense_evidence(Q, obs, z, 0.3)
    assert fit.log_evidence == pytest.approx(ref, abs=1e-8)
    assert fit.amplitude == pytest.approx(A, rel=1e-10)
    S = np.linalg.inv(Q)[np.ix_(obs, obs)] + 0.3 * np.eye(60)
    mean_ref = np.linalg.inv(Q)[:, obs] @ np.linalg.solve(S, z)
    np.testing.assert_allclose(fit.mean, mean_ref, atol=1e-10)


def test_rbmc_variances_are_unbiased_within_their_error():
    g = _graph()
    rng = np.random.default_rng(0)
    obs = np.sort(rng.choice(g.n_nodes, 60, replace=False))
    reg = MaternRegression(g, obs, rng.standard_normal(60), 2)
    fit = reg.evaluate(0.05, 0.3)
    var, se = reg.variances(fit, n_samples=400)
    Qt = reg.posterior_precision(0.05, 0.3).toarray()
    ref = fit.amplitude * np.diag(np.linalg.inv(Qt))
    zscores = (var - ref) / se
    assert np.abs(zscores).max() < 5.0
    assert abs(np.mean(zscores)) < 0.5            # unbiased: no systematic offset
    assert np.median(se / ref) < 0.05


@pytest.mark.parametrize("ratio", [0.3, 1e-4])
def test_cross_validated_amplitude_is_generalised_cross_validation(ratio):
    """``‖S⁻¹z‖² / tr S⁻¹`` with ``S = P Q⁻¹ Pᵀ + r I`` from the dense matrices; from the
    exact posterior variances to 1e-9, from the Monte Carlo ones within a few of their
    sum's standard error (whose own value matches the spread of the sum over seeds); None
    when that error swamps the denominator; from the exact sum of the log-determinant's
    derivative to 1e-6."""
    from flgp.precision.gaussian import cross_validated_amplitude

    g = _graph()
    rng = np.random.default_rng(5)
    obs = np.sort(rng.choice(g.n_nodes, 60, replace=False))
    z = np.sin(g.points[obs, 0] / 2.0) + 0.1 * rng.standard_normal(60)
    reg = MaternRegression(g, obs, z, 2)
    fit = reg.evaluate(0.05, ratio)
    Q = matern_precision(g, 0.05, 2).toarray()
    S = np.linalg.inv(Q)[np.ix_(obs, obs)] + ratio * np.eye(60)
    Si = np.linalg.inv(S)
    ref = float(np.sum((Si @ z) ** 2) / np.trace(Si))
    exact = np.diag(np.linalg.inv(reg.posterior_precision(0.05, ratio).toarray()))
    assert cross_validated_amplitude(z, fit.mean[obs], ratio, exact[obs].sum()) == \
        pytest.approx(ref, rel=1e-9)
    unit_var, _, sum_se = reg.unit_variances_rbmc(0.05, ratio, n_samples=64, random_state=0)
    denominator = 60 * ratio - exact[obs].sum()
    sums = [rbmc_variances(reg.posterior_precision(0.05, ratio), reg._chol_Q, 64, seed)[0][obs]
            .sum() for seed in range(1, 31)]
    assert 0.5 < np.std(sums, ddof=1) / sum_se < 2.0
    cv = cross_validated_amplitude(z, fit.mean[obs], ratio, unit_var[obs].sum(), sum_se)
    if denominator > 10 * sum_se:
        assert cv == pytest.approx(ref, rel=5 * sum_se / denominator)
    else:
        assert cv is None
    # the exact sum, from the derivative of log|S| in log r: the denominator to 1e-6
    total = reg.observed_variance_sum(0.05, ratio)
    assert abs(total - exact[obs].sum()) < 1e-6 * denominator
    assert cross_validated_amplitude(z, fit.mean[obs], ratio, total) == \
        pytest.approx(ref, rel=1e-6)
    # the regression keeps the Monte Carlo sum, or the exact one where the Monte Carlo
    # error leaves the denominator known to worse than 1 %
    reg.variances(fit, n_samples=64, random_state=0)
    if (60 * ratio - unit_var[obs].sum()) * 0.01 > sum_se:
        assert reg.observed_sum == pytest.approx(unit_var[obs].sum(), rel=1e-12)
        assert reg.observed_sum_se == sum_se
    else:
        assert reg.observed_sum == total and reg.observed_sum_se == 0.0
    assert cross_validated_amplitude(z, fit.mean[obs], ratio, exact[obs].sum(),
                                     sum_se=denominator) is None
    with pytest.raises(ValueError, match="one entry per observed node"):
        cross_validated_amplitude(z, fit.mean, ratio, exact[obs].sum())
    with pytest.raises(ValueError, match="ratio"):
        cross_validated_amplitude(z, fit.mean[obs], -1.0, exact[obs].sum())
    with pytest.raises(ValueError, match="n_samples must be a whole number >= 2"):
        rbmc_variances(reg.posterior_precision(0.05, ratio), reg._chol_Q, 1, 0)
    with pytest.raises(ValueError, match="variance_sum must be one number"):
        cross_validated_amplitude(z, fit.mean[obs], ratio, exact[obs])


def test_fit_matern_finds_an_evidence_maximum_and_recovers_a_smooth_map():
    g = lattice_graph(np.argwhere(np.ones((14, 14, 6), bool)))
    x = g.points
    truth = np.sin(x[:, 0] / 3.0) + np.cos(x[:, 1] / 4.0) + 0.1 * x[:, 2]
    rng = np.random.default_rng(0)
    obs = np.sort(rng.choice(g.n_nodes, 300, replace=False))
    y = truth[obs] + 0.05 * rng.standard_normal(300)
    z = (y - y.mean()) / y.std()
    best, reg, by_order = fit_matern(g, obs, z)
    assert set(by_order) <= {1, 2, 3, 4} and {2, 3} <= set(by_order)
    assert best.log_evidence == max(f.log_evidence for f in by_order.values())
    # near a local maximum in both hyperparameters - the search's promise: its steps are
    # factors of 100 and 10 with one parabolic step, so a factor 2 may still gain a few
    # nats (which move the predictions by nothing measurable), a factor 10 not one
    for dk, dr, tol in [(2.0, 1.0, 3.0), (0.5, 1.0, 3.0), (1.0, 2.0, 3.0), (1.0, 0.5, 3.0),
                        (10.0, 1.0, 1.0), (0.1, 1.0, 1.0), (1.0, 10.0, 1.0),
                        (1.0, 0.1, 1.0)]:
        other = reg.evaluate(best.kappa2 * dk, best.ratio * dr)
        assert other.log_evidence <= best.log_evidence + tol, (dk, dr)
    pred = y.mean() + y.std() * best.mean
    unobs = np.setdiff1d(np.arange(g.n_nodes), obs)
    assert np.sqrt(np.mean((pred[unobs] - truth[unobs]) ** 2)) < 0.1 * truth.std()
    assert best.nu >= 2                            # a smooth map prefers a smooth prior
    # a fixed κ² is kept as given, beyond the search's range too (its (1/h)² is 1 here);
    # one below the orders' accuracy floor is refused, not moved to it
    fixed, _, _ = fit_matern(g, obs, z, nus=(2,), kappa2=100.0)
    assert fixed.kappa == pytest.approx(10.0, rel=1e-12)
    with pytest.raises(ValueError, match="kappa2 is below the smallest"):
        fit_matern(g, obs, z, nus=(4,), kappa2=1e-30)


def test_node_posterior_interpolates_exactly_at_nodes():
    g = lattice_graph(np.argwhere(np.ones((4, 4, 4), bool)), np.diag([2.0, 2.0, 2.0, 1.0]))
    mean = np.arange(g.n_nodes, dtype=float)
    post = NodePosterior(g.points, mean, np.ones(g.n_nodes), g.spacing)
    m, s = post.at(g.points)
    np.testing.assert_allclose(m, mean, atol=1e-6)
    np.testing.assert_allclose(s, 1.0)
    # between nodes: a convex combination of the nearest nodes' values
    X = g.points.mean(0) + np.random.default_rng(0).uniform(-2, 2, (50, 3))
    m, _ = post.at(X)
    _, idx = post._index().query(X, k=8)
    assert np.all(m >= mean[idx].min(1) - 1e-9) and np.all(m <= mean[idx].max(1) + 1e-9)
    flat = NodePosterior(g.points, np.full(g.n_nodes, 3.0), np.ones(g.n_nodes), g.spacing)
    np.testing.assert_allclose(flat.at(X)[0], 3.0)


def test_the_iterative_path_equals_the_factored_one(monkeypatch):
    """Above FACTOR_MAX_NODES the posterior mean comes from AMG-preconditioned CG and the
    variances from perturbation draws: the same mean to the solver's tolerance, the same
    variances within the estimator's error, for ν = 1 (edge root), 2 (K C^{-1/2}) and 3, 4
    (the shifted-product preconditioner, roots through K C⁻¹)."""
    import flgp.precision.gaussian as gaussian
    from flgp.precision.iterative import IterativeMaternRegression

    g = lattice_graph(np.argwhere(np.ones((12, 11, 10), bool)), np.diag([2.0, 2.0, 3.0, 1]))
    rng = np.random.default_rng(0)
    obs = np.sort(rng.choice(g.n_nodes, 300, replace=False))
    z = np.sin(g.points[obs, 0] / 5.0) + 0.1 * rng.standard_normal(300)
    for nu in (1, 2, 3, 4):
        exact = MaternRegression(g, obs, z, nu)
        fit = exact.evaluate(0.01, 0.05)
        it = IterativeMaternRegression(g, obs, z, nu, 0.01, 0.05, fit.amplitude)
        Qt = exact.posterior_precision(0.01, 0.05).toarray()
        mean = it.mean()
        b = np.zeros(g.n_nodes)
        b[obs] = z / 0.05
        assert np.linalg.norm(Qt @ mean - b) <= 1.01e-8 * np.linalg.norm(b)
        # orders 3 and 4 are worse conditioned: the same residual leaves a larger error
        np.testing.assert_allclose(mean, fit.mean,
                                   atol=(1e-6 if nu <= 2 else 1e-4) * np.abs(fit.mean).max())
        np.testing.assert_allclose(it.diagonal(), np.diag(Qt), rtol=1e-10)
        x = rng.standard_normal(g.n_nodes)
        np.testing.assert_allclose(it.Qt @ x, Qt @ x, rtol=1e-9, atol=1e-9 * np.abs(
            Qt @ x).max())
        var, se = it.variances(n_samples=200)
        sum_se = it.observed_sum_se
        ref = fit.amplitude * np.diag(np.linalg.inv(Qt))
        assert np.abs((var - ref) / se).max() < 6.0 and abs(np.mean((var - ref) / se)) < 0.5
        # the standard error of the observed nodes' summed unit variances, against the
        # spread of the sum over independent batches of draws
        sums = [it.variances(n_samples=20, random_state=s)[0][obs].sum() / fit.amplitude
                for s in range(1, 9)]
        assert 0.3 < np.std(sums, ddof=1) / (sum_se * np.sqrt(200 / 20)) < 3.0
    # the estimator's route: ball search over every order, then the iterative posterior
    monkeypatch.setattr(gaussian, "FACTOR_MAX_NODES", 500)
    best, reg, local = gaussian.fit_matern(g, obs, z, search_max_nodes=600)
    assert {2, 3, 4} <= set(local) <= {1, 2, 3, 4} and best.evidence_nodes <= 600
    assert best.log_evidence == max(f.log_evidence for f in local.values())
    var, se = reg.variances(best)
    assert np.all(var > 0) and var.shape == (g.n_nodes,)
    assert reg.observed_sum_se > 0


def test_matern_family_of_a_graph_is_shared_and_its_cache_bounded(monkeypatch):
    """MaternFamily.of: the same family for a graph rebuilt with the same contents (and the
    values of a fresh one), another for another order or other weights; at most
    FAMILY_CACHE_SIZE kept."""
    from flgp.graph import lattice_graph
    from flgp.precision import matern

    monkeypatch.setattr(matern, "_FAMILIES", type(matern._FAMILIES)())
    ijk = np.argwhere(np.ones((5, 4, 3), bool))
    a = matern.MaternFamily.of(lattice_graph(ijk), 2)
    assert matern.MaternFamily.of(lattice_graph(ijk), 2) is a
    np.testing.assert_array_equal(a.values(0.3), matern.MaternFamily(lattice_graph(ijk),
                                                                     2).values(0.3))
    assert matern.MaternFamily.of(lattice_graph(ijk), 3) is not a
    scaled = lattice_graph(ijk).in_units(2.0, 1.0)
    assert matern.MaternFamily.of(scaled, 2) is not a
    assert a.nbytes > 8 * a.nnz
    monkeypatch.setattr(matern, "FAMILY_CACHE_SIZE", 2)
    matern.MaternFamily.of(lattice_graph(ijk), 4)
    assert len(matern._FAMILIES) == 2
    assert matern.MaternFamily.of(lattice_graph(ijk), 2) is not a      # evicted


def test_entries_of_inverse_and_matern_factors_against_dense():
    """``entries_of_inverse`` (repeated, unsorted columns; kept columns) and
    ``MaternFactors`` (``log|Q|``, ``Q⁻¹B``, the posterior precision's factor, prior draws'
    covariance) against dense references."""
    import pickle

    from flgp.precision.gaussian import entries_of_inverse
    from flgp.precision.matern import MaternFactors

    g = lattice_graph(np.argwhere(np.ones((7, 6, 1), bool)))
    factors = MaternFactors(g, 2)
    Q = matern_precision(g, 0.3, 2).toarray()
    S = np.linalg.inv(Q)
    rows, cols = np.array([4, 0, 9, 9, 41]), np.array([30, 2, 30, 9, 2])
    solve = lambda B: factors.solve_prior(0.3, B)  # noqa: E731
    values, (distinct, Z) = entries_of_inverse(solve, g.n_nodes, rows, cols, keep_columns=True)
    np.testing.assert_allclose(values, S[rows, cols], rtol=1e-10)
    assert distinct.tolist() == [30, 2, 9]
    np.testing.assert_allclose(Z, S[:, distinct], rtol=1e-10, atol=1e-14)
    assert factors.logdet_prior(0.3) == pytest.approx(np.linalg.slogdet(Q)[1], rel=1e-10)
    nodes, w = np.array([1, 5, 17]), np.array([2.0, 0.5, 3.0])
    Qt = Q.copy()
    Qt[nodes, nodes] += w
    chol = factors.posterior_factor(0.3, nodes, w, key="w")
    np.testing.assert_allclose(chol.solve(np.eye(g.n_nodes)), np.linalg.inv(Qt), rtol=1e-9,
                               atol=1e-14)
    X = pickle.loads(pickle.dumps(factors)).prior_draws(0.3, 20000, np.random.default_rng(0))
    np.testing.assert_allclose(np.cov(X)[nodes, nodes], S[nodes, nodes], rtol=0.05)


def test_polish_order_climbs_the_evidence_and_refuses_bad_settings():
    """From a point off the optimum the polish ends no lower than where it started (the
    search's own optimum, reached by its line searches, within the polish's tolerance), and
    a malformed start or budget is refused."""
    from flgp.precision.gaussian import drive, polish_order, search_steps

    g = _graph()
    rng = np.random.default_rng(3)
    obs = np.sort(rng.choice(g.n_nodes, 60, replace=False))
    z = rng.standard_normal(obs.size)
    reg = MaternRegression(g, obs, z, 2)

    def evaluate(nu, u, v):
        k2 = float(np.exp(u))
        return reg.evaluate(k2, float(np.exp(v)) * reg.prior_variance(k2))

    results, searches = drive(search_steps(g, (2,)), evaluate)
    u, v = searches[2].best_point()
    seen = []

    def recorded(nu, a, b):
        seen.append(evaluate(nu, a, b).log_evidence)
        return evaluate(nu, a, b)

    best, n = polish_order(g, 2, (u + 1.0, v - 1.0), recorded)
    assert 1 <= n <= 200 and n == len(seen)
    assert best.log_evidence == pytest.approx(max(seen), abs=1e-9) and max(seen) > seen[0]
    assert best.log_evidence >= results[2].log_evidence - 0.5
    with pytest.raises(ValueError, match="start must be"):
        polish_order(g, 2, (np.nan, 0.0), evaluate)
    with pytest.raises(ValueError, match="max_evaluations"):
        polish_order(g, 2, (u, v), evaluate, max_evaluations=0)
