"""The full-resolution prior does not depend on the units of the coordinates (issue 42):
a change of units moves κ exactly and the evidence, the order, the noise and every
prediction not at all - for the k-NN, lattice and mesh graphs, both estimators, at any
scale the input check accepts; a fixed noise is honoured by every representation; a
given graph must be built on the rows it is given."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from flgp import (FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                  RBFPrior)
from flgp.graph import lattice_graph
from flgp.graph.knn import knn_point_graph
from flgp.graph.mesh import mesh_graph
from flgp.precision import MaternRegression, SparsePrecisionPrior, matern_precision
from flgp.precision.gaussian import (MAX_CONDITION, fit_matern, matern_search_ranges,
                                     largest_eigenvalue)
from flgp.precision.matern import MaternFamily

SCALES = (2.0 ** -10, 1.0, 2.0 ** 10)


def _moons(n=400, m=40, seed=0):
    from sklearn.datasets import make_moons

    X, labels = make_moons(n, noise=0.05, random_state=seed)
    f = np.sin(2 * X[:, 0]) + X[:, 1]
    rng = np.random.default_rng(seed)
    y = np.full(n, np.nan)
    lab = rng.choice(n, m, replace=False)
    y[lab] = f[lab] + 0.05 * rng.standard_normal(m)
    return X, y, labels


def _bumpy_mesh(k=18, size=40.0):
    g = np.linspace(0, 1, k)
    xx, yy = np.meshgrid(g, g)
    V = np.c_[xx.ravel(), yy.ravel(), 0.15 * np.sin(3 * xx.ravel()) * np.cos(2 * yy.ravel())]
    idx = np.arange(k * k).reshape(k, k)
    a, b, c, d = (idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(),
                  idx[1:, 1:].ravel())
    return V * size, np.r_[np.c_[a, b, c], np.c_[b, d, c]]


def _targets(x, seed=0, frac=0.3):
    rng = np.random.default_rng(seed)
    t = (x - x.mean(0)) / x.std(0).max()
    f = np.sin(2.5 * t[:, 0]) + np.cos(2.0 * t[:, 1])
    return np.where(rng.random(len(f)) < frac, f + 0.02 * rng.standard_normal(len(f)), np.nan)


def _prior(method, graph=None):
    """The prior objects of the representation ``method`` names (``"auto"``: every one, on
    ``graph`` where one is given - else ``None``, the estimators' default)."""
    if method == "auto":
        return None if graph is None else [HeatKernelPrior(), GraphMaternPrior(graph),
                                           RBFPrior()]
    if method == "graph_matern":
        return GraphMaternPrior(graph)
    return {"flgp": HeatKernelPrior, "rbf": RBFPrior}[method]()


def _close(got, ref, rel=1e-6):
    """Within ``rel`` relative to the largest magnitude (the last bits of a sparse factor
    move with BLAS threads, and a search's end point with them, by ~1e-8)."""
    np.testing.assert_allclose(got, ref, rtol=0, atol=rel * np.max(np.abs(ref)))


def _own_amplitude(reg):
    """The graph Matérn regressor's amplitude on its graph in its own units."""
    length, mass = reg.graph_.own_units()
    return reg.outputscale_ * length ** (2 * reg.matern_order_) / mass


def _same_regression(fits, scales, heat_tolerance=0.1):
    """The same fit in every unit. ``heat_tolerance``: of the low-rank heat kernel's
    evidence among ``"auto"``'s candidates - on a lattice its k-means and nearest induced
    points meet exact ties that rounding breaks differently when the voxel size is not a
    power-of-two multiple (up to 0.3 nats here; powers of two agree to the bit)."""
    ref = fits[0]
    for fit, c in zip(fits[1:], scales[1:]):
        assert fit.method_ == ref.method_
        assert abs(fit.log_marginal_likelihood_ - ref.log_marginal_likelihood_) < 0.1
        _close(fit.transduction_, ref.transduction_)
        _close(fit.transduction_std_, ref.transduction_std_)
        np.testing.assert_allclose(fit.noise_, ref.noise_, rtol=1e-6)
        if ref.method_ == "graph_matern":
            assert fit.matern_order_ == ref.matern_order_
            # κ is an inverse length: it moves exactly with the units
            np.testing.assert_allclose(fit.matern_kappa_ * c, ref.matern_kappa_ * scales[0],
                                       rtol=1e-5)
            # the amplitude is of Q_ν built on the graph as given: A_own μ / ℓ^{2ν}
            np.testing.assert_allclose(_own_amplitude(fit), _own_amplitude(ref), rtol=1e-5)
        if hasattr(ref, "log_evidence_"):
            for name, value in ref.log_evidence_.items():
                tol = heat_tolerance if name == "flgp" else 0.1
                assert abs(fit.log_evidence_[name] - value) < tol, name


@pytest.mark.parametrize("method", ["graph_matern", "auto"])
def test_regressor_on_the_knn_graph_is_unit_free(method):
    X, y, _ = _moons()
    fits = [FLGPRegressor(_prior(method)).fit(X * c, y) for c in SCALES]
    _same_regression(fits, SCALES)
    # and predictions at new points, in their units
    new = X[:7] + 0.01
    ref = fits[1].predict(new, return_std=True)
    for fit, c in zip(fits, SCALES):
        got = fit.predict(new * c, return_std=True)
        _close(got[0], ref[0])
        _close(got[1], ref[1])


@pytest.mark.parametrize("method", ["graph_matern", "auto"])
def test_regressor_on_a_lattice_is_unit_free_in_the_voxel_size(method):
    ijk = np.argwhere(np.ones((9, 8, 5), bool))
    sizes = (0.125, 1.0, 3.0)                        # mouse, human and a coarse map, in mm
    y = _targets(ijk.astype(float))
    fits = []
    for h in sizes:
        affine = np.diag([h, h, h, 1.0])
        affine[:3, 3] = (10.0, -20.0, 5.0)
        g = lattice_graph(ijk, affine)
        fits.append(FLGPRegressor(_prior(method, g)).fit(g.points, y))
    _same_regression(fits, sizes, heat_tolerance=1.0)


@pytest.mark.parametrize("method", ["graph_matern", "auto"])
def test_regressor_on_a_mesh_is_unit_free(method):
    V, F = _bumpy_mesh()
    y = _targets(V)
    fits = [FLGPRegressor(_prior(method, mesh_graph(V * c, F))).fit(V * c, y)
            for c in SCALES]
    _same_regression(fits, SCALES)


def test_regressor_at_extreme_scales():
    """Coordinates the input check accepts, 1e-60 and 1e100 times the data: no overflow
    (κ^{2ν} would be 1e480), the same evidence; κ reported in the units of X."""
    X, y, _ = _moons()
    ref = FLGPRegressor(GraphMaternPrior()).fit(X, y)
    for c in (1e-60, 1e100):
        fit = FLGPRegressor().fit(X * c, y)
        assert abs(fit.log_evidence_["graph_matern"]
                   - ref.matern_log_evidence_[ref.matern_order_]) < 1e-3
        gm = FLGPRegressor(GraphMaternPrior()).fit(X * c, y)
        _close(gm.transduction_, ref.transduction_)
        np.testing.assert_allclose(gm.matern_kappa_ * c, ref.matern_kappa_, rtol=1e-4)
    # the raw family refuses what float64 cannot hold, naming the way out
    g = lattice_graph(np.argwhere(np.ones((4, 4, 2), bool)))
    with pytest.raises(ValueError, match="in_own_units"):
        MaternFamily(g, 4).values(1e100)
    with pytest.raises(ValueError, match="in_own_units"):
        matern_precision(g, 1e200, 2)


@pytest.mark.parametrize("kind", ["lattice", "mesh", "knn"])
def test_classifier_is_unit_free(kind):
    """The full-resolution classifier on a given graph of each kind, and the default
    classifier on the cloud, in three units: the same probabilities."""
    if kind == "lattice":
        ijk = np.argwhere(np.ones((10, 9, 4), bool))
        base, build = ijk.astype(float), (lambda c: lattice_graph(ijk, np.diag([c, c, c, 1])))
    elif kind == "mesh":
        base, F = _bumpy_mesh()
        build = (lambda c: mesh_graph(base * c, F))
    else:
        base, _, _ = _moons(300)
        build = (lambda c: knn_point_graph(base * c, 10))
    labels = (base[:, 0] > np.median(base[:, 0])).astype(int)
    y = np.full(len(base), -1)
    rng = np.random.default_rng(1)
    for c in (0, 1):
        y[rng.choice(np.flatnonzero(labels == c), 2, replace=False)] = c
    probs, default = [], []
    for c in SCALES:
        clf = FLGPClassifier(GraphMaternPrior(build(c))).fit(base * c, y)
        probs.append(clf.label_distributions_)
        default.append(FLGPClassifier().fit(base * c, y).label_distributions_)
    for P, D in zip(probs[1:], default[1:]):
        _close(P, probs[0])
        _close(D, default[0])


def test_graph_in_own_units_is_the_same_graph_whatever_the_units():
    X, _, _ = _moons(200)
    g1, g2 = knn_point_graph(X, 8), knn_point_graph(X * 2.0 ** 7, 8)
    o1, o2 = g1.in_own_units(), g2.in_own_units()
    np.testing.assert_array_equal(o1.stiffness.toarray(), o2.stiffness.toarray())
    np.testing.assert_array_equal(o1.mass, o2.mass)
    assert g2.own_units()[0] == 2.0 ** 7 * g1.own_units()[0]
    # the operator C⁻¹G in the new units: multiplied by length²
    length, mass = g1.own_units()
    np.testing.assert_allclose(o1.operator().toarray(),
                               length ** 2 * g1.operator().toarray(), rtol=1e-12)
    assert np.median(o1.stiffness.diagonal() / o1.mass) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="finite and positive"):
        g1.in_units(0.0, 1.0)


# -- a fixed noise ------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["flgp", "graph_matern", "rbf", "auto"])
def test_a_fixed_noise_is_honoured_by_every_representation(method):
    X, y, _ = _moons()
    y = np.where(np.isnan(y), np.nan, 3.0 * y)
    reg = FLGPRegressor(_prior(method), noise=0.2).fit(X, y)
    assert reg.noise_ == pytest.approx(0.2, rel=1e-9)
    if method == "auto":
        assert set(reg.log_evidence_) == {"flgp", "graph_matern", "rbf"}


def test_graph_matern_evidence_at_a_fixed_noise_is_the_dense_one():
    ijk = np.argwhere(np.ones((7, 6, 4), bool))
    g = lattice_graph(ijk)
    y = _targets(ijk.astype(float), seed=3)
    reg = FLGPRegressor(GraphMaternPrior(g), noise=0.01).fit(g.points, y)
    lab = np.flatnonzero(~np.isnan(y))
    z_mean, z_sd = y[lab].mean(), y[lab].std()
    s2, noise = reg.outputscale_ / z_sd ** 2, 0.01 / z_sd ** 2
    Q = matern_precision(g, reg.matern_kappa_ ** 2, reg.matern_order_).toarray()
    S = s2 * np.linalg.inv(Q)[np.ix_(lab, lab)] + noise * np.eye(lab.size)
    z = (y[lab] - z_mean) / z_sd
    ev = -0.5 * (lab.size * np.log(2 * np.pi) + np.linalg.slogdet(S)[1]
                 + z @ np.linalg.solve(S, z))
    assert reg.log_marginal_likelihood_ == pytest.approx(ev - lab.size * np.log(z_sd),
                                                         abs=1e-6)


def test_rbf_at_a_fixed_noise_is_the_log_density_and_its_gradient():
    from scipy.optimize import approx_fprime
    from scipy.stats import multivariate_normal

    from flgp.models.baselines import RBFGPRegressor, _ProfiledEvidence

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (60, 2))
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(60)
    rbf = RBFGPRegressor(noise=0.09).fit(X, y)
    assert rbf.noise_ == pytest.approx(0.09)
    Z = (X - rbf.mu_) / rbf.sd_
    d2 = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    K = rbf.outputscale_ * np.exp(-d2 / (2 * rbf.lengthscale_ ** 2)) + 0.09 * np.eye(60)
    ref = multivariate_normal(np.full(60, rbf.constant_), K).logpdf(y)
    assert rbf.log_marginal_likelihood_ == pytest.approx(ref, abs=1e-6)
    # the analytic gradient in (log ℓ, log r) at a fixed noise against finite differences
    z = (y - y.mean()) / y.std()
    ev = _ProfiledEvidence(Z, z, noise=0.3)
    point = np.array([np.log(0.7), np.log(0.5)])
    _, grad = ev(*point, gradient=True)
    num = approx_fprime(point, lambda p: ev(*p)[0], 1e-6)
    np.testing.assert_allclose(grad, num, rtol=1e-4, atol=1e-5)


# -- the search ---------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["lattice", "knn"])
def test_the_search_reaches_the_evidence_of_a_fine_grid(which):
    """The search's best order and hyperparameters are within 1 nat of the best of a
    13 x 13 grid over its ranges (each order), and never above the labelled block's own
    evidence (the factor's accuracy: MAX_CONDITION)."""
    rng = np.random.default_rng(0)
    if which == "lattice":
        graph = lattice_graph(np.argwhere(np.ones((12, 12, 5), bool)), np.diag([2, 2, 2, 1.]))
        x = graph.points
        f = np.sin(x[:, 0] / 6.0) + np.cos(x[:, 1] / 8.0)
        obs = np.sort(rng.choice(graph.n_nodes, 200, replace=False))
    else:
        from flgp.datasets import make_spiral

        X, _, f = make_spiral(1200, noise=0.3, random_state=0)
        graph = knn_point_graph(X, 10)
        obs = np.sort(rng.choice(1200, 120, replace=False))
    y = f[obs] + 0.1 * rng.standard_normal(obs.size)
    z = (y - y.mean()) / y.std()
    best, _, by_order = fit_matern(graph, obs, z)
    own = graph.in_own_units()
    ranges = matern_search_ranges(own)
    top = np.log(largest_eigenvalue(own))
    grid_best = -np.inf
    for nu in (1, 2, 3, 4):
        reg = MaternRegression(own, obs, z, nu)
        lo = max(ranges["log_kappa2"][0], top - np.log(MAX_CONDITION) / nu)
        for u in np.linspace(lo, ranges["log_kappa2"][1], 13):
            for v in np.linspace(np.log(1e-6), np.log(1e2), 13):
                k2 = np.exp(u)
                fit = reg.evaluate(k2, np.exp(v) * reg.prior_variance(k2))
                grid_best = max(grid_best, fit.log_evidence)
    assert best.log_evidence > grid_best - 1.0
    # the labelled block's evidence at the chosen point: m solves with K alone
    K = (own.stiffness + sp.diags(best.kappa2 * own.mass)).tocsc()
    from scipy.sparse.linalg import splu

    lu = splu(K)
    E = np.zeros((own.n_nodes, obs.size))
    E[obs, np.arange(obs.size)] = 1.0
    W = lu.solve(E)
    for _ in range(best.nu - 1):
        W = lu.solve(own.mass[:, None] * W)
    S = best.amplitude * (W[obs] + best.ratio * np.eye(obs.size))
    S = 0.5 * (S + S.T)
    ref = -0.5 * (obs.size * np.log(2 * np.pi) + np.linalg.slogdet(S)[1]
                  + z @ np.linalg.solve(S, z))
    assert best.log_evidence == pytest.approx(ref, abs=1e-3)


# -- checks -------------------------------------------------------------------------------

def test_a_given_graph_must_be_built_on_the_rows_it_is_given():
    ijk = np.argwhere(np.ones((6, 5, 4), bool))
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    affine[:3, 3] = (-30.0, 12.0, 4.0)
    world = ijk @ affine[:3, :3].T + affine[:3, 3]
    y = _targets(world)
    wrong = lattice_graph(ijk, np.diag([2.0, 2.0, 2.0, 1.0]))      # no translation
    with pytest.raises(ValueError, match="not the rows of X"):
        FLGPRegressor(GraphMaternPrior(wrong)).fit(world, y)
    with pytest.raises(ValueError, match="not the rows of X"):
        FLGPRegressor([HeatKernelPrior(), GraphMaternPrior(wrong), RBFPrior()]).fit(world, y)
    labels = np.where(np.isnan(y), -1, (world[:, 0] > world[:, 0].mean()).astype(int))
    with pytest.raises(ValueError, match="not the rows of X"):
        FLGPClassifier(GraphMaternPrior(wrong)).fit(world, labels)
    flat = np.random.default_rng(0).random((50, 2))
    with pytest.raises(ValueError, match="2 coordinates but X has 3"):
        FLGPRegressor(GraphMaternPrior(knn_point_graph(flat, 5))).fit(
            np.c_[flat, np.zeros(50)], np.where(np.arange(50) < 10, flat[:, 0], np.nan))
    # found before anything is fitted: "auto" does not fit the heat kernel first
    from flgp.models.regressor import FLGPRegressor as Reg

    def no_fit(*args, **kwargs):
        raise AssertionError("the heat kernel was fitted before the graph was checked")

    for est in (Reg([HeatKernelPrior(), GraphMaternPrior(wrong)]),
                FLGPClassifier([HeatKernelPrior(), GraphMaternPrior(wrong)])):
        est._candidates = no_fit
        with pytest.raises(ValueError, match="not the rows of X"):
            est.fit(world, y if isinstance(est, Reg) else labels)
    # the right graph, rounded to float32 as images are stored: accepted
    right = lattice_graph(ijk, affine)
    reg = FLGPRegressor(GraphMaternPrior(right)).fit(world.astype(np.float32), y)
    assert reg.method_ == "graph_matern"


@pytest.mark.parametrize("build", [
    lambda g: matern_precision(g, 0.5, 2.5),
    lambda g: SparsePrecisionPrior(g, nu=1.5),
    lambda g: MaternRegression(g, np.array([0, 3]), np.array([0.0, 1.0]), 2.5),
    lambda g: MaternFamily(g, 0),
    lambda g: MaternFamily(g, True),
])
def test_a_fractional_or_invalid_order_is_refused(build):
    g = lattice_graph(np.argwhere(np.ones((4, 4, 2), bool)))
    with pytest.raises(ValueError, match="positive integer"):
        build(g)


def test_a_whole_float_order_is_an_integer_order():
    g = lattice_graph(np.argwhere(np.ones((4, 4, 2), bool)))
    np.testing.assert_array_equal(matern_precision(g, 0.5, 2.0).toarray(),
                                  matern_precision(g, 0.5, 2).toarray())


def test_classifier_order_two_on_a_mesh_names_the_estimators_options():
    V, F = _bumpy_mesh(10)
    y = np.full(len(V), -1)
    y[[0, 99]] = (0, 1)
    with pytest.raises(ValueError, match="matern_order=1"):
        FLGPClassifier(GraphMaternPrior(mesh_graph(V, F), nu=2)).fit(V, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FLGPClassifier(GraphMaternPrior(mesh_graph(V, F), nu=1)).fit(V, y)
    assert clf.label_distributions_.shape == (len(V), 2)


def test_rbf_gp_with_a_feature_constant_over_the_labels_is_unit_free():
    """A feature constant over the labelled rows (but not over the cloud) is standardised
    by the cloud's spread, not by 1 in the units of X: the RBF GP's fit and predictions
    are the same for X and 1000 X (before, the RMSE went from 0.29 to 1.09)."""
    from flgp import RBFPrior

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (600, 2))
    f = np.sin(4 * X[:, 0]) + X[:, 1]
    lab = np.argsort(np.abs(X[:, 1] - 0.5))[:30]
    X[lab, 1] = 0.5
    y = np.full(600, np.nan)
    y[lab] = f[lab]
    a = FLGPRegressor(RBFPrior()).fit(X, y)
    b = FLGPRegressor(RBFPrior()).fit(1000.0 * X, y)
    # at the search's tolerance (the two searches see inputs equal to rounding); before
    # the fix the means differed by up to 1.5
    np.testing.assert_allclose(b.transduction_, a.transduction_, atol=1e-4)
    np.testing.assert_allclose(b.transduction_std_, a.transduction_std_, atol=1e-4)
    assert abs(b.log_marginal_likelihood_ - a.log_marginal_likelihood_) < 1e-3
