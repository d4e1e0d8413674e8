import numpy as np
import pytest
import scipy.optimize

from flgp.graph import build_cross_graph, kmeans_centres, lae_weights, nearest_induced_points
from flgp.graph.cross_kernel import _project_simplex, _simplex_qp_pgd

import torch


def test_nearest_landmarks_matches_brute_force(rng):
    X = rng.standard_normal((500, 4)) + 100.0  # far from the origin: tests the centring
    U = X[rng.choice(500, 40, replace=False)] + 0.01
    idx, sq = nearest_induced_points(X, U, 5)
    d2 = ((X[:, None, :] - U[None]) ** 2).sum(-1)
    ref = np.sort(d2, axis=1)[:, :5]
    np.testing.assert_allclose(sq, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.take_along_axis(d2, idx, 1), sq, rtol=1e-12)


def test_lae_rows_on_simplex_and_match_scipy(rng):
    X = rng.standard_normal((60, 3))
    U = rng.standard_normal((20, 3))
    for r in (2, 3, 5):
        idx, _ = nearest_induced_points(X, U, r)
        W = lae_weights(X, U, idx)
        assert np.all(W >= 0)
        np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-12)
        for i in range(0, 60, 7):
            Ui = U[idx[i]]
            obj = lambda w: np.sum((X[i] - w @ Ui) ** 2)  # noqa: E731
            res = scipy.optimize.minimize(
                obj, np.full(r, 1 / r), method="SLSQP", bounds=[(0, 1)] * r,
                constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}],
                options={"ftol": 1e-14, "maxiter": 500})
            assert obj(W[i]) <= res.fun + 1e-9


@pytest.mark.parametrize("compiled", [True, False])
def test_lae_with_affinely_dependent_anchors_reaches_the_minimum(rng, compiled):
    """Three anchors on a line (or two at one place): the triangle's system is singular
    up to rounding, and a candidate judged by ``G_aa + gᵀz`` from that solve could win
    with an objective it does not have (0.531 against an attainable 0.529 in one case).
    Every row must reach the minimum that SLSQP finds."""
    import flgp

    for p in (3, 40):
        U = rng.standard_normal((5, p))
        U[2] = 0.5 * (U[3] + U[4])
        U[1] = U[0]
        X = rng.standard_normal((400, p))
        idx = np.tile([2, 3, 4], (400, 1))
        idx[200:] = [0, 1, 3]
        with flgp.config_context(compiled=compiled):
            W = lae_weights(X, U, idx, regularization=0.0)
        assert np.all(W >= 0)
        np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-12)
        for i in range(0, 400, 9):
            D = U[idx[i]] - X[i]
            G = D @ D.T
            assert W[i] @ G @ W[i] <= _simplex_qp_reference(G) + 1e-9 * (1 + np.trace(G))


def _regularized_gram(D, gamma):
    """``G + gamma tr(G) I`` for the anchor differences ``D`` (r x p)."""
    G = D @ D.T
    return G + gamma * np.trace(G) * np.eye(G.shape[0])


def _simplex_qp_reference(G):
    """min w^T G w over the simplex by SLSQP (independent of flgp's exact solver)."""
    r = G.shape[0]
    res = scipy.optimize.minimize(
        lambda w: w @ G @ w, np.full(r, 1 / r), method="SLSQP", bounds=[(0, 1)] * r,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}],
        options={"ftol": 1e-15, "maxiter": 500})
    return res.fun


def test_lae_three_anchor_path_equals_the_general_enumeration(rng):
    """The r = 3 enumeration on flat Gram entries gives the general enumeration's weights
    bit for bit: Grams of points near a curve, random Grams, and degenerate ones (two
    equal anchors, a zero Gram, a point on an anchor)."""
    from flgp.graph.cross_kernel import (_enumerate_faces_3, _enumerate_faces_general,
                                         local_gram)
    t = rng.uniform(0, 10, 4000)
    X = np.c_[np.cos(t), np.sin(t), t / 5] + 0.02 * rng.standard_normal((4000, 3))
    U = X[rng.choice(4000, 200, replace=False)]
    from scipy.spatial import cKDTree
    idx = cKDTree(U).query(X, k=3)[1]
    G = local_gram(X, U, idx)
    G /= np.maximum(np.einsum("cii->c", G) / 3, 1e-300)[:, None, None]
    D = rng.standard_normal((1000, 3, 4))
    R = np.einsum("cip,cjp->cij", D, D)
    deg = G[:900].copy()
    deg[:300, 0, :] = deg[:300, 1, :]
    deg[:300, :, 0] = deg[:300, :, 1]
    deg[300:600] = 0.0
    deg[600:, 0, 0] = 0.0
    for Gs in (G, R, deg):
        fast, general = _enumerate_faces_3(Gs), _enumerate_faces_general(Gs)
        np.testing.assert_array_equal(fast, general)
        np.testing.assert_allclose(fast.sum(1), 1.0, atol=1e-12)
        assert np.all(fast >= 0)


def test_regularized_lae_matches_scipy_and_stays_positive(rng):
    X = rng.standard_normal((40, 2))
    U = np.r_[X[:5], rng.standard_normal((15, 2))]  # some anchors coincide with points
    idx, _ = nearest_induced_points(X, U, 3)
    gamma = 1e-3
    W = lae_weights(X, U, idx, regularization=gamma, coincident_regularization=0.0)
    W0 = lae_weights(X, U, idx, coincident_regularization=0.0)
    coincide = np.flatnonzero(np.isclose(_, 0).any(1))
    assert coincide.size >= 5
    assert np.all(np.sum(W[coincide] > 0, 1) >= 2)  # regularised: linked to another anchor
    assert np.all(np.sum(W0[coincide] > 0, 1) == 1)  # exact: weight 1 on the point itself
    assert np.sum(W == 0) < np.sum(W0 == 0)
    for i in range(0, 40, 5):
        G = _regularized_gram(U[idx[i]] - X[i], gamma)
        assert W[i] @ G @ W[i] <= _simplex_qp_reference(G) + 1e-10


def test_local_gram_matches_direct_products_across_blocks(rng, monkeypatch):
    import flgp.graph.cross_kernel as ck
    X = rng.standard_normal((37, 5))
    U = rng.standard_normal((11, 5))
    idx = rng.integers(0, 11, size=(37, 3))
    monkeypatch.setattr(ck, "_GRAM_BLOCK_ENTRIES", 40)  # blocks of 2 rows, last one short
    G = ck.local_gram(X, U, idx)
    for i in range(37):
        D = U[idx[i]] - X[i]
        np.testing.assert_allclose(G[i], D @ D.T, rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="one row per point"):
        ck.local_gram(X[:-1], U, idx)


def test_rows_on_an_anchor_get_the_coincident_regularization(rng):
    X = rng.standard_normal((40, 6))
    U = np.r_[X[:5], rng.standard_normal((15, 6))]  # rows 0-4 sit on anchors 0-4
    idx, sq = nearest_induced_points(X, U, 3)
    W = lae_weights(X, U, idx, regularization=1e-3, coincident_regularization=0.1)
    W_plain = lae_weights(X, U, idx, regularization=1e-3, coincident_regularization=0.0)
    on = sq[:, 0] <= 1e-8 * sq[:, 1]
    assert on.sum() == 5
    np.testing.assert_array_equal(W[~on], W_plain[~on])   # other rows untouched
    assert np.all(W_plain[on].max(1) > 0.99) and np.all(W[on].max(1) < 0.95)
    for i in np.flatnonzero(on):
        G = _regularized_gram(U[idx[i]] - X[i], 0.1)
        assert W[i] @ G @ W[i] <= _simplex_qp_reference(G) + 1e-10


def test_lae_point_inside_hull_is_reconstructed(rng):
    U = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    w = np.array([0.2, 0.3, 0.5])
    X = (w @ U)[None, :]
    W = lae_weights(X, U, np.array([[0, 1, 2]]))
    np.testing.assert_allclose(W[0], w, atol=1e-10)


def test_projected_gradient_agrees_with_exact(rng):
    D = torch.from_numpy(rng.standard_normal((50, 4, 3)))
    G = D @ D.transpose(1, 2)
    from flgp.graph.cross_kernel import _simplex_qp_exact
    we = torch.from_numpy(_simplex_qp_exact(G.numpy()))
    wp = _simplex_qp_pgd(G, n_iter=3000)
    fe = torch.einsum("ci,cij,cj->c", we, G, we)
    fp = torch.einsum("ci,cij,cj->c", wp, G, wp)
    assert torch.all(fe <= fp + 1e-8)
    P = _project_simplex(torch.from_numpy(rng.standard_normal((10, 5))))
    assert torch.allclose(P.sum(1), torch.ones(10, dtype=P.dtype))


@pytest.mark.parametrize("subsample", ["random", "kmeans"])
@pytest.mark.parametrize("kernel", ["se", "lae"])
def test_transition_is_paper_formula(rng, subsample, kernel):
    X = rng.standard_normal((300, 2))
    g = build_cross_graph(X, n_induced=30, n_neighbors=4, subsample=subsample, kernel=kernel,
                          random_state=0)
    A = g.transition.to_sparse().toarray()
    # dense reference of He et al. eq. (4) with the r-nearest sparse kernel
    n, s = A.shape
    K = np.zeros((n, s))
    for i in range(n):
        if kernel == "se":
            K[i, g.indices[i]] = np.exp(-g.sq_distances[i] / (4 * g.bandwidth ** 2))
        else:
            K[i, g.indices[i]] = lae_weights(X[i:i + 1], g.induced.points, g.indices[i:i + 1],
                                             regularization=g.lae_regularization)
    sizes = np.ones(s) if subsample == "random" else np.bincount(g.indices[:, 0], minlength=s)
    colsum = K.sum(0)
    Z = sizes[None, :] * K / (colsum[None, :] * (K * sizes[None, :]).sum(1, keepdims=True))
    Z[:, colsum == 0] = 0
    A_ref = Z / Z.sum(1, keepdims=True)
    np.testing.assert_allclose(A, A_ref, atol=1e-12)
    np.testing.assert_allclose(g.transition.degrees, A_ref.sum(0), atol=1e-10)
    assert g.transition.to_sparse().nnz <= n * 4  # O(n r) storage


def test_kmeans_sizes_and_quality(rng):
    centres_true = rng.standard_normal((5, 3)) * 10
    X = np.repeat(centres_true, 200, axis=0) + 0.1 * rng.standard_normal((1000, 3))
    lm = kmeans_centres(X, 5, random_state=0)
    d = np.sqrt(((lm.points[:, None] - centres_true[None]) ** 2).sum(-1))
    assert np.all(d.min(0) < 0.1)
    g = build_cross_graph(X, n_induced=5, n_neighbors=2, random_state=0)
    assert sorted(g.sizes.tolist()) == [200] * 5


def test_kmeans_subsampled_fit_is_seeded(rng):
    X = rng.standard_normal((3000, 2))
    a = kmeans_centres(X, 10, random_state=3, max_fit_samples=500).points
    b = kmeans_centres(X, 10, random_state=3, max_fit_samples=500).points
    np.testing.assert_array_equal(a, b)


def test_far_point_keeps_exact_transition_under_tiny_bandwidth(rng):
    X = np.r_[rng.standard_normal((200, 2)), [[1e3, 1e3]]]
    g = build_cross_graph(X, n_induced=20, kernel="se", subsample="random", bandwidth=1e-3,
                          random_state=0)
    A = g.transition.to_sparse().toarray()
    assert np.all(np.isfinite(A))
    np.testing.assert_allclose(A.sum(1), 1.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_induced=500), "n_induced=500 exceeds n_samples"),
    (dict(n_induced=10, n_neighbors=11), "n_neighbors=11 exceeds n_induced"),
    (dict(n_induced=10, kernel="gauss"), "kernel='gauss' is not supported"),
    (dict(n_induced=10, bandwidth=-1.0), "bandwidth must be a finite positive"),
])
def test_bad_parameters(rng, kwargs, message):
    X = rng.standard_normal((100, 2))
    with pytest.raises(ValueError, match=message):
        build_cross_graph(X, **kwargs)


def test_bad_points(rng):
    X = rng.standard_normal((100, 2))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity in 1 row"):
        build_cross_graph(X, n_induced=10)
    with pytest.raises(ValueError, match="1-d"):
        build_cross_graph(np.arange(10.0), n_induced=3)
    with pytest.raises(ValueError, match="duplicate rows"):
        build_cross_graph(np.repeat(rng.standard_normal((5, 2)), 20, axis=0), n_induced=3)


def test_row_with_no_reachable_induced_point_is_an_error():
    from flgp.graph.transition import transition_rows

    log_k = np.array([[0.0, -1.0], [-np.inf, -np.inf]])
    idx = np.array([[0, 1], [1, 2]])
    log_colsum = np.array([0.0, 0.5, -np.inf])
    with pytest.raises(ValueError, match="1 point\\(s\\) have zero kernel weight.*n_neighbors"):
        transition_rows(log_k, idx, log_colsum)
    rows = transition_rows(log_k[:1], idx[:1], log_colsum)
    np.testing.assert_allclose(rows.sum(1), 1.0)


@pytest.mark.parametrize("p", [1, 3, 40])
def test_count_distinct_rows_matches_numpy_unique(rng, p):
    from flgp._validation import count_distinct_rows

    X = rng.integers(-2, 3, size=(3000, p)).astype(np.float64)   # many repeated rows
    X[::7] *= -1.0                                              # introduces -0.0 entries
    assert count_distinct_rows(X) == np.unique(X, axis=0).shape[0]
    Y = rng.standard_normal((500, p))
    assert count_distinct_rows(np.r_[Y, Y[:40]]) == 500


def test_kmeans_tolerance_stops_early_close_to_converged(rng):
    """tol stops Lloyd once centres move little: the objective is within a few per cent of
    the fully converged run (tol=0), and a bad tol is refused."""
    from scipy.spatial import cKDTree
    X = rng.standard_normal((3000, 2)) * [3.0, 1.0]
    inertia = {}
    for tol in (0.0, 1e-3):
        U = kmeans_centres(X, 60, random_state=0, tol=tol).points
        inertia[tol] = np.mean(cKDTree(U).query(X)[0] ** 2)
    assert inertia[1e-3] <= 1.02 * inertia[0.0]  # measured 1.002-1.011 on such blobs
    with pytest.raises(ValueError, match="tol"):
        kmeans_centres(X, 60, tol=-1.0)


@pytest.mark.parametrize("p, atol", [(2, 1e-10), (20, 2e-4)])
def test_kmeans_refine_is_lloyd_on_all_points(rng, p, atol):
    """After a fit on a subsample, ``n_refine`` Lloyd iterations run on every point (up to
    ``max_refine_samples``): the centres equal scikit-learn's Lloyd started from the
    subsample fit (k-d tree path in low dimension, float32 GEMM path above 16 features)."""
    from sklearn.cluster import KMeans
    X = rng.standard_normal((4000, p)) * np.linspace(3.0, 1.0, p)
    kw = dict(random_state=1, max_fit_samples=600, tol=0.0)
    U0 = kmeans_centres(X, 15, n_refine=0, **kw).points
    U2 = kmeans_centres(X, 15, n_refine=2, max_refine_samples=4000, **kw).points
    ref = KMeans(15, init=U0, n_init=1, max_iter=2, tol=0.0, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(U2, ref.cluster_centers_, atol=atol)
    assert np.abs(U2 - U0).max() > 100 * atol          # the refinement did move them
    inertia = [np.mean(((X[:, None] - U[None]) ** 2).sum(-1).min(1)) for U in (U0, U2)]
    assert inertia[1] < inertia[0]
    # no refinement when the fit already used every point
    np.testing.assert_array_equal(
        kmeans_centres(X[:500], 15, n_refine=0, **kw).points,
        kmeans_centres(X[:500], 15, n_refine=2, **kw).points)
    with pytest.raises(ValueError, match="n_refine"):
        kmeans_centres(X, 15, n_refine=-1)
    with pytest.raises(ValueError, match="max_refine_samples=10 is below n_clusters=15"):
        kmeans_centres(X, 15, max_refine_samples=10)
    # a refinement sample smaller than n: reproducible, and still lowers the inertia
    Us = [kmeans_centres(X, 15, max_refine_samples=1500, **kw).points for _ in range(2)]
    np.testing.assert_array_equal(Us[0], Us[1])
    assert np.mean(((X[:, None] - Us[0][None]) ** 2).sum(-1).min(1)) < inertia[0]


@pytest.mark.parametrize("p", [3, 40])
def test_kmeanspp_matches_a_direct_greedy_seeding(rng, p):
    """Greedy k-means++ (both the per-step GEMM path, p = 3, and the precomputed distance
    matrix, p = 40) against a plain loop drawing the same random numbers."""
    from flgp.graph.induced_points import _kmeanspp

    X = rng.standard_normal((300, p))
    k, L = 25, 5
    got = _kmeanspp(X, k, np.random.default_rng(7), n_trials=L)
    r = np.random.default_rng(7)
    chosen = [int(r.integers(300))]
    for _ in range(1, k):
        d2 = ((X[:, None, :] - X[chosen][None]) ** 2).sum(-1).min(1)
        cum = np.cumsum(d2)
        cand = np.minimum(cum.searchsorted(r.random(L) * cum[-1]), 299)
        pot = [np.minimum(d2, ((X - X[c]) ** 2).sum(1)).sum() for c in cand]
        chosen.append(int(cand[int(np.argmin(pot))]))
    np.testing.assert_allclose(got, X[chosen], rtol=0, atol=0)


# ------------------------------------------------------------------ connected pieces


def _first_vertex_numbering(labels):
    """Renumber labels in the order of each label's first vertex."""
    _, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty_like(first)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[inv]


def test_connected_pieces_numbering_active_vertices_and_no_mutation():
    import scipy.sparse as sp

    from flgp.graph import connected_pieces

    # edges 3-4 and 0-2 (stored as an explicit zero: no edge 1-5), vertex 6 inactive
    rows, cols = np.array([3, 0, 1]), np.array([4, 2, 5])
    A = sp.csr_matrix((np.array([1.0, 2.0, 0.0]), (rows, cols)), shape=(7, 7))
    data, indices, indptr = A.data.copy(), A.indices.copy(), A.indptr.copy()
    active = np.array([1, 1, 1, 1, 1, 1, 0], dtype=bool)
    pieces = connected_pieces(A, active=active)
    np.testing.assert_array_equal(pieces.labels, [0, 1, 0, 2, 2, 3, -1])
    np.testing.assert_array_equal(pieces.sizes, [2, 1, 2, 1])
    assert pieces.describe() == "4 pieces (sizes 2, 2, 1, 1)"
    for got, kept in ((A.data, data), (A.indices, indices), (A.indptr, indptr)):
        np.testing.assert_array_equal(got, kept)
    dense = connected_pieces(A.toarray())
    np.testing.assert_array_equal(dense.labels, [0, 1, 0, 2, 2, 3, 4])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_pieces_match_the_thresholded_dense_kernel(seed):
    """Pieces of exp(-d^2 / eps) >= 1e-9 / n against scipy on the dense n x n pattern:
    clusters at random separations around the join radius, and single far points."""
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial.distance import cdist

    from flgp.graph import kernel_pieces

    rng = np.random.default_rng(seed)
    eps = 0.05
    centres = rng.uniform(0, 4.0, size=(8, 2))
    X = np.vstack([c + 0.15 * rng.standard_normal((rng.integers(1, 40), 2)) for c in centres])
    X = rng.permutation(np.r_[X, rng.uniform(-3, 7, size=(5, 2))])
    n = X.shape[0]
    K = np.exp(-cdist(X, X, "sqeuclidean") / eps)
    count, ref = connected_components(K >= 1e-9 / n, directed=False)
    pieces = kernel_pieces(X, eps)
    assert pieces.n_pieces == count > 1
    np.testing.assert_array_equal(pieces.labels, _first_vertex_numbering(ref))
    np.testing.assert_array_equal(pieces.sizes, np.bincount(pieces.labels))


@pytest.mark.parametrize("dims", [3, 20])
def test_repeated_rows_join_their_copies_without_taking_neighbour_slots(dims):
    """The self-tuning k-NN graph of a cloud with repeated rows is that of its distinct
    positions, every copy joined to its neighbours' copies with their weight and to its
    own copies with weight 1 (the exact search in 3 features, the bucketed one in 20): the
    cloud stacked twice keeps the connections of the cloud (before, copies took half of
    each point's neighbour slots and a curve of 1,000 points fell into 11 pieces); a
    cloud without repeats gets the graph it always had."""
    from flgp.graph import self_tuning_knn_graph
    from flgp.graph.pieces import connected_pieces

    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 10, 600))
    X = np.c_[np.cos(t), np.sin(t), 0.3 * t, 0.01 * rng.normal(size=(600, dims - 3))]
    X += 0.01 * rng.normal(size=X.shape)
    single = self_tuning_knn_graph(X, 10)
    W1 = -single.stiffness.toarray()
    np.fill_diagonal(W1, 0.0)
    twice = self_tuning_knn_graph(np.vstack([X, X]), 10)
    W2 = -twice.stiffness.toarray()
    np.fill_diagonal(W2, 0.0)
    for block in (W2[:600, :600], W2[:600, 600:], W2[600:, 600:]):
        off = block.copy()
        np.fill_diagonal(off, 0.0)
        np.testing.assert_allclose(off, W1, rtol=1e-12, atol=0.0)
    np.testing.assert_allclose(np.diag(W2[:600, 600:]), 1.0)        # each copy's twin
    assert connected_pieces(twice.stiffness).sizes.size == connected_pieces(
        single.stiffness).sizes.size
    assert np.all(twice.mass == 1.0) and twice.spacing == single.spacing
