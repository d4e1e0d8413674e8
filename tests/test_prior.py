"""The prior interface (flgp.prior.GraphPrior) and its two representations, each against
dense linear algebra: the low-rank prior (flgp.spectral.LowRankPrior) and the graph
Matérn prior at full resolution (flgp.precision.SparsePrecisionPrior)."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import flgp
from flgp.graph.lattice import lattice_graph
from flgp.graph.knn import self_tuning_knn_graph
from flgp.precision import SparsePrecisionPrior, green_scores, matern_precision
from flgp.precision import prior as sparse_prior_module
from flgp.prior import GraphPrior
from flgp.spectral import LowRankPrior


def _dense_posterior(K, lab, y, noise, rows):
    Kll = K[np.ix_(lab, lab)] + noise * np.eye(lab.size)
    Krl = K[np.ix_(rows, lab)]
    mean = Krl @ np.linalg.solve(Kll, y)
    var = np.diag(K)[rows] - np.einsum("ij,ji->i", Krl, np.linalg.solve(Kll, Krl.T))
    return mean, var


@pytest.fixture(scope="module")
def lattice():
    return lattice_graph(np.argwhere(np.ones((7, 6, 1), bool)))


def _check_against_dense(prior, K, rng):
    n = K.shape[0]
    lab = np.sort(rng.choice(n, 6, replace=False))
    rows = rng.choice(n, 9, replace=False)
    np.testing.assert_allclose(prior.labelled_covariance(lab), K[np.ix_(lab, lab)],
                               rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(prior.cross_covariance(lab, rows=rows), K[np.ix_(rows, lab)],
                               rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(prior.cross_covariance(lab), K[:, lab], rtol=1e-8, atol=1e-12)
    W = rng.standard_normal((lab.size, 3))
    np.testing.assert_allclose(prior.cross_covariance(lab, weights=W), K[:, lab] @ W,
                               rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(prior.marginal_variances(rows), np.diag(K)[rows], rtol=1e-8)
    np.testing.assert_allclose(prior.marginal_variances(), np.diag(K), rtol=1e-8)
    y = rng.standard_normal(lab.size)
    ref = multivariate_normal(np.zeros(lab.size), K[np.ix_(lab, lab)] + 0.1 * np.eye(lab.size))
    assert prior.log_evidence(lab, y, 0.1) == pytest.approx(ref.logpdf(y), rel=1e-9)
    mean, var = prior.posterior(lab, y, 0.1, rows=rows)
    mean_ref, var_ref = _dense_posterior(K, lab, y, 0.1, rows)
    np.testing.assert_allclose(mean, mean_ref, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(var, var_ref, rtol=1e-7, atol=1e-12)
    mean, var = prior.posterior(lab, y, 0.1)                       # every point
    mean_ref, var_ref = _dense_posterior(K, lab, y, 0.1, np.arange(n))
    np.testing.assert_allclose(mean, mean_ref, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(var, var_ref, rtol=1e-7, atol=1e-12)


def test_low_rank_prior_from_rows_matches_dense():
    rng = np.random.default_rng(0)
    V = np.linalg.qr(rng.standard_normal((30, 8)))[0]
    w = np.exp(-np.linspace(0, 3, 8))
    prior = LowRankPrior(w, V)
    assert isinstance(prior, GraphPrior) and prior.n_points == 30
    _check_against_dense(prior, V @ np.diag(w) @ V.T, rng)
    # weights of 0 (flushed modes) drop out of the weight-space algebra; none left: K = 0
    for w0 in (np.where(np.arange(8) < 5, w, 0.0), np.zeros(8)):
        _check_against_dense(LowRankPrior(w0, V), V @ np.diag(w0) @ V.T, rng)


def test_low_rank_prior_on_eigenpairs_is_the_heat_kernel():
    X = flgp.datasets.make_concentric_circles(400, random_state=0)[0]
    ep = flgp.compute_eigenpairs(X, n_induced=80, n_eigenpairs=15, random_state=0)
    prior = LowRankPrior.of_family(ep, t=2.0, amplitude=3.0)
    V = ep.eigenvectors
    w = 3.0 * ep.kernel_scale * np.exp(-2.0 * ep.eigenvalues)
    _check_against_dense(prior, V @ np.diag(w) @ V.T, np.random.default_rng(1))
    # the out-of-sample form: covariances between points given by their eigenvector rows
    Vn = ep.extend(X[:5] * 1.01)
    np.testing.assert_allclose(prior.gram(Vn, V[:3]), Vn @ np.diag(w) @ V[:3].T, rtol=1e-10)


@pytest.mark.parametrize("nu", [1, 2])
@pytest.mark.parametrize("centred", [False, True])
def test_sparse_precision_prior_matches_dense_inverse(lattice, nu, centred):
    Q = matern_precision(lattice, 0.4, nu).toarray()
    K = 1.7 * np.linalg.inv(Q)
    if centred:
        P = np.eye(K.shape[0]) - 1.0 / K.shape[0]
        K = P @ K @ P
    prior = SparsePrecisionPrior(lattice, nu=nu, kappa2=0.4, amplitude=1.7, centred=centred)
    _check_against_dense(prior, K, np.random.default_rng(nu))


def test_amg_solver_matches_the_factor(lattice):
    exact = SparsePrecisionPrior(lattice, nu=2, kappa2=0.4, centred=True)
    amg = SparsePrecisionPrior(lattice, nu=2, kappa2=0.4, centred=True, solver="amg",
                               tol=1e-12)
    lab = [0, 5, 17, 30]
    np.testing.assert_allclose(amg.cross_covariance(lab), exact.cross_covariance(lab),
                               rtol=1e-7, atol=1e-9)


def test_monte_carlo_variances_beyond_the_exact_rows(lattice, monkeypatch):
    Q = matern_precision(lattice, 0.4, 1).toarray()
    K = np.linalg.inv(Q)
    P = np.eye(K.shape[0]) - 1.0 / K.shape[0]
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 5)
    var = SparsePrecisionPrior(lattice, nu=1, kappa2=0.4).marginal_variances()
    # Rao-Blackwellised Monte Carlo from the factor, 64 draws: a few per cent
    err = np.abs(var - np.diag(K)) / np.diag(K)
    assert err.mean() < 0.05 and err.max() < 0.25
    # centred (with a factor too) and with conjugate gradients: Rao-Blackwellised
    # perturbation draws (16), within the estimator's stated error (relative sd up to
    # sqrt(2/16) = 35 %)
    for centred, solver, ref in ((True, "cholesky", P @ K @ P), (False, "amg", K),
                                 (True, "amg", P @ K @ P)):
        var = SparsePrecisionPrior(lattice, nu=1, kappa2=0.4, centred=centred,
                                   solver=solver, tol=1e-10).marginal_variances()
        rel = np.abs(var / np.diag(ref) - 1.0)
        assert np.median(rel) < 0.25 and rel.max() < 1.2


def test_second_order_perturbation_draws_take_one_solve(lattice, monkeypatch):
    """Order 2's perturbation draws are S⁻¹ C^{1/2} z (one solve a draw, as Q⁻¹ R z with
    R = S C^{-1/2}): the Rao-Blackwellised variances lie within their error of the dense diag(P Q_2⁻¹ P)
    (centred, by a factor) and diag(Q_2⁻¹) (by AMG)."""
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 5)
    Q = matern_precision(lattice, 0.4, 2).toarray()
    K = np.linalg.inv(Q)
    P = np.eye(K.shape[0]) - 1.0 / K.shape[0]
    calls = []
    # relative sd up to sqrt(2/S): 2.2 % at 4,000 draws, 7 % at 400
    for centred, solver, ref, draws, bound in ((True, "cholesky", P @ K @ P, 4000, 0.04),
                                               (False, "amg", K, 400, 0.1)):
        prior = SparsePrecisionPrior(lattice, nu=2, kappa2=0.4, centred=centred,
                                     solver=solver, tol=1e-10)
        solve = prior._solve
        prior._solve = lambda B, solve=solve: calls.append(np.shape(B)) or solve(B)
        var = prior.marginal_variances(n_samples=draws)
        rel = np.abs(var / np.diag(ref) - 1.0)
        assert np.median(rel) < bound and rel.max() < 4 * bound
    # one solve of all the draws at once a prior (not two)
    assert calls == [(K.shape[0], 4000), (K.shape[0], 400)]


def test_perturbation_variances_never_form_the_precision(monkeypatch):
    """The perturbation draws apply ``Q`` as ``S x`` / ``S C⁻¹ S x`` and read its diagonal
    off ``S`` (``Q_2`` fills in): ``matern_precision`` is never called, and on a mesh
    whose lumped masses vary (``C ≠ cI``) the variances lie within their error of the
    dense diag(Q_ν⁻¹) for both orders."""
    from flgp.graph.mesh import mesh_graph

    # a grid of right triangles with uneven columns: positive weights, masses varying 4x
    xs, ys = np.cumsum(np.linspace(0.5, 2.0, 9)), np.arange(8.0)
    V = np.array([(x, y, 0.0) for y in ys for x in xs])
    F = []
    for j in range(ys.size - 1):
        for i in range(xs.size - 1):
            a, b = j * xs.size + i, j * xs.size + i + 1
            F += [(a, b, b + xs.size), (a, b + xs.size, a + xs.size)]
    graph = mesh_graph(V, np.array(F))
    assert np.ptp(graph.mass) > 0.5 * graph.mass.min()
    refs = {nu: np.diag(np.linalg.inv(matern_precision(graph, 0.4, nu).toarray()))
            for nu in (1, 2)}
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 5)

    def formed(*args, **kwargs):
        raise AssertionError("Q was formed")

    monkeypatch.setattr(sparse_prior_module, "matern_precision", formed)
    for nu in (1, 2):
        var = SparsePrecisionPrior(graph, nu=nu, kappa2=0.4, solver="amg",
                                   tol=1e-10).marginal_variances(n_samples=400)
        rel = np.abs(var / refs[nu] - 1.0)
        # relative sd up to sqrt(2/400) = 7 %
        assert np.median(rel) < 0.1 and rel.max() < 0.4


def test_centred_variances_with_a_nearly_intrinsic_prior(lattice, monkeypatch):
    """The classifier's prior (centred, κ² a hundred-thousandth of the graph's scale) with
    a factor: its constant mode's variance (~1/κ²) dwarfs what the centring leaves, so the
    variances come from perturbation draws centred one by one - within their stated error
    of the dense P K P, where draws from the factor centred after the fact would not be."""
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 5)
    Q = matern_precision(lattice, 1e-5, 1).toarray()
    P = np.eye(Q.shape[0]) - 1.0 / Q.shape[0]
    ref = np.diag(P @ np.linalg.inv(Q) @ P)
    var = SparsePrecisionPrior(lattice, nu=1, kappa2=1e-5, centred=True).marginal_variances()
    rel = np.abs(var / ref - 1.0)
    assert np.median(rel) < 0.25 and rel.max() < 1.2


def test_the_two_representations_are_interchangeable(lattice):
    """A low-rank prior holding every eigenpair of K = Q⁻¹ is the same prior: the
    interface's evidence and posterior agree (the estimators can swap them)."""
    sparse = SparsePrecisionPrior(lattice, nu=2, kappa2=0.3)
    lam, V = np.linalg.eigh(matern_precision(lattice, 0.3, 2).toarray())
    low_rank = LowRankPrior(1.0 / lam, V)
    rng = np.random.default_rng(3)
    lab = rng.choice(lattice.n_nodes, 8, replace=False)
    y = rng.standard_normal(8)
    assert low_rank.log_evidence(lab, y, 0.05) == pytest.approx(
        sparse.log_evidence(lab, y, 0.05), rel=1e-9)
    for a, b in zip(low_rank.posterior(lab, y, 0.05), sparse.posterior(lab, y, 0.05)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-10)


def test_green_scores_are_the_centred_prior_times_the_sources():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (60, 3)), rng.normal(4, 1, (60, 3))]
    graph = self_tuning_knn_graph(X, 10)
    lab = np.array([0, 1, 60, 61, 62])
    codes = np.array([0, 0, 1, 1, 2])
    U = green_scores(graph, lab, codes, 3, kappa2=1e-3, tol=1e-12)
    n = X.shape[0]
    K = graph.stiffness.toarray() + 1e-3 * np.diag(graph.mass)
    P = np.eye(n) - 1.0 / n
    B = np.zeros((n, 3))
    B[lab, codes] = 1.0
    B[lab] -= B[lab].mean(axis=0)
    np.testing.assert_allclose(U, P @ np.linalg.solve(K, P @ B), rtol=1e-6, atol=1e-9)


def test_bad_arguments_are_refused(lattice):
    with pytest.raises(ValueError, match="kappa2 = 0"):
        SparsePrecisionPrior(lattice, kappa2=0.0)
    with pytest.raises(ValueError, match="solver"):
        SparsePrecisionPrior(lattice, solver="lu")
    with pytest.raises(ValueError, match="nu"):
        SparsePrecisionPrior(lattice, nu=0)
    with pytest.raises(ValueError, match="amplitude"):
        SparsePrecisionPrior(lattice, amplitude=-1.0)
    prior = SparsePrecisionPrior(lattice, kappa2=0.5)
    with pytest.raises(IndexError, match="row indices"):
        prior.cross_covariance([0, lattice.n_nodes])
    with pytest.raises(ValueError, match="boolean row mask"):
        prior.marginal_variances(np.ones(3, bool))
    with pytest.raises(ValueError, match="noise"):
        prior.log_evidence([0, 1], [0.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="one value per labelled"):
        prior.posterior([0, 1], [0.0], 0.1)
    with pytest.raises(ValueError, match="weights"):
        prior.cross_covariance([0, 1], weights=np.ones((3, 2)))
    with pytest.raises(ValueError, match="tol"):
        SparsePrecisionPrior(lattice, solver="amg", tol=0.0)
    with pytest.raises(ValueError, match="one row per node"):
        prior.apply_inverse(np.ones((3, 2)))
    with pytest.raises(ValueError, match="1-d"):
        LowRankPrior(np.ones((2, 2)))
    with pytest.raises(ValueError, match="columns"):
        LowRankPrior(np.ones(3)).variances_of(np.ones((4, 2)))
    with pytest.raises(ValueError, match="weights only"):
        LowRankPrior(np.ones(3)).marginal_variances()


def test_a_centred_prior_of_higher_order_needs_uniform_mass():
    from flgp.graph.knn import knn_point_graph

    X = np.random.default_rng(0).normal(size=(50, 2))
    graph = knn_point_graph(X, 6)
    assert not np.all(graph.mass == graph.mass[0])
    with pytest.raises(ValueError, match="uniform mass"):
        SparsePrecisionPrior(graph, nu=2, kappa2=0.1, centred=True)


def test_sparse_evidence_and_posterior_equal_the_dense_block(monkeypatch):
    """Uncentred with a factor, the evidence and posterior go through Q̃ = Q + (A/σ²)PᵀP
    (no m x m block): the same numbers as the interface's dense-block algebra, here with
    many labels; beyond EXACT_VARIANCE_ROWS the variances are Monte Carlo estimates."""
    graph = lattice_graph(np.argwhere(np.ones((20, 15, 1), bool)))
    prior = SparsePrecisionPrior(graph, nu=2, kappa2=0.2, amplitude=2.5)
    rng = np.random.default_rng(4)
    lab = rng.choice(graph.n_nodes, 120, replace=False)
    y = rng.standard_normal(120)
    assert prior.log_evidence(lab, y, 0.3) == pytest.approx(
        GraphPrior.log_evidence(prior, lab, y, 0.3), rel=1e-10)
    rows = rng.choice(graph.n_nodes, 40, replace=False)
    sparse = prior.posterior(lab, y, 0.3, rows=rows)
    dense = GraphPrior.posterior(prior, lab, y, 0.3, rows=rows)
    for a, b in zip(sparse, dense):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-11)
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 10)
    mean, var = prior.posterior(lab, y, 0.3)
    np.testing.assert_allclose(mean[rows], dense[0], rtol=1e-8, atol=1e-11)
    # 64 Rao-Blackwellised draws: a few to 15 per cent a node here (a wrong amplitude or
    # posterior precision would be off by a factor)
    err = np.abs(var[rows] - dense[1]) / dense[1]
    assert err.mean() < 0.1 and err.max() < 0.4
    with pytest.raises(ValueError, match="one target"):
        prior.posterior([1, 1], [0.0, 1.0], 0.3)


def test_the_full_resolution_regressor_fits_the_sparse_prior_evidence():
    """The full-resolution regressor's search evaluates the sparse prior's evidence: at a
    fitted (κ², r) with the profiled amplitude Â, SparsePrecisionPrior's evidence and
    posterior mean are the search's (one implementation of Q̃), and the interface's dense
    labelled block gives the same evidence; any other amplitude gives less."""
    from flgp.precision.gaussian import MaternRegression

    graph = lattice_graph(np.argwhere(np.ones((12, 10, 1), bool)))
    rng = np.random.default_rng(5)
    lab = rng.choice(graph.n_nodes, 30, replace=False)
    z = rng.standard_normal(30)
    fit = MaternRegression(graph, lab, z, nu=2).evaluate(kappa2=0.3, ratio=0.2)
    prior = SparsePrecisionPrior(graph, nu=2, kappa2=0.3, amplitude=fit.amplitude)
    assert prior.log_evidence(lab, z, fit.noise) == pytest.approx(fit.log_evidence, rel=1e-12)
    assert GraphPrior.log_evidence(prior, lab, z, fit.noise) == pytest.approx(
        fit.log_evidence, rel=1e-9)
    np.testing.assert_allclose(prior.posterior(lab, z, fit.noise)[0], fit.mean, rtol=1e-12,
                               atol=1e-14)
    for factor in (0.5, 2.0):
        other = SparsePrecisionPrior(graph, nu=2, kappa2=0.3, amplitude=factor * fit.amplitude)
        assert other.log_evidence(lab, z, factor * fit.noise) < fit.log_evidence
    reg = MaternRegression(graph, lab, z, nu=2)
    with pytest.raises(ValueError, match="kappa2 must be a finite number > 0"):
        reg.posterior_mean(0.0, 0.2)
    with pytest.raises(ValueError, match="ratio .* must be a finite number > 0"):
        reg.evaluate(0.3, np.nan)
    with pytest.raises(ValueError, match="amplitude must be a finite number > 0"):
        reg.log_evidence_at(0.3, 0.2, -1.0)
    with pytest.raises(IndexError, match="node indices"):
        reg.unit_posterior_variances(0.3, 0.2, np.array([graph.n_nodes]), exact_rows=10)


def test_the_heat_kernel_regressor_fits_the_low_rank_prior_evidence():
    """The heat-kernel regressor's search maximises the low-rank prior's evidence: at its
    fitted t, outputscale, noise and resolution k, LowRankPrior's evidence of the centred
    targets is log_marginal_likelihood_ (the same Woodbury code; the interface's dense
    labelled block agrees), and its posterior at every point is the transduction."""
    rng = np.random.default_rng(2)
    theta = rng.uniform(0, 2 * np.pi, 400)
    X = np.c_[np.cos(theta), np.sin(theta)] + 0.02 * rng.standard_normal((400, 2))
    y = np.sin(2 * theta) + 0.1 * rng.standard_normal(400)
    target = np.where(np.arange(400) % 8 == 0, y, np.nan)
    reg = flgp.FLGPRegressor(flgp.HeatKernelPrior(flgp.Eigenbasis(n_induced=80)), random_state=0).fit(X, target)
    ep, k, t = reg.eigenpairs_, reg.n_eigenpairs_, reg.diffusion_time_
    lab = reg.labelled_indices_
    centre = float(y[lab].mean())
    w = reg.outputscale_ * ep.kernel_scale * np.exp(-t * ep.eigenvalues[:k])
    prior = LowRankPrior(w, ep.eigenvector_rows(np.arange(400))[:, :k])
    evidence = prior.log_evidence(lab, y[lab] - centre, reg.noise_)
    assert evidence == pytest.approx(reg.log_marginal_likelihood_, rel=1e-10)
    assert GraphPrior.log_evidence(prior, lab, y[lab] - centre, reg.noise_) == pytest.approx(
        reg.log_marginal_likelihood_, rel=1e-8)
    mean, var = prior.posterior(lab, y[lab] - centre, reg.noise_)
    np.testing.assert_allclose(centre + mean, reg.transduction_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.sqrt(var), reg.transduction_std_, rtol=1e-6, atol=1e-8)


def test_perturbation_variances_beyond_float64_are_an_error(lattice, monkeypatch):
    """κ² in extreme units: order 2's diagonal Σ_k S_ik² / c_k overflows - a clear error
    naming the fix (as forming Q did before), never infinite or NaN variances."""
    monkeypatch.setattr(sparse_prior_module, "EXACT_VARIANCE_ROWS", 5)
    prior = SparsePrecisionPrior(lattice, nu=2, kappa2=1e170, solver="amg", tol=1e-6)
    with pytest.raises(ValueError, match=r"leaves float64 .* graph\.in_own_units"):
        prior.marginal_variances(n_samples=4)
