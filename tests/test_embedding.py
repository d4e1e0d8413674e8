"""Diffusion maps and GP embeddings (Gilbert and O'Neill) against independent dense
computations written out here from the paper's Algorithms 1-5 and eq. (26)."""

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from flgp import compute_eigenpairs
from flgp.datasets import make_swiss_roll
from flgp.embedding import DiffusionMap, GPEmbedding, auto_diffusion_steps
from flgp.embedding.metrics import (bilipschitz_distortion, diffusion_distances,
                                    mean_relative_error)
from flgp.graph.affinity import build_dense_affinity

from conftest import assert_allclose_up_to_sign, noisy_circle


def algorithm1(X, eps):
    """Algorithm 1 line by line."""
    K = np.exp(-squareform(pdist(X, "sqeuclidean")) / eps)
    q = K.sum(1)
    Kt = K / np.outer(q, q)
    v = Kt.sum(1)
    return Kt / np.sqrt(np.outer(v, v))


def algorithm2(X, eps, n_iter=5000):
    """Algorithm 2's fixed point by the plain iteration d <- K (1/d), averaged over the
    2-cycle (the paper's D = lim D_i^1/2 D_(i+1)^1/2)."""
    K = np.exp(-squareform(pdist(X, "sqeuclidean")) / eps)
    d_prev = np.ones(len(X))
    d = K @ (1 / d_prev)
    for _ in range(n_iter):
        d_prev, d = d, K @ (1 / d)
    dstar = np.sqrt(d * d_prev)
    return K / np.outer(dstar, dstar)


@pytest.fixture
def circle(rng):
    return noisy_circle(60, rng, noise=0.02)


def test_algorithm1_matches_the_paper(circle):
    aff = build_dense_affinity(circle, epsilon=0.3)
    np.testing.assert_allclose(aff.matrix, algorithm1(circle, 0.3), rtol=1e-12, atol=1e-15)


def test_algorithm2_is_bistochastic_to_tol_and_matches_the_fixed_point(circle):
    aff = build_dense_affinity(circle, epsilon=0.3, normalization="bistochastic", tol=1e-10)
    B = aff.matrix
    np.testing.assert_allclose(B, B.T, atol=1e-15)
    assert np.max(np.abs(B.sum(1) - 1)) <= 1e-10
    np.testing.assert_allclose(B, algorithm2(circle, 0.3), rtol=1e-7)


def test_algorithm2_cap_raises(circle):
    with pytest.raises(ValueError, match="did not converge"):
        build_dense_affinity(circle, epsilon=0.3, normalization="bistochastic", max_iter=2)


@pytest.mark.parametrize("normalization, alpha", [("symmetric", None), ("symmetric", 0.5),
                                                  ("bistochastic", None)])
def test_new_point_rows_reproduce_fitted_rows(circle, normalization, alpha):
    aff = build_dense_affinity(circle, epsilon=0.3, normalization=normalization, alpha=alpha)
    rows = np.vstack([r for _, _, r, _ in aff.rows(circle, chunk=17)])
    np.testing.assert_allclose(rows, aff.matrix, rtol=1e-7, atol=1e-14)


def test_far_new_point_gets_finite_rows(circle):
    aff = build_dense_affinity(circle, epsilon=0.01)
    (_, _, rows, _), = aff.rows(np.array([[1e3, 1e3]]))
    assert np.all(np.isfinite(rows))


def test_diffusion_distances_match_rows_of_matrix_power(circle):
    A = algorithm1(circle, 0.3)
    At = np.linalg.matrix_power(A, 3)
    np.testing.assert_allclose(diffusion_distances(circle, 0.3, 3),
                               squareform(pdist(At)), atol=1e-10)


def test_diffusion_map_is_algorithm3(circle):
    A = algorithm1(circle, 0.3)
    mu, phi = np.linalg.eigh(A)
    mu, phi = mu[::-1], phi[:, ::-1]
    dm = DiffusionMap(4, epsilon=0.3, t=2).fit(circle)
    assert_allclose_up_to_sign(dm.embedding_, phi[:, 1:5] * mu[1:5] ** 2, atol=1e-9)
    np.testing.assert_allclose(dm.eigenvalues_[:5], mu[:5], atol=1e-12)


def test_diffusion_map_with_all_components_gives_the_diffusion_distance(circle):
    # bistochastic: the dropped top eigenvector is constant, so with n - 2 components only
    # the smallest eigenvalue (tiny at t = 3) is missing
    n = circle.shape[0]
    dm = DiffusionMap(n - 2, epsilon=0.3, t=3, normalization="bistochastic", tol=1e-12)
    Y = dm.fit_transform(circle)
    D = diffusion_distances(circle, 0.3, 3, normalization="bistochastic", tol=1e-12)
    np.testing.assert_allclose(pdist(Y), squareform(D), atol=1e-8)


def test_markov_coordinates_give_the_markov_diffusion_distance(circle):
    """García-Heredia et al. eq. (11): sum_k (P^t_ik - P^t_jk)^2 / pi_k with P = D^-1 W."""
    n = circle.shape[0]
    dm = DiffusionMap(n - 2, epsilon=0.3, t=3, alpha=0.5, coordinates="markov").fit(circle)
    K = np.exp(-squareform(pdist(circle, "sqeuclidean")) / 0.3)
    q = K.sum(1)
    W = K / np.outer(q, q) ** 0.5
    P = W / W.sum(1, keepdims=True)
    pi = W.sum(1) / W.sum()
    Pt = np.linalg.matrix_power(P, 3)
    ref = pdist(Pt / np.sqrt(pi)[None, :])
    np.testing.assert_allclose(pdist(dm.embedding_), ref, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("coordinates", ["symmetric", "markov"])
def test_diffusion_map_nystrom_extension(circle, rng, coordinates):
    dm = DiffusionMap(3, epsilon=0.3, t=2, coordinates=coordinates).fit(circle)
    np.testing.assert_allclose(dm.transform(circle), dm.embedding_, atol=1e-12)
    # a new point: a(x) phi / mu * mu^t with a(x) from Algorithm 1's formulas
    x = np.array([[0.9, 0.3]])
    K = np.exp(-squareform(pdist(circle, "sqeuclidean")) / 0.3)
    q = K.sum(1)
    kx = np.exp(-((circle - x) ** 2).sum(1) / 0.3)
    kt = kx / (kx.sum() * q)
    v = (K / np.outer(q, q)).sum(1)
    ax = kt / np.sqrt(kt.sum() * v)
    A = algorithm1(circle, 0.3)
    mu, phi = np.linalg.eigh(A)
    mu, phi = mu[::-1][1:4], phi[:, ::-1][:, 1:4]
    y = ax @ phi * mu                       # mu^(t - 1), t = 2
    if coordinates == "markov":
        y = y / np.sqrt(kt.sum() / v.sum())
    got = dm.transform(x)[0]
    np.testing.assert_allclose(np.abs(got), np.abs(y), rtol=1e-8)


@pytest.mark.parametrize("sketch", ["gaussian", "rademacher"])
def test_gp_embedding_monte_carlo_proposition_3_2(circle, sketch):
    """E|y_i - y_j|^2 = |a_i - a_j|^2 for rows of A^p: with k sketch columns the embedding's
    squared distance is the mean of k i.i.d. terms, checked within 5 standard errors."""
    X = circle[:25]
    k, p = 4000, 2
    Y = GPEmbedding(k, epsilon=0.3, t=p, sketch=sketch, random_state=0).fit_transform(X)
    A = algorithm1(X, 0.3)
    truth = pdist(np.linalg.matrix_power(A, p), "sqeuclidean")
    i, j = np.triu_indices(len(X), 1)
    terms = k * (Y[i] - Y[j]) ** 2             # (A^p g_c)_i - (A^p g_c)_j, squared
    mean = terms.mean(1)
    se = terms.std(1, ddof=1) / np.sqrt(k)
    assert np.all(np.abs(mean - truth) <= 5 * se + 1e-15)
    if sketch == "rademacher":
        G = np.round(Y * np.sqrt(k))            # not recoverable; check the sign pattern
        assert np.all(np.isfinite(G))


def test_gp_embedding_dense_is_algorithm4_with_the_same_sketch(circle):
    k, p = 3, 4
    gp = GPEmbedding(k, epsilon=0.3, t=p, random_state=7).fit(circle)
    G = np.random.default_rng(7).standard_normal((circle.shape[0], k))
    ref = np.linalg.matrix_power(algorithm1(circle, 0.3), p) @ G / np.sqrt(k)
    np.testing.assert_allclose(gp.embedding_, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gp.transform(circle), gp.embedding_, atol=1e-12)


@pytest.mark.parametrize("cls", [DiffusionMap, GPEmbedding])
def test_flgp_method_matches_engine_eigenpairs(rng, cls):
    X = noisy_circle(800, rng, noise=0.02)
    kw = dict(n_induced=120, n_eigenpairs=20, random_state=0)
    est = cls(2, method="flgp", t=5, **kw).fit(X)
    ep = compute_eigenpairs(X, kernel="se", **kw)
    mu = 1 - ep.eigenvalues
    if cls is DiffusionMap:
        assert_allclose_up_to_sign(est.embedding_, ep.eigenvectors[:, 1:3] * mu[1:3] ** 5,
                                   atol=1e-10)
    else:
        ref = (ep.eigenvectors * mu ** 5) @ est.sketch_coefficients_
        np.testing.assert_allclose(est.embedding_, ref, atol=1e-10)
    np.testing.assert_allclose(est.transform(X[:50]), est.embedding_[:50], atol=1e-9)


def test_flgp_gp_embedding_monte_carlo(rng):
    X = noisy_circle(600, rng, noise=0.02)
    k, t = 3000, 4
    gp = GPEmbedding(k, method="flgp", t=t, sketch="rademacher", n_induced=100,
                     n_eigenpairs=30, random_state=0).fit(X)
    ep = gp._eigenbasis
    sub = np.arange(0, 600, 40)
    truth = pdist(ep.phi[sub] * ep.mu ** t, "sqeuclidean")
    i, j = np.triu_indices(len(sub), 1)
    Y = gp.embedding_[sub]
    terms = k * (Y[i] - Y[j]) ** 2
    se = terms.std(1, ddof=1) / np.sqrt(k)
    assert np.all(np.abs(terms.mean(1) - truth) <= 5 * se + 1e-15)


def test_auto_time_is_the_smallest_admissible_integer():
    mu = np.array([0.99, 0.98, 0.9, 0.85, 0.8, 0.7, 0.5])
    for k in (1, 2, 3):
        t = auto_diffusion_steps(mu, k)
        def ok(s):
            w = (mu / mu[0]) ** (2 * s)
            return w[k:].sum() <= 0.1 * w[:k].sum()
        assert ok(t) and (t == 1 or not ok(t - 1))
    # no gap after the k-th eigenvalue: capped where mu_1^{2t} reaches 1e-3
    flat = np.full(5, 0.9)
    assert auto_diffusion_steps(flat, 2) == int(np.floor(np.log(1e-3) / (2 * np.log(0.9))))


def test_auto_time_rejects_bad_spectra():
    with pytest.raises(ValueError, match="finite"):
        auto_diffusion_steps(np.array([0.9, np.nan]), 1)
    with pytest.raises(ValueError, match="decreasing"):
        auto_diffusion_steps(np.array([0.5, 0.9]), 1)
    with pytest.raises(ValueError, match="n_components"):
        auto_diffusion_steps(np.array([0.9, 0.5]), 0)


def test_auto_time_on_a_circle_keeps_the_first_harmonics(circle):
    dm = DiffusionMap(2, epsilon=0.3).fit(circle)
    mu = dm.eigenvalues_[1:]
    w = mu ** (2 * dm.t_)
    assert w[2:].sum() <= 0.1 * w[:2].sum()
    assert dm.t_ >= 1 and float(dm.t_).is_integer()


def test_bilipschitz_distortion():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 3))
    D = squareform(pdist(X))
    assert bilipschitz_distortion(3.0 * X, D) == pytest.approx(1.0)
    # stretch one axis by 2: dilations range over [1, 2] -> L = max / min of the ratios
    Y = X * np.array([2.0, 1.0, 1.0])
    ratios = pdist(Y) / pdist(X)
    assert bilipschitz_distortion(Y, D) == pytest.approx(ratios.max() / ratios.min())
    Y[1] = Y[0]
    assert bilipschitz_distortion(Y, D) == np.inf
    with pytest.raises(ValueError, match="zero"):
        bilipschitz_distortion(X, np.zeros((30, 30)))
    with pytest.raises(ValueError, match="distance matrix"):
        bilipschitz_distortion(X, np.ones((5, 5)))


def test_mean_relative_error():
    Yref = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    Y = Yref * np.array([1.0, 1.5])              # distances 1, 3, sqrt(10) vs 1, 2, sqrt(5)
    expected = np.mean([0.0, 0.5, (np.sqrt(10) - np.sqrt(5)) / np.sqrt(5)])
    assert mean_relative_error(Y, Yref) == pytest.approx(expected)
    assert mean_relative_error(Yref, Yref) == 0.0
    with pytest.raises(ValueError, match="same points"):
        mean_relative_error(Y[:2], Yref)


def test_bad_inputs(circle):
    bad = circle.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DiffusionMap().fit(bad)
    with pytest.raises(ValueError, match="n_components"):
        DiffusionMap(59).fit(circle)
    with pytest.raises(ValueError, match="n_components"):
        GPEmbedding(0).fit(circle)
    with pytest.raises(ValueError, match="bistochastic by construction"):
        DiffusionMap(method="flgp", normalization="symmetric").fit(circle)
    with pytest.raises(ValueError, match="integer powers"):
        GPEmbedding(method="dense", t=2.5).fit(circle)
    with pytest.raises(ValueError, match="'disconnected' parameter"):
        DiffusionMap(disconnected="ignore").fit(circle)
    with pytest.raises(ValueError, match="sketch"):
        GPEmbedding(sketch="sparse").fit(circle)
    with pytest.raises(ValueError, match="epsilon"):
        DiffusionMap(epsilon=-1.0).fit(circle)
    with pytest.raises(TypeError, match="'t' parameter"):
        DiffusionMap(t="long").fit(circle)
    with pytest.raises(ValueError, match="vanishes at t=1e"):
        DiffusionMap(2, t=1e6).fit(circle)                    # mu_1^t underflows
    with pytest.raises(ValueError, match="every pair of points"):
        DiffusionMap(2, epsilon=1e12).fit(circle)             # mu_1 ~ 0
    with pytest.raises(ValueError, match="n_induced=20 gives at most 19"):
        DiffusionMap(30, method="flgp", n_induced=20).fit(circle)
    two_pieces = np.r_[circle, circle + 100.0]
    for est in (DiffusionMap(epsilon=0.3), GPEmbedding(epsilon=0.3, t=2),
                DiffusionMap(method="flgp", n_induced=30)):
        with pytest.raises(ValueError, match="falls apart into 2 pieces .sizes 60, 60."):
            est.set_params(disconnected="raise").fit(two_pieces)
    dm = DiffusionMap(2, epsilon=0.3, t=1).fit(circle)
    with pytest.raises(ValueError, match="features"):
        dm.transform(np.ones((3, 3)))


def test_dense_gp_embedding_refuses_hours_of_products_and_wide_epsilon_warns():
    """Algorithm 2 multiplies t times by the dense affinity: t = 1e8 at n = 300 is refused
    up front (it ran for hours before); an epsilon that makes the affinity nearly constant
    gets a warning instead of silently tiny coordinates."""
    X, _ = make_swiss_roll(300, random_state=0)
    with pytest.raises(ValueError, match="would run for hours"):
        with pytest.warns(UserWarning, match="products with the dense"):
            GPEmbedding(2, t=10**8, random_state=0).fit_transform(X)
    assert GPEmbedding(2, t=1000, random_state=0).fit_transform(X).shape == (300, 2)
    with pytest.warns(UserWarning, match="nearly constant"):
        DiffusionMap(2, epsilon=1e10).fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DiffusionMap(2, epsilon=100.0).fit_transform(X)


# ----------------------------------------------------------------- method="auto", defaults


def test_auto_method_is_dense_up_to_700_points_and_flgp_above(rng):
    X = noisy_circle(60, rng, noise=0.02)
    auto = DiffusionMap(2, epsilon=0.3, t=2).fit(X)
    dense = DiffusionMap(2, epsilon=0.3, t=2, method="dense").fit(X)
    assert auto.method_ == "dense"
    np.testing.assert_array_equal(auto.embedding_, dense.embedding_)
    X, _ = make_swiss_roll(701, random_state=0)
    for cls in (DiffusionMap, GPEmbedding):
        auto = cls(random_state=0).fit(X)
        flgp = cls(method="flgp", random_state=0).fit(X)
        assert auto.method_ == "flgp"
        np.testing.assert_array_equal(auto.embedding_, flgp.embedding_)
    assert DiffusionMap(random_state=0).fit(X[:700]).method_ == "dense"
    # options only the dense algorithm has keep it at any size; a non-integer power needs
    # the eigenpairs
    assert DiffusionMap(normalization="symmetric").fit(X).method_ == "dense"
    assert DiffusionMap(alpha=0.5).fit(X).method_ == "dense"
    assert GPEmbedding(t=2.5, random_state=0).fit(X[:100]).method_ == "flgp"


@pytest.mark.parametrize("k, s, M", [(2, 300, 30), (12, 390, 39)])
def test_flgp_default_sizes(k, s, M):
    """M = max(3 (k + 1), 30) eigenpairs and s = 10 M induced points (docs/embedding.md)."""
    X, _ = make_swiss_roll(2000, random_state=0)
    dm = DiffusionMap(k, method="flgp", random_state=0).fit(X)
    assert dm._eigenbasis.eigenpairs.extension.graph.n_induced == s
    assert dm.eigenvalues_.shape == (M,)
    small = DiffusionMap(k, method="flgp", random_state=0).fit(X[:400])
    assert small._eigenbasis.eigenpairs.extension.graph.n_induced == 100     # n // 4


# ------------------------------------------------------------------------ disconnected data


def _three_pieces(rng):
    """A circle, a smaller circle and a blob, each far from the others."""
    c = noisy_circle(60, rng, noise=0.02)
    X = np.r_[c, 0.8 * c[:40] + [100.0, 0.0], 0.3 * rng.standard_normal((20, 2)) - [0, 100]]
    return X, np.repeat([0, 1, 2], [60, 40, 20])


def _piece_spectra(X, truth, eps):
    """Each piece's Algorithm 1 eigenpairs by numpy (descending) and its degrees v."""
    out = []
    for p in range(truth.max() + 1):
        Xp = X[truth == p]
        mu, phi = np.linalg.eigh(algorithm1(Xp, eps))
        K = np.exp(-squareform(pdist(Xp, "sqeuclidean")) / eps)
        q = K.sum(1)
        out.append((mu[::-1], phi[:, ::-1], (K / np.outer(q, q)).sum(1)))
    return out


def test_dense_diffusion_map_of_a_cloud_in_pieces(rng):
    """The block-diagonal operator of the pieces' own Algorithm 1 affinities: eigenvalue 1
    three times, then the union of the pieces' non-trivial eigenpairs (numpy, piece by
    piece); in Markov coordinates the two eigenvalue-1 coordinates are constant on each
    piece and put pieces a, b at squared distance 1/m_a + 1/m_b (m the pieces' shares of
    the stationary distribution), whatever basis of that eigenspace is chosen."""
    X, truth = _three_pieces(rng)
    k, t, eps = 5, 2, 0.3
    with pytest.warns(UserWarning, match=r"falls apart into 3 pieces \(sizes 60, 40, 20\)"):
        dm = DiffusionMap(k, epsilon=eps, t=t).fit(X)
    assert dm.method_ == "dense" and dm.n_pieces_ == 3
    np.testing.assert_array_equal(dm.piece_labels_, truth)
    spectra = _piece_spectra(X, truth, eps)
    tail = sorted([(m, p, j) for p, (mu, _, _) in enumerate(spectra)
                   for j, m in enumerate(mu[1:], start=1)], reverse=True)[:k - 2]
    np.testing.assert_allclose(dm.eigenvalues_[:3], 1.0)
    np.testing.assert_allclose(dm.eigenvalues_[3:], [m for m, _, _ in tail], atol=1e-10)
    ref = np.zeros((X.shape[0], k - 2))
    for col, (m, p, j) in enumerate(tail):
        ref[truth == p, col] = spectra[p][1][:, j] * m ** t
    assert_allclose_up_to_sign(dm.embedding_[:, 2:], ref, atol=1e-9)
    np.testing.assert_allclose(dm.transform(X), dm.embedding_, atol=1e-10)

    with pytest.warns(UserWarning, match="3 pieces"):
        mk = DiffusionMap(2, epsilon=eps, t=t, coordinates="markov").fit(X)
    vol = np.array([v.sum() for _, _, v in spectra])
    mass = vol / vol.sum()
    first = np.array([mk.embedding_[truth == p][0] for p in range(3)])
    for p in range(3):
        np.testing.assert_allclose(mk.embedding_[truth == p], first[p][None, :].repeat(
            (truth == p).sum(), 0), atol=1e-9)
    for a in range(3):
        for b in range(a + 1, 3):
            np.testing.assert_allclose(np.sum((first[a] - first[b]) ** 2),
                                       1 / mass[a] + 1 / mass[b], rtol=1e-9)
    # a new point finds its piece: the eigenvalue-1 coordinates are that piece's
    new = np.array([[1.02, 0.0], [100.0, 0.75], [0.1, -100.2]])
    np.testing.assert_allclose(mk.transform(new), first, atol=1e-9)


def test_dense_gp_embedding_of_a_cloud_in_pieces_is_algorithm4_block_by_block(rng):
    X, truth = _three_pieces(rng)
    k, p = 3, 4
    with pytest.warns(UserWarning, match="3 pieces"):
        gp = GPEmbedding(k, epsilon=0.3, t=p, random_state=7).fit(X)
    A = np.zeros((X.shape[0],) * 2)
    for piece in range(3):
        idx = np.flatnonzero(truth == piece)
        A[np.ix_(idx, idx)] = algorithm1(X[idx], 0.3)
    G = np.random.default_rng(7).standard_normal((X.shape[0], k))
    ref = np.linalg.matrix_power(A, p) @ G / np.sqrt(k)
    np.testing.assert_allclose(gp.embedding_, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gp.transform(X), gp.embedding_, atol=1e-12)
    with pytest.warns(UserWarning, match="3 pieces"):
        auto_t = GPEmbedding(k, epsilon=0.3, random_state=7).fit(X)
    assert np.all(np.isfinite(auto_t.embedding_)) and auto_t.t_ >= 1


def test_flgp_embedding_of_a_graph_in_pieces(rng):
    """FLGP: the pieces are the engine's components (the labels the estimators read); the
    eigenvalue-1 coordinates are constant on each piece, at squared distance 1/n_a + 1/n_b
    (uniform stationary weights); the other coordinates are the engine's eigenvectors."""
    X = np.r_[rng.standard_normal((150, 2)), rng.standard_normal((100, 2)) + 100,
              rng.standard_normal((50, 2)) - 100]
    kw = dict(n_induced=30, n_neighbors=2, n_eigenpairs=8, random_state=0)
    with pytest.warns(UserWarning, match=r"FLGP graph falls apart into 3 pieces \(sizes 150, "
                                         r"100, 50\)"):
        dm = DiffusionMap(4, method="flgp", t=3, **kw).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = compute_eigenpairs(X, kernel="se", **kw)
    np.testing.assert_array_equal(dm.piece_labels_, ep.piece_labels)
    np.testing.assert_array_equal(dm.piece_labels_, np.repeat([0, 1, 2], [150, 100, 50]))
    np.testing.assert_allclose(dm.eigenvalues_[:3], 1.0)
    np.testing.assert_allclose(dm.eigenvalues_[3:], 1 - ep.eigenvalues[3:], atol=1e-12)
    assert_allclose_up_to_sign(dm.embedding_[:, 2:], ep.eigenvectors[:, 3:5] * (
        1 - ep.eigenvalues[3:5]) ** 3, atol=1e-10)
    labels, sizes = dm.piece_labels_, np.array([150, 100, 50])
    first = np.array([dm.embedding_[labels == p, :2][0] for p in range(3)])
    np.testing.assert_allclose(dm.embedding_[:, :2], first[labels], atol=1e-12)
    for a in range(3):
        for b in range(a + 1, 3):
            np.testing.assert_allclose(np.sum((first[a] - first[b]) ** 2),
                                       1 / sizes[a] + 1 / sizes[b], rtol=1e-9)
    np.testing.assert_allclose(dm.transform(X), dm.embedding_, atol=1e-10)
    new = np.array([[0.2, 0.1], [100.3, 99.5], [-99.0, -100.4]])
    np.testing.assert_allclose(dm.transform(new)[:, :2], first, atol=1e-12)
    with pytest.warns(UserWarning, match="3 pieces"):
        gp = GPEmbedding(5, method="flgp", **kw).fit(X)
    np.testing.assert_allclose(gp.transform(X), gp.embedding_, atol=1e-10)
    assert np.all(np.isfinite(gp.transform(new)))


def test_nearly_disconnected_dense_graph_warns(rng):
    """Two clusters linked only by their closest pair, whose kernel weight (e^-24) is above
    the 1e-9 / n floor: one piece, but the second eigenvalue is within 1e-9 of 1."""
    a = np.c_[np.linspace(0.0, 1.0, 30), np.zeros(30)]
    X = np.r_[a, a + [5.9, 0.0]]
    with pytest.warns(UserWarning, match="nearly falls apart"):
        dm = DiffusionMap(2, epsilon=1.0, t=1).fit(X)
    assert dm.n_pieces_ == 1 and np.all(np.isfinite(dm.embedding_))
    with pytest.raises(ValueError, match="falls apart"):
        DiffusionMap(2, epsilon=1.0, t=1, disconnected="raise").fit(X)
