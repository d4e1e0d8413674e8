"""Compressed diffusion maps (Gigante et al., papers/003): the compressed kernel against its
definition, Theorem 2, the N = n limit against a dense eigendecomposition, Definition 5
against its spectral form, out-of-sample consistency, the scikit-learn API and bad input."""

import numpy as np
import pytest
import scipy.sparse as sp

from flgp.datasets import make_swiss_roll
from flgp.embedding import compressed
from flgp.graph.knn import gaussian_knn_graph
from flgp.embedding.compressed import (CompressedDiffusionMap, _affinity, assign_partitions,
                                       compressed_kernel, diffusion_coherence,
                                       snapped_kmeans_centroids)
from flgp.embedding.compressed_baselines import (align_components,
                                                 centroid_interpolation_diffusion_map,
                                                 embedding_sse, exact_diffusion_map,
                                                 nystrom_diffusion_map)

from conftest import assert_allclose_up_to_sign


@pytest.fixture(scope="module")
def roll():
    X, _ = make_swiss_roll(300, random_state=1)
    return X


def _dense_graph(X, k):
    G, eps, _, _ = gaussian_knn_graph(X, k)
    return G.toarray(), eps


def _dense_pointwise_dm(Gd):
    """Right eigenvectors of P = Q^{-1} G by numpy's dense eigh, pi-normalised, descending."""
    q = Gd.sum(1)
    S = Gd / np.sqrt(np.outer(q, q))
    mu, psi = np.linalg.eigh(S)
    mu, psi = mu[::-1], psi[:, ::-1]
    return mu, psi / np.sqrt(q / q.sum())[:, None]


# ----------------------------------------------------------------------------- the graph


def test_graph_is_symmetric_gaussian_on_knn_union(roll):
    k = 6
    G, eps, _, kth = gaussian_knn_graph(roll, k)
    Gd = G.toarray()
    np.testing.assert_allclose(Gd, Gd.T)
    np.testing.assert_allclose(np.diag(Gd), 1.0)
    D2 = ((roll[:, None, :] - roll[None, :, :]) ** 2).sum(-1)
    order = np.argsort(D2, axis=1)[:, :k + 1]
    knn = np.zeros_like(D2, dtype=bool)
    knn[np.arange(len(roll))[:, None], order] = True
    union = knn | knn.T
    np.testing.assert_array_equal(Gd > 0, union)
    np.testing.assert_allclose(Gd[union], np.exp(-D2[union] / eps), rtol=1e-10)
    # default bandwidth: mean squared distance to the ceil(k/3) = 2nd nearest other point
    np.testing.assert_allclose(eps, np.sort(D2, axis=1)[:, 2].mean(), rtol=1e-10)
    np.testing.assert_allclose(kth, np.sort(D2, axis=1)[:, k], rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------- Definition 1, 2


def test_compressed_kernel_matches_definitions_and_theorem2(rng):
    X = rng.standard_normal((60, 2))
    Gd, _ = _dense_graph(X, 8)
    q = Gd.sum(1)
    n, N = len(X), 7
    labels = rng.integers(0, N, n)
    labels[:N] = np.arange(N)
    # Definition 1, pointwise: k(x, y) = sum_r g(x, r) g(r, y) / q(r)
    K = np.zeros((n, n))
    for r in range(n):
        K += np.outer(Gd[:, r], Gd[r, :]) / q[r]
    # Theorem 1, part 2: ||k(x, .)||_1 = ||g(x, .)||_1
    np.testing.assert_allclose(K.sum(1), q, rtol=1e-12)
    # Definition 2: K_S(S_i, S_j) = sum over x in S_i, y in S_j of k(x, y)
    KS_ref = np.array([[K[np.ix_(labels == i, labels == j)].sum() for j in range(N)]
                       for i in range(N)])
    KS = compressed_kernel(sp.csr_matrix(Gd), labels, N)
    np.testing.assert_allclose(KS, KS_ref, rtol=1e-12)
    # Theorem 2, part 2: row sums = summed Gaussian degrees of each region
    np.testing.assert_allclose(KS.sum(1), np.bincount(labels, weights=q), rtol=1e-12)
    # Theorem 2, part 3: P_S(S, T) = sum_r Pr[S -> r] Pr[r -> T]
    P = Gd / q[:, None]
    dS = KS.sum(1)
    S_to_r = np.array([(P[labels == i] * (q[labels == i] / dS[i])[:, None]).sum(0)
                       for i in range(N)])
    r_to_T = np.stack([P[:, labels == j].sum(1) for j in range(N)], axis=1)
    np.testing.assert_allclose(KS / dS[:, None], S_to_r @ r_to_T, rtol=1e-10)


def test_fitted_kernel_row_sums_are_region_degrees(roll):
    m = CompressedDiffusionMap(3, 25, n_neighbors=8, random_state=0).fit(roll)
    G, _, _, _ = gaussian_knn_graph(roll, 8)
    q = np.asarray(G.sum(1)).ravel()
    np.testing.assert_allclose(m.compressed_kernel_.sum(1),
                               np.bincount(m.labels_, weights=q), rtol=1e-12)
    assert m.eigenvalues_[0] == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(m.eigenvalues_) <= 1e-12)


# ------------------------------------------------------------------ coherence, partition


def test_coherence_is_diagonal_of_A_power(roll):
    G, _, _, _ = gaussian_knn_graph(roll, 8)
    q = np.asarray(G.sum(1)).ravel()
    A = _affinity(G, q)
    Ad = A.toarray()
    np.testing.assert_allclose(diffusion_coherence(A, 1), np.diag(Ad @ Ad), rtol=1e-12)
    exact2 = np.diag(np.linalg.matrix_power(Ad, 4))
    est = diffusion_coherence(A, 2, n_probes=4000, random_state=0)
    assert np.median(np.abs(est / exact2 - 1)) < 0.05


def test_points_no_centroid_reaches_go_where_the_warning_says():
    # two pieces (a path of 4 and one of 3); both centroids in the first
    rows, cols = [0, 1, 1, 2, 2, 3, 4, 5, 5, 6], [1, 0, 2, 1, 3, 2, 5, 4, 6, 5]
    A = sp.csr_matrix((np.full(10, 0.5), (rows, cols)), shape=(7, 7))
    centroids = np.array([3, 0])
    with pytest.warns(UserWarning, match="first centroid's region"):
        alone = assign_partitions(A, centroids, 1)
    assert np.all(alone[4:] == 0)
    X = np.c_[[0.0, 1.0, 2.0, 3.0, -5.0, 3.5, 9.0], np.zeros(7)]
    with pytest.warns(UserWarning, match="Euclidean-nearest centroid"):
        near = assign_partitions(A, centroids, 1, X)
    np.testing.assert_array_equal(near[4:], [1, 0, 0])     # nearest of x = 3 (0) and 0 (1)


def test_assignment_minimises_angular_diffusion_distance(rng):
    # dense enough that every point is within 2t hops of every centroid: Definition 5 applies
    X = rng.standard_normal((80, 2))
    G, _, _, _ = gaussian_knn_graph(X, 30)
    q = np.asarray(G.sum(1)).ravel()
    A = _affinity(G, q)
    t = 2
    centroids = np.array([3, 17, 40, 55, 71])
    labels = assign_partitions(A, centroids, t)
    # Definition 5 through the spectral form: sum_j lambda_j^{2t} psi_j(x) psi_j(y)
    lam, psi = np.linalg.eigh(A.toarray())
    a2t = (psi * lam ** (2 * t)) @ psi.T
    rho = np.diag(a2t)
    cosang = a2t[:, centroids] / np.sqrt(np.outer(rho, rho[centroids]))
    Dc = np.arccos(np.clip(cosang, -1, 1))
    np.testing.assert_array_equal(labels, Dc.argmin(axis=1))
    assert np.all(labels[centroids] == np.arange(len(centroids)))


@pytest.mark.parametrize("t, max_steps, chunk", [(1, 8, 256), (1, 4, 256), (1, None, 256),
                                                 (2, None, 256), (1, 8, 5)])
def test_far_points_scored_at_their_own_step_match_dense_powers(t, max_steps, chunk,
                                                                monkeypatch):
    """Points beyond 2t hops of every centroid are scored at the first even step 2 tau that
    reaches a centroid: argmax_y [A^{2 tau}]_xy / sqrt([A^{2 tau}]_yy), from dense powers.
    The sparse diffusion skips rows that no later score needs; that must change nothing.
    ``chunk = 5`` diffuses the 12 centroids in three blocks, where a scored point may see
    no centroid of a block."""
    monkeypatch.setattr(compressed, "_ASSIGN_CHUNK", chunk)
    X, _ = make_swiss_roll(700, random_state=5)
    G, _, _, _ = gaussian_knn_graph(X, 6)
    q = np.asarray(G.sum(1)).ravel()
    A = _affinity(G, q)
    centroids = np.sort(np.random.default_rng(1).choice(700, size=12, replace=False))
    labels = assign_partitions(A, centroids, t, max_steps=max_steps)
    # hop level by dense boolean powers, then each point's scoring step
    Ad = A.toarray()
    B = (Ad > 0).astype(float)
    level = np.full(700, -1)
    level[centroids] = 0
    reach = np.zeros(700, bool)
    reach[centroids] = True
    for h in range(1, 700):
        new = (B @ reach > 0) & ~reach
        if not new.any():
            break
        level[new] = h
        reach |= new
    step = np.maximum(2 * t, level + level % 2)
    cap = step.max() if max_steps is None else max(2 * t, max_steps)
    assert (step > 2 * t).sum() > 50  # the far points are really tested
    scored = np.flatnonzero(step <= cap)
    powers = {}
    for x in scored:
        s = int(step[x])
        if s not in powers:
            P = np.linalg.matrix_power(Ad, s)
            powers[s] = P[:, centroids] / np.sqrt(np.diag(P)[centroids])[None, :]
        assert labels[x] == powers[s][x].argmax()
    # beyond the cap, level by level: the region of largest one-step transition from the
    # points labelled before (dense)
    lab = np.where(step <= cap, labels, -1)
    for h in np.unique(level[step > cap]):
        rows = np.flatnonzero((level == h) & (step > cap))
        chi = np.zeros((700, 12))
        chi[np.flatnonzero(lab >= 0), lab[lab >= 0]] = 1.0
        lab[rows] = (Ad[rows] @ chi).argmax(axis=1)
    np.testing.assert_array_equal(labels, lab)


def test_far_points_get_a_label_and_regions_are_nonempty(roll):
    m = CompressedDiffusionMap(2, 10, n_neighbors=5, random_state=3).fit(roll)
    assert m.labels_.min() == 0 and m.labels_.max() == 9
    assert np.all(np.bincount(m.labels_) >= 1)
    np.testing.assert_array_equal(m.labels_[m.centroid_indices_], np.arange(10))


def test_kmeans_centroids_give_even_regions_and_a_smaller_error():
    """centroids="kmeans" (not the paper's rule): distinct data points; Definition 5 still
    puts each centroid in its own region (Cauchy-Schwarz: a^{2t}(y, z) <= sqrt(rho(y) rho(z)));
    regions are far more even than with coherence sampling, and the error is lower."""
    X, _ = make_swiss_roll(1500, random_state=0)
    idx = snapped_kmeans_centroids(X, 60, random_state=0)
    assert idx.size == 60 and np.unique(idx).size == 60
    ref, _ = exact_diffusion_map(X, 8)
    fits = {c: CompressedDiffusionMap(8, 60, centroids=c, random_state=0).fit(X)
            for c in ("coherence", "kmeans")}
    cv = {}
    for c, m in fits.items():
        np.testing.assert_array_equal(m.labels_[m.centroid_indices_], np.arange(60))
        sizes = np.bincount(m.labels_)
        cv[c] = sizes.std() / sizes.mean()
    # measured over seeds 0-3: cv 0.52-0.58 (coherence) against 0.24-0.33 (k-means); SSE of
    # 8 unit components 2.2-3.5 against 1.3-3.4 (seed 0: 3.21 against 1.32)
    assert cv["kmeans"] < 0.7 * cv["coherence"]
    sse = {c: embedding_sse(ref, m.embedding_) for c, m in fits.items()}
    assert sse["kmeans"] < sse["coherence"]


# ------------------------------------------------------------------ exactness limit N = n


@pytest.mark.parametrize("t", [1, 2])
def test_one_region_per_point_is_exact_diffusion_map(roll, t):
    """N = n: P_S = P^2 (Theorem 1, part 3); interpolating with Pr[x -> S] = P gives the
    pointwise diffusion map at time 2t + 1, mu^{2t+1} phi."""
    k, nn = 6, 10
    m = CompressedDiffusionMap(k, len(roll), t=t, n_neighbors=nn, random_state=0).fit(roll)
    Gd, _ = _dense_graph(roll, nn)
    mu, phi = _dense_pointwise_dm(Gd)
    np.testing.assert_allclose(m.eigenvalues_, mu[:k + 1] ** 2, atol=1e-12)
    expected = phi[:, 1:k + 1] * mu[1:k + 1] ** (2 * t + 1)
    assert_allclose_up_to_sign(m.embedding_, expected, atol=1e-9)
    # region map = exact map of the MGC operator P^2 at time t
    assert_allclose_up_to_sign(m.region_embedding_, phi[:, 1:k + 1] * mu[1:k + 1] ** (2 * t),
                               atol=1e-9)


@pytest.mark.parametrize("solver", ["shift_invert", "lanczos"])
def test_exact_baseline_matches_dense(roll, solver):
    Gd, _ = _dense_graph(roll, 10)
    mu, phi = _dense_pointwise_dm(Gd)
    emb, info = exact_diffusion_map(roll, 5, t=1, n_neighbors=10, solver=solver)
    np.testing.assert_allclose(info["eigenvalues"], mu[:6], atol=1e-10)
    assert_allclose_up_to_sign(emb, phi[:, 1:6] * mu[1:6] ** 2, atol=1e-7)


# ---------------------------------------------------------------------- out of sample


@pytest.mark.parametrize("interpolation", ["point_to_region", "region_to_point"])
def test_transform_of_training_points_equals_fit_transform(roll, interpolation):
    m = CompressedDiffusionMap(4, 30, n_neighbors=8, interpolation=interpolation,
                               random_state=0)
    Y = m.fit_transform(roll)
    np.testing.assert_allclose(m.transform(roll), Y, rtol=1e-10, atol=1e-13)
    # a slightly moved point lands next to where it started
    Z = m.transform(roll[:20] + 1e-4)
    assert np.abs(Z - Y[:20]).max() < 1e-2 * np.abs(Y).max()


def test_transform_far_point(roll):
    m = CompressedDiffusionMap(2, 20, random_state=0).fit(roll)
    far = roll[:1] + 1e4
    z = m.transform(far)  # point_to_region: shifted weights, a convex combination
    assert np.isfinite(z).all()
    lo, hi = m.region_embedding_.min(0), m.region_embedding_.max(0)
    assert np.all(z >= lo - 1e-12) and np.all(z <= hi + 1e-12)
    m2 = CompressedDiffusionMap(2, 20, interpolation="region_to_point", random_state=0)
    m2.fit(roll)
    with pytest.raises(ValueError, match="underflow"):
        m2.transform(far)


def test_reproducible_and_seed_dependent(roll):
    a = CompressedDiffusionMap(3, 20, random_state=5).fit(roll)
    b = CompressedDiffusionMap(3, 20, random_state=5).fit(roll)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    c = CompressedDiffusionMap(3, 20, random_state=6).fit(roll)
    assert not np.array_equal(a.centroid_indices_, c.centroid_indices_)


def test_approximation_improves_with_partitions():
    X, _ = make_swiss_roll(600, random_state=0)
    ref, _ = exact_diffusion_map(X, 8)
    sse = [embedding_sse(ref, CompressedDiffusionMap(8, N, random_state=0).fit_transform(X))
           for N in (20, 200, 600)]
    assert sse[2] < 1e-12
    assert sse[1] < sse[0]


# ----------------------------------------------------------------------- baselines, SSE


def test_sse_is_invariant_to_sign_order_and_scale(rng):
    R = rng.standard_normal((50, 4))
    B = R[:, [2, 0, 3, 1]] * np.array([-3.0, 0.5, 2.0, -1.0])
    assert embedding_sse(R, B) == pytest.approx(0.0, abs=1e-20)
    Rn, Ba = align_components(R, B)
    np.testing.assert_allclose(Ba, Rn, atol=1e-12)
    # orthogonal unit columns: SSE = 2 per component
    Q, _ = np.linalg.qr(rng.standard_normal((50, 4)))
    assert embedding_sse(Q[:, :2], Q[:, 2:]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="fewer"):
        embedding_sse(R, R[:, :2])


def test_baselines_approximate_exact_map():
    X, _ = make_swiss_roll(1500, random_state=0)
    ref, _ = exact_diffusion_map(X, 4)
    # SSE of 4 unit components lies in [0, 8]; random directions give about 8. The centroid
    # interpolation is the weakest baseline (piecewise-linear between 300 centroids); over
    # k-means seeds 0-3 we measured 0.49-1.91 (Nystrom) and 1.17-2.70 (centroids).
    # Random landmarks (seeds 0-3): 0.81-2.46.
    for fn, kw in ((nystrom_diffusion_map, {}), (nystrom_diffusion_map, {"landmarks": "random"}),
                   (centroid_interpolation_diffusion_map, {})):
        emb, info = fn(X, 4, 300, random_state=0, **kw)
        assert emb.shape == (1500, 4) and np.isfinite(emb).all()
        assert embedding_sse(ref, emb) < 3.0, (fn.__name__, kw)
        if kw:  # random landmarks are data points; volumes count every point once
            U = info["landmarks"]
            assert all(np.any(np.all(X == u, axis=1)) for u in U)
            assert info["volumes"].sum() == 1500


@pytest.mark.parametrize("landmarks", ["kmeans", "random"])
def test_nystrom_extension_reproduces_landmark_eigenvectors(landmarks):
    """At a landmark itself the Nyström extension sum_j p(l, l_j) phi(l_j) / mu returns
    phi(l) when the landmark kernel is the one extended (each landmark one point, w = 1)."""
    X, _ = make_swiss_roll(200, random_state=0)
    emb, info = nystrom_diffusion_map(X, 3, 200, n_neighbors=10, landmarks=landmarks,
                                      random_state=0)
    U = info["landmarks"]
    assert np.all(info["volumes"] == 1)
    Gd, _ = _dense_graph(U, 10)
    mu, phi = _dense_pointwise_dm(Gd)
    idx = np.array([np.flatnonzero((np.abs(X - u).sum(1) < 1e-9))[0] for u in U])
    got = emb[idx]
    # the landmark graph's rows are the k-NN union, the extension uses the k + 1 nearest:
    # equal only where the union adds nothing, so compare through the SSE
    assert embedding_sse(phi[:, 1:4] * mu[1:4] ** 2, got) < 0.05


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("params, err, match", [
    (dict(n_partitions=301), ValueError, "n_partitions=301 exceeds n_samples=300"),
    (dict(n_partitions=1), ValueError, "'n_partitions' parameter"),
    (dict(n_components=10, n_partitions=10), ValueError, "smaller than the number of regions"),
    (dict(t=0), ValueError, "'t' parameter"),
    (dict(t=1.5), TypeError, "'t' parameter"),
    (dict(n_neighbors=0), ValueError, "n_neighbors"),
    (dict(bandwidth=-1.0), ValueError, "bandwidth"),
    (dict(interpolation="nearest"), ValueError, "interpolation"),
    (dict(centroids="grid"), ValueError, "centroids"),
    (dict(n_components=0), ValueError, "n_components"),
])
def test_bad_parameters(roll, params, err, match):
    kw = dict(n_components=2, n_partitions=20, random_state=0)
    kw.update(params)
    with pytest.raises(err, match=match):
        CompressedDiffusionMap(**kw).fit(roll)


def test_bad_data(roll):
    X = roll.copy()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CompressedDiffusionMap(2, 10).fit(X)
    with pytest.raises(ValueError, match="duplicate"):
        CompressedDiffusionMap(2, 10).fit(np.repeat(roll[:50], 6, axis=0))
    m = CompressedDiffusionMap(2, 10, random_state=0).fit(roll)
    with pytest.raises(ValueError, match="features"):
        m.transform(roll[:, :2])
    with pytest.raises(ValueError, match="n_centroids"):
        centroid_interpolation_diffusion_map(roll, 2, 400)
    with pytest.raises(ValueError, match="n_landmarks - 2"):
        nystrom_diffusion_map(roll, 9, 10)
    with pytest.raises(ValueError, match="landmarks"):
        nystrom_diffusion_map(roll, 2, 10, landmarks="grid")


def _three_blobs(rng, sizes=(60, 50, 40)):
    centres = [(0.0, 0.0), (100.0, 0.0), (0.0, -100.0)]
    return np.vstack([rng.standard_normal((m, 2)) + c for m, c in zip(sizes, centres)])


def test_disconnected_graph_is_embedded_piece_by_piece(rng):
    """Three far blobs: a warning naming the pieces; regions never straddle two pieces;
    the first two coordinates (eigenvalue 1) are constant on each piece, and (pi-orthonormal
    eigenvectors of P_S, t = 1) two pieces a, b lie sqrt(1/m_a + 1/m_b) apart, m the pieces'
    shares of the Gaussian degrees (Theorem 2) - whatever basis of the eigenvalue-1 space."""
    X = _three_blobs(rng)
    with pytest.warns(UserWarning, match=r"falls apart into 3 pieces \(sizes 60, 50, 40\)"):
        m = CompressedDiffusionMap(3, 12, n_neighbors=5, random_state=0).fit(X)
    truth = np.repeat([0, 1, 2], [60, 50, 40])
    np.testing.assert_array_equal(m.piece_labels_, truth)
    assert m.n_pieces_ == 3
    np.testing.assert_allclose(m.eigenvalues_[:3], 1.0)
    assert m.eigenvalues_[3] < 1 - 1e-6
    piece_of_region = truth[m.centroid_indices_]
    np.testing.assert_array_equal(piece_of_region[m.labels_], truth)
    assert np.all(np.isfinite(m.embedding_))
    Y = m.embedding_[:, :2]
    for p in range(3):
        np.testing.assert_allclose(Y[truth == p], Y[truth == p][:1].repeat((truth == p).sum(),
                                                                          0), atol=1e-12)
    G, _, _, _ = gaussian_knn_graph(X, 5)
    q = np.asarray(G.multiply(truth[:, None] == truth[None, :]).sum(1)).ravel()
    mass = np.array([q[truth == p].sum() for p in range(3)]) / q.sum()
    first = np.array([Y[truth == p][0] for p in range(3)])
    for a in range(3):
        for b in range(a + 1, 3):
            np.testing.assert_allclose(np.sum((first[a] - first[b]) ** 2),
                                       1 / mass[a] + 1 / mass[b], rtol=1e-9)
    # new points join the piece of their nearest fitted point
    new = np.array([[0.3, -0.2], [99.5, 0.4], [0.2, -100.6]])
    np.testing.assert_allclose(m.transform(new)[:, :2], first, atol=1e-12)
    np.testing.assert_allclose(m.transform(X)[:, :2], Y, atol=1e-12)


def test_disconnected_graph_is_an_error_on_request(rng):
    X = _three_blobs(rng)[:110]
    with pytest.raises(ValueError, match=r"falls apart into 2 pieces \(sizes 60, 50\)"):
        CompressedDiffusionMap(2, 10, n_neighbors=5, disconnected="raise",
                               random_state=0).fit(X)
    with pytest.raises(ValueError, match="'disconnected' parameter"):
        CompressedDiffusionMap(2, 10, disconnected="embed").fit(X)


def test_more_pieces_than_regions_gives_each_piece_a_region(rng):
    """Three pieces, two regions asked for (one piece had no centroid before): each piece
    gets one."""
    X = _three_blobs(rng)
    with pytest.warns(UserWarning, match="3 pieces"):
        m = CompressedDiffusionMap(1, 2, n_neighbors=5, random_state=0).fit(X)
    assert m.n_partitions_ == 3
    np.testing.assert_array_equal(np.sort(m.piece_labels_[m.centroid_indices_]), [0, 1, 2])
    assert np.all(np.isfinite(m.embedding_))


@pytest.mark.parametrize("seed", [0, 1])
def test_graph_in_many_pieces(seed):
    """One neighbour per point splits the cloud into dozens of pieces (the top eigenvalue 1
    so repeated that LAPACK's subset solver once returned a single pair): a warning and a
    finite embedding, or the clear error on request."""
    X = np.random.default_rng(0).normal(size=(300, 2))
    with pytest.warns(UserWarning, match="falls apart into"):
        m = CompressedDiffusionMap(2, n_neighbors=1, random_state=seed).fit(X)
    assert m.n_pieces_ > 10 and np.all(np.isfinite(m.embedding_))
    assert m.n_partitions_ >= m.n_pieces_
    with pytest.raises(ValueError, match="falls apart"):
        CompressedDiffusionMap(2, n_neighbors=1, disconnected="raise",
                               random_state=seed).fit(X)


@pytest.mark.parametrize("sizes, N", [([150, 100, 50], 10), ([5, 1, 1, 300], 6),
                                      ([3, 3], 6), ([1, 1, 1], 2), ([40, 2], 41)])
def test_share_regions(sizes, N):
    share = compressed.share_regions(np.array(sizes), N)
    assert share.sum() == max(N, len(sizes))
    assert np.all(share >= 1) and np.all(share <= sizes)
    # one region each, the rest in proportion to the sizes (up to one) where no cap binds
    ideal = max(0, N - len(sizes)) * np.array(sizes) / np.sum(sizes)
    free = share < np.array(sizes)
    assert np.all(np.abs(share - 1 - ideal)[free] < 1.0)
