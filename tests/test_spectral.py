import numpy as np
import pytest
import torch

from conftest import assert_allclose_up_to_sign, noisy_circle
from flgp.spectral import families as heat
from flgp.graph import build_cross_graph, build_dense_graph
from flgp.spectral import compute_eigenpairs, flgp_eigenpairs, glgp_eigenpairs
from flgp.spectral.dense import top_eigenpairs


def _dense_laplacian(graph):
    A = graph.transition.to_sparse().toarray()
    lam = graph.transition.degrees
    inv = np.where(lam > 0, 1 / np.where(lam > 0, lam, 1), 0)
    return np.eye(A.shape[0]) - A @ np.diag(inv) @ A.T


@pytest.mark.parametrize("kernel, subsample", [("se", "random"), ("se", "kmeans"),
                                               ("lae", "random"), ("lae", "kmeans")])
def test_proposition_1_and_dense_reference(rng, kernel, subsample):
    X = rng.standard_normal((250, 3))
    g = build_cross_graph(X, n_induced=40, n_neighbors=5, kernel=kernel, subsample=subsample,
                          random_state=1)
    ep = flgp_eigenpairs(g, 12, spectrum="two_step")
    L = _dense_laplacian(g)
    w, U = np.linalg.eigh(L)
    # Proposition 1: spectrum in [0, 1], smallest eigenvalue 0
    assert w.min() > -1e-10 and w.max() < 1 + 1e-10
    assert abs(ep.eigenvalues[0]) < 1e-10
    assert np.all((ep.eigenvalues >= 0) & (ep.eigenvalues <= 1))
    np.testing.assert_allclose(ep.eigenvalues, w[:12], atol=1e-10)
    V = ep.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(12), atol=1e-10)
    # eigenvectors agree where the eigenvalue is simple
    gaps = np.diff(w[:13])
    simple = [k for k in range(12) if (k == 0 or gaps[k - 1] > 1e-6) and gaps[k] > 1e-6]
    assert_allclose_up_to_sign(V[:, simple], U[:, simple], atol=1e-7)
    np.testing.assert_allclose(L @ V, V * ep.eigenvalues, atol=1e-9)
    # the one-step spectrum is 1 - sigma of the same singular values
    ep1 = flgp_eigenpairs(g, 12, spectrum="one_step")
    np.testing.assert_allclose(1 - ep1.eigenvalues, np.sqrt(1 - ep.eigenvalues), atol=1e-10)


def test_first_eigenvector_constant_and_signs_deterministic(rng):
    X = noisy_circle(400, rng)
    a = compute_eigenpairs(X, n_induced=60, n_eigenpairs=5, random_state=2)
    b = compute_eigenpairs(X, n_induced=60, n_eigenpairs=5, random_state=2)
    np.testing.assert_allclose(a.eigenvectors[:, 0], 1 / np.sqrt(400), atol=1e-10)
    np.testing.assert_array_equal(a.eigenvectors, b.eigenvectors)


@pytest.mark.parametrize("method, kernel", [("flgp", "lae"), ("flgp", "se"), ("glgp", "se"),
                                            ("nystrom", "se")])
def test_out_of_sample_map_reproduces_cloud_rows(rng, method, kernel):
    X = noisy_circle(300, rng)
    ep = compute_eigenpairs(X, method=method, kernel=kernel, n_induced=50, n_eigenpairs=8,
                            random_state=0)
    np.testing.assert_allclose(ep.extend(X), ep.eigenvectors, atol=1e-10)
    # new points near the cloud get values close to their neighbours'
    Xn = X[:20] * 1.0001
    assert np.abs(ep.extend(Xn) - ep.eigenvectors[:20]).max() < 0.05


def test_glgp_circle_spectrum_pairs_ratios():
    th = np.linspace(0, 2 * np.pi, 800, endpoint=False)
    X = np.c_[np.cos(th), np.sin(th)]
    ep = compute_eigenpairs(X, method="glgp", n_eigenpairs=7)
    lam = ep.eigenvalues
    np.testing.assert_allclose(lam[1], lam[2], rtol=1e-6)
    np.testing.assert_allclose(lam[3], lam[4], rtol=1e-6)
    np.testing.assert_allclose(lam[5], lam[6], rtol=1e-6)
    np.testing.assert_allclose(lam[3] / lam[1], 4.0, rtol=0.02)
    np.testing.assert_allclose(lam[5] / lam[1], 9.0, rtol=0.05)


def test_glgp_matches_dense_transition(rng):
    X = noisy_circle(200, rng)
    g = build_dense_graph(X)
    ep = glgp_eigenpairs(g, 6)
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / (4 * g.bandwidth ** 2))
    Z = K / K.sum(1, keepdims=True) / K.sum(0, keepdims=True)
    A = Z / Z.sum(1, keepdims=True)
    mu = np.sort(np.linalg.eigvals(A).real)[::-1][:6]
    np.testing.assert_allclose(1 - ep.eigenvalues, mu, atol=1e-10)
    np.testing.assert_allclose(A @ ep.eigenvectors, ep.eigenvectors * (1 - ep.eigenvalues),
                               atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(ep.eigenvectors, axis=0), 1.0)


def test_nystrom_close_to_glgp_on_small_n():
    th = np.linspace(0, 2 * np.pi, 600, endpoint=False)
    X = np.c_[np.cos(th), np.sin(th)]
    glgp = compute_eigenpairs(X, method="glgp", n_eigenpairs=5, bandwidth=0.05)
    nys = compute_eigenpairs(X, method="nystrom", n_induced=300, n_eigenpairs=5,
                             bandwidth=0.05, subsample="kmeans", random_state=0)
    np.testing.assert_allclose(nys.eigenvalues[1:] / glgp.eigenvalues[1:], 1.0, rtol=0.1)
    # covariances agree (invariant to rotations inside eigenspaces); scales n and s
    t = 1.0 / glgp.eigenvalues[1]
    C1 = heat.heat_kernel(*(torch.from_numpy(glgp.eigenvectors),) * 2,
                          torch.from_numpy(glgp.eigenvalues), t, glgp.kernel_scale).numpy()
    C2 = heat.heat_kernel(*(torch.from_numpy(nys.eigenvectors),) * 2,
                          torch.from_numpy(nys.eigenvalues), t, nys.kernel_scale).numpy()
    assert np.abs(C1 - C2).max() < 0.05 * np.abs(C1).max()


def test_disconnected_graph_warns(rng):
    X = np.r_[rng.standard_normal((150, 2)), rng.standard_normal((150, 2)) + 100]
    g = build_cross_graph(X, n_induced=30, n_neighbors=2, random_state=0)
    with pytest.warns(UserWarning, match="falls apart into 2 pieces"):
        ep = flgp_eigenpairs(g, 5)
    assert ep.n_pieces == 2
    assert ep.eigenvalues[1] < 1e-10


def test_too_many_eigenpairs(rng):
    X = rng.standard_normal((100, 2))
    g = build_cross_graph(X, n_induced=10, random_state=0)
    with pytest.raises(ValueError, match="n_eigenpairs=11 exceeds n_induced=10"):
        flgp_eigenpairs(g, 11)


def test_heat_features_and_gradient(rng):
    X = noisy_circle(200, rng)
    ep = compute_eigenpairs(X, n_induced=40, n_eigenpairs=10, random_state=0)
    V = torch.from_numpy(ep.eigenvectors)
    lam = torch.from_numpy(ep.eigenvalues)
    t = torch.tensor(50.0, dtype=torch.float64, requires_grad=True)
    phi = heat.heat_features(V, lam, t, ep.kernel_scale)
    C = heat.heat_kernel(V, V, lam, t, ep.kernel_scale)
    ref = ep.kernel_scale * (ep.eigenvectors * np.exp(-50.0 * ep.eigenvalues)) @ ep.eigenvectors.T
    np.testing.assert_allclose(C.detach().numpy(), ref, atol=1e-12)
    np.testing.assert_allclose((phi @ phi.T).detach().numpy(), ref, atol=1e-12)
    np.testing.assert_allclose(heat.heat_kernel_diag(V, lam, t, ep.kernel_scale).detach(),
                               np.diag(ref), atol=1e-12)
    C.sum().backward()
    assert torch.isfinite(t.grad) and t.grad != 0
    assert torch.autograd.gradcheck(
        lambda tt: heat.heat_kernel(V[:5], V[:7], lam, tt, ep.kernel_scale),
        (torch.tensor(3.0, dtype=torch.float64, requires_grad=True),))


@pytest.mark.parametrize("family", heat.FAMILIES)
def test_families_at_an_endless_time_have_no_nan(family):
    # t = inf is each family's limit: the zero modes keep weight 1, the others e^{-inf}
    # (heat, Matérn) or their own (green, which ignores t); d log w / d log t is -tλ's limit
    lam = np.array([0.0, 0.5, 2.0])
    for t in (np.inf, np.array([1.0, np.inf])):
        w = heat.family_log_weights(lam, t, family)
        g = heat.family_log_weight_gradient(lam, t, family)
        assert not np.isnan(w).any() and not np.isnan(g).any()
        assert np.all(w[..., 0] == 0.0)
        big = heat.family_log_weights(lam, np.where(np.isinf(t), 1e300, t), family)
        np.testing.assert_array_equal(np.exp(w), np.exp(big))
        wt = heat.family_log_weights(torch.from_numpy(lam), torch.as_tensor(t)[..., None],
                                     family)
        gt = heat.family_log_weight_gradient(torch.from_numpy(lam),
                                             torch.as_tensor(t)[..., None], family)
        assert not torch.isnan(wt).any() and not torch.isnan(gt).any()
    g = heat.family_log_weight_gradient(lam, np.inf, family)
    g_far = heat.family_log_weight_gradient(lam, 1e12, family)
    if family != "heat":                 # the heat family's -tλ has no finite limit
        np.testing.assert_allclose(g, g_far, rtol=1e-9)


def test_large_dense_path_matches_dense_eigh(rng):
    """Above 6000 points GLGP switches to shift-invert Lanczos; check it on a matrix with
    the same spectral shape (top eigenvalue 1, a cluster just below it)."""
    n, M = 6100, 6
    Q = np.linalg.qr(rng.standard_normal((n, 40)))[0]
    mu = np.r_[1.0, 1 - 1e-9, 1 - 2e-9, 0.99, 0.98, 0.97, np.linspace(0.9, 0.1, 34)]
    S = (Q * mu) @ Q.T
    w, U = top_eigenpairs(S, M)
    np.testing.assert_allclose(w, mu[:M], atol=1e-10)
    np.testing.assert_allclose(np.abs(np.sum(U[:, 3:] * Q[:, 3:M], 0)), 1.0, atol=1e-8)


def test_symmetric_eigh_matches_numpy_and_restores_threads(rng):
    from flgp.spectral.eigenpairs import symmetric_eigh
    A = rng.standard_normal((50, 50))
    A = A + A.T
    before = torch.get_num_threads()
    w, V = symmetric_eigh(A)
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(w, np.linalg.eigvalsh(A), atol=1e-10)
    np.testing.assert_allclose(V @ np.diag(w) @ V.T, A, atol=1e-10)
    np.testing.assert_allclose(V.T @ V, np.eye(50), atol=1e-12)


@pytest.mark.parametrize("n_top", [1, 7, 25])
def test_symmetric_eigh_top_eigenpairs_match_numpy(rng, n_top):
    """The ``n_top`` largest eigenpairs (the subset solver, used when they are fewer than
    half) are numpy's largest, ascending, with orthonormal vectors of the same spans."""
    from flgp.spectral.eigenpairs import symmetric_eigh
    A = rng.standard_normal((50, 50))
    A = A @ A.T / 50
    before = torch.get_num_threads()
    w, V = symmetric_eigh(A, n_top=n_top)
    assert torch.get_num_threads() == before
    w_ref, V_ref = np.linalg.eigh(A)
    assert w.shape == (n_top,) and V.shape == (50, n_top)
    np.testing.assert_allclose(w, w_ref[-n_top:], atol=1e-12)
    np.testing.assert_allclose(A @ V, V * w, atol=1e-12)
    np.testing.assert_allclose(V.T @ V, np.eye(n_top), atol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(V * V_ref[:, -n_top:], 0)), 1.0, atol=1e-8)


def test_extension_restricted_to_the_point_component(rng):
    """``with_pieces(restrict=True)``: cloud points unchanged; a new point between the
    two components keeps only the transition weights into the component of its most likely
    induced point, renormalised (computed here from the graph's public rows)."""
    X = np.r_[rng.standard_normal((150, 2)), rng.standard_normal((150, 2)) + [100.0, 0.0]]
    # a wide kernel: the cloud's rows stay within their blob (the nearest induced points
    # are), while a point half-way has weight on both
    g = build_cross_graph(X, n_induced=30, n_neighbors=3, kernel="se", bandwidth=20.0,
                          random_state=0)
    with pytest.warns(UserWarning, match="falls apart into 2 pieces"):
        ep = flgp_eigenpairs(g, 8)
    ext = ep.extension
    V, comp = ext.with_pieces(X, restrict=True)
    np.testing.assert_allclose(V, ep.eigenvectors, atol=1e-12)
    np.testing.assert_array_equal(comp, ep.piece_labels)
    x = np.array([[50.0, 0.0], [50.2, 0.5]])
    idx, rows = g.transition_rows(x)
    lab = ext.induced_pieces[idx]
    assert lab[0].min() != lab[0].max()               # the first row straddles both
    own = lab[np.arange(2), rows.argmax(1)]
    cut = np.where(lab == own[:, None], rows, 0.0)
    cut /= cut.sum(1, keepdims=True)
    ref = np.einsum("ir,irm->im", cut, ext.projection[idx])
    got, got_comp = ext.with_pieces(x, restrict=True)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    np.testing.assert_array_equal(got_comp, own)
    assert not np.allclose(ext(x)[0], got[0])         # its unrestricted row differs


@pytest.mark.parametrize("method", ["flgp", "nystrom", "glgp"])
def test_one_place_makes_eigenpairs(method):
    """compute_eigenpairs and the estimators' bandwidth grid come from
    eigenpair_candidates: the grid's candidate at a = 1 (the estimators' anchor for FLGP
    and Nyström) is compute_eigenpairs' graph to the last bit; another grid value is the
    bandwidth rescaled by sqrt(a)."""
    from flgp.spectral import eigenpair_candidates

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    kw = dict(n_induced=None if method == "glgp" else 60, n_eigenpairs=20, n_neighbors=5,
              random_state=0)
    kernel = "se" if method == "flgp" else "lae"
    one = compute_eigenpairs(X, method=method, kernel=kernel, **kw)
    cands = dict(eigenpair_candidates(X, method, (1.0, 4.0), kernel=kernel, anchor=1.0, **kw))
    np.testing.assert_array_equal(cands[1.0]().eigenvalues, one.eigenvalues)
    wide = compute_eigenpairs(X, method=method, kernel=kernel, bandwidth_scale=4.0, **kw)
    np.testing.assert_allclose(cands[4.0]().eigenvalues, wide.eigenvalues, rtol=1e-9,
                               atol=1e-12)


def test_vector_rows_is_the_eigenvector_store():
    """Eigenpairs' store of eigenvector rows is vector_rows ('cloud' names the input
    points only, and is no keyword); it survives a pickle."""
    import pickle

    from flgp.spectral import Eigenpairs
    from flgp.spectral.eigenpairs import DenseVectorRows

    V = np.random.default_rng(0).standard_normal((30, 4))
    ep = Eigenpairs(np.linspace(0, 1, 4), V)
    assert isinstance(ep.vector_rows, DenseVectorRows)
    with pytest.raises(TypeError, match="cloud"):
        Eigenpairs(np.linspace(0, 1, 4), cloud=ep.vector_rows)
    revived = pickle.loads(pickle.dumps(ep))
    np.testing.assert_array_equal(revived.eigenvector_rows(np.arange(5)), V[:5])


def test_nystrom_graph_with_bandwidth_and_reach(rng):
    """A Nyström graph rescaled by ``with_bandwidth`` is the graph built afresh on the same
    induced points at that bandwidth, and ``nearest_sq_max`` is the largest squared distance
    from a point to its nearest induced point (brute force)."""
    from flgp.graph.dense import build_nystrom_graph

    X = rng.standard_normal((300, 3))
    g = build_nystrom_graph(X, n_induced=40, random_state=0)
    U = g.induced.points
    d2 = ((X[:, None, :] - U[None, :, :]) ** 2).sum(-1)
    assert g.nearest_sq_max == pytest.approx(d2.min(axis=1).max(), rel=1e-12)
    wide = g.with_bandwidth(2.0 * g.bandwidth)
    fresh = build_nystrom_graph(X, n_induced=40, bandwidth=2.0 * g.bandwidth,
                                induced=g.induced)
    assert wide.bandwidth == fresh.bandwidth
    np.testing.assert_allclose(wide.symmetric, fresh.symmetric, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(wide.log_colsum, fresh.log_colsum, rtol=1e-12)
    assert wide.nearest_sq_max == fresh.nearest_sq_max == g.nearest_sq_max


@pytest.mark.parametrize("method", ["glgp", "nystrom"])
def test_zero_modes_of_several_pieces_do_not_depend_on_the_solver_basis(rng, method,
                                                                         monkeypatch):
    """The solver returns any rotation of the eigenvectors of a repeated eigenvalue - the
    zero modes of a graph in pieces - and which one moved with the BLAS threads. The zero
    modes' V_z V_zᵀ (what a prior with equal weights on them sees) must not: it is the
    projection onto the pieces' indicators, Σ_p 1_p 1_pᵀ / n_p."""
    import flgp.spectral.dense as dense

    X = np.r_[rng.standard_normal((90, 2)), rng.standard_normal((60, 2)) + 300,
              rng.standard_normal((50, 2)) - 300]
    sizes = (90, 60, 50)
    kwargs = dict(method=method, n_eigenpairs=6, bandwidth=0.5, random_state=0)
    if method == "nystrom":
        kwargs["n_induced"] = 60
    plain = compute_eigenpairs(X, **kwargs)
    original = dense.top_eigenpairs

    def rotated(S, M, random_state=0):
        mu, psi = original(S, M, random_state)
        z = int(np.sum(mu > 1 - 1e-9))
        R = np.linalg.qr(np.random.default_rng(7).standard_normal((z, z)))[0]
        psi = psi.copy()
        psi[:, :z] = psi[:, :z] @ R
        return mu, psi

    monkeypatch.setattr(dense, "top_eigenpairs", rotated)
    turned = compute_eigenpairs(X, **kwargs)
    assert plain.n_pieces == turned.n_pieces == 3
    P = [ep.eigenvectors[:, :3] @ ep.eigenvectors[:, :3].T for ep in (plain, turned)]
    np.testing.assert_allclose(P[0], P[1], atol=1e-10)
    if method == "glgp":
        labels = np.repeat(np.arange(3), sizes)
        ref = sum(np.outer(labels == p, labels == p) / n for p, n in enumerate(sizes))
        np.testing.assert_allclose(P[0], ref, atol=1e-10)


def test_low_rank_evidence_ceiling_bounds_and_is_attained():
    """The ceiling of ``log N(y | 0, V S Vᵀ + σ² I)`` over every PSD ``S`` and ``σ²`` in a
    range: above the evidence of random members of the family (dense log densities), equal
    to that of the rank-one member it names, and at a fixed noise, above every member of
    that noise."""
    from flgp.spectral.gaussian import LowRankGaussianEvidence

    rng = np.random.default_rng(3)
    m, M = 40, 6

    def log_density(K, y):
        return -0.5 * (y @ np.linalg.solve(K, y) + np.linalg.slogdet(K)[1]
                       + m * np.log(2 * np.pi))

    for _ in range(3):
        V = rng.standard_normal((m, M))
        y = V @ rng.standard_normal(M) + 0.7 * rng.standard_normal(m)
        ev = LowRankGaussianEvidence(V, y)
        ceiling = ev.ceiling((1e-6, 10.0))
        fixed = ev.ceiling((0.3, 0.3))
        for _ in range(300):
            L = rng.standard_normal((M, M)) * np.exp(rng.uniform(-3, 3))
            s2 = float(np.exp(rng.uniform(np.log(1e-6), np.log(10.0))))
            assert log_density(V @ L @ L.T @ V.T + s2 * np.eye(m), y) <= ceiling + 1e-9
            assert log_density(V @ L @ L.T @ V.T + 0.3 * np.eye(m), y) <= fixed + 1e-9
        Q, _ = np.linalg.qr(V)
        w = Q.T @ y
        W, E = w @ w, y @ y - w @ w
        s2 = E / (m - 1)
        u = Q @ w / np.sqrt(W)
        attained = log_density(s2 * np.eye(m) + (W - s2) * np.outer(u, u), y)
        assert attained == pytest.approx(ceiling, abs=1e-8)
    # a basis that spans y bounds nothing
    V = rng.standard_normal((5, 5))
    assert LowRankGaussianEvidence(V, rng.standard_normal(5)).ceiling((1e-6, 10.0)) == np.inf
    with pytest.raises(ValueError, match="noise_range"):
        LowRankGaussianEvidence(V, rng.standard_normal(5)).ceiling((0.0, 1.0))
