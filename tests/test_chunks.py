"""The engine in blocks of rows: equal to the dense path it replaced, independent of the
block size, and never holding an ``n x M`` array."""

import pickle
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import flgp
from flgp import Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
from flgp.embedding import DiffusionMap, GPEmbedding
from flgp.graph import build_cross_graph
from flgp.spectral import compute_eigenpairs

from _flgp_reference import reference_eigenpairs, reference_regression
from conftest import assert_allclose_up_to_sign


def open_spiral(n, rng, noise=0.02):
    """A 3-d open curve: simple, well separated low eigenvalues (no cos/sin pairs)."""
    th = rng.uniform(0.0, 3.0, n)
    X = np.c_[th * np.cos(3 * th), th * np.sin(3 * th), 0.3 * th]
    return X + noise * rng.standard_normal((n, 3))


def spiral_regression(n, rng, m=150):
    th = np.sort(rng.uniform(0, 8 * np.pi, n))
    X = ((th + 4) ** 0.7)[:, None] * np.c_[np.cos(th), np.sin(th)]
    f = 3 * np.sin(th / 10) + 3 * np.cos(th / 2) + 4 * np.sin(4 * th / 5)
    y = np.full(n, np.nan)
    lab = rng.choice(n, m, replace=False)
    y[lab] = f[lab] + 0.5 * rng.standard_normal(m)
    return X, y


@pytest.mark.parametrize("kernel, subsample", [("lae", "kmeans"), ("se", "kmeans"),
                                               ("lae", "random"), ("se", "random")])
@pytest.mark.parametrize("chunk_size", [None, 97])
def test_chunked_engine_equals_the_dense_path(rng, kernel, subsample, chunk_size):
    X = open_spiral(1500, rng)
    ep = compute_eigenpairs(X, n_induced=150, n_eigenpairs=20, kernel=kernel,
                            subsample=subsample, random_state=0, chunk_size=chunk_size)
    U = ep.extension.graph.induced.points
    lam, V, comp = reference_eigenpairs(X, U, 20, kernel=kernel,
                                        sizes_from_nearest=subsample == "kmeans")
    np.testing.assert_allclose(ep.eigenvalues, lam, atol=1e-10)
    assert_allclose_up_to_sign(ep.eigenvectors, V, atol=1e-10)
    np.testing.assert_array_equal(ep.piece_labels, comp)


def test_chunked_components_equal_the_dense_path(rng):
    X = np.vstack([open_spiral(600, rng), open_spiral(500, rng) + 50.0])
    with pytest.warns(UserWarning, match="falls apart into 2 pieces"):
        ep = compute_eigenpairs(X, n_induced=100, n_eigenpairs=10, random_state=0,
                                chunk_size=128)
    lam, V, comp = reference_eigenpairs(X, ep.extension.graph.induced.points, 10)
    assert ep.n_pieces == 2
    np.testing.assert_array_equal(ep.piece_labels, comp)
    np.testing.assert_array_equal(ep.piece_sizes, np.bincount(comp))
    np.testing.assert_allclose(ep.eigenvalues, lam, atol=1e-10)


def test_results_do_not_depend_on_the_chunk_size(rng):
    X = open_spiral(2000, rng)
    eps = [compute_eigenpairs(X, n_induced=200, n_eigenpairs=30, random_state=1,
                              chunk_size=c) for c in (1, 333, 2000, 10**6)]
    for ep in eps[1:]:
        np.testing.assert_allclose(ep.eigenvalues, eps[0].eigenvalues, atol=1e-12)
        np.testing.assert_allclose(ep.eigenvectors, eps[0].eigenvectors, atol=1e-10)
    with flgp.config_context(working_memory=0.01):          # 1024-row blocks
        small = compute_eigenpairs(X, n_induced=200, n_eigenpairs=30, random_state=1)
    np.testing.assert_allclose(small.eigenvectors, eps[0].eigenvectors, atol=1e-10)


def test_row_access_paths_agree(rng):
    X = open_spiral(1200, rng)
    ep = compute_eigenpairs(X, n_induced=100, n_eigenpairs=15, random_state=0)
    V = ep.eigenvectors
    idx = np.array([5, 0, 1199, 17, 5])
    np.testing.assert_array_equal(ep.eigenvector_rows(idx), V[idx])
    mask = np.zeros(1200, dtype=bool)
    mask[[3, 9]] = True
    np.testing.assert_array_equal(ep.eigenvector_rows(mask), V[[3, 9]])
    blocks = list(ep.iter_chunks(chunk_size=500))
    assert [(a, b) for a, b, _, _ in blocks] == [(0, 500), (500, 1000), (1000, 1200)]
    np.testing.assert_array_equal(np.vstack([b[2] for b in blocks]), V)
    np.testing.assert_array_equal(np.concatenate([b[3] for b in blocks]),
                                  ep.piece_labels)
    out = ep.map_chunks(lambda v, c: v[:, :2] * 3.0, n_columns=2, chunk_size=77,
                        parallel=True)
    np.testing.assert_array_equal(out, 3.0 * V[:, :2])
    # orthonormal columns, first one constant
    np.testing.assert_allclose(V.T @ V, np.eye(15), atol=1e-10)
    np.testing.assert_allclose(V[:, 0], V[0, 0], atol=1e-12)
    # new points through the same map, in blocks
    new = ep.map_points(X[:300], lambda v, c: v, n_columns=15, chunk_size=64)
    np.testing.assert_allclose(new, V[:300], atol=1e-12)
    with pytest.raises(IndexError, match="out of range"):
        ep.eigenvector_rows([1200])
    with pytest.raises(ValueError, match="boolean index"):
        ep.eigenvector_rows(np.ones(3, dtype=bool))


def test_eigenpairs_keep_no_dense_vectors_and_pickle_small(rng):
    X = open_spiral(3000, rng)
    ep = compute_eigenpairs(X, n_induced=100, n_eigenpairs=50, random_state=0)
    size = len(pickle.dumps(ep))
    _ = ep.eigenvectors                              # the explicit path caches n x M ...
    assert len(pickle.dumps(ep)) == size             # ... but never pickles it
    assert size < 3000 * 50 * 8                      # less than the n x M matrix
    back = pickle.loads(pickle.dumps(ep))
    np.testing.assert_array_equal(back.eigenvector_rows([1, 2]), ep.eigenvector_rows([1, 2]))


def test_user_induced_points_give_the_same_graph(rng):
    X = open_spiral(1000, rng)
    a = build_cross_graph(X, n_induced=80, random_state=3)
    b = build_cross_graph(X, induced_points=a.induced.points)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.transition.values, b.transition.values, atol=1e-14)
    assert b.induced.method == "given"
    with pytest.raises(ValueError, match="features"):
        build_cross_graph(X, induced_points=a.induced.points[:, :2])
    with pytest.raises(ValueError, match="leave n_induced=None"):
        build_cross_graph(X, n_induced=5, induced_points=a.induced.points)


def test_nan_error_names_the_row(rng):
    X = open_spiral(500, rng)
    X[[123, 321]] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinity in 2 row\(s\) \(first at row 123\)"):
        compute_eigenpairs(X, n_induced=50)


@pytest.mark.parametrize("kernel", ["lae", "se"])
def test_regressor_transduction_equals_the_dense_prediction(rng, kernel):
    X, y = spiral_regression(2500, rng)
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=300, n_eigenpairs=40, kernel=kernel)),
                         GraphMaternPrior(), RBFPrior()]).fit(X, y)
    ep = reg.eigenpairs_
    lab = np.flatnonzero(~np.isnan(y))
    # the engine's eigenvectors are the dense path's (to 1e-10, up to sign) ...
    U = ep.extension.graph.induced.points
    lam, V, _ = reference_eigenpairs(X, U, 40, kernel=kernel,
                                     bandwidth=reg.bandwidth_)
    np.testing.assert_allclose(ep.eigenvalues, lam, atol=1e-10)
    assert_allclose_up_to_sign(ep.eigenvectors, V, atol=1e-10)
    # ... and the blockwise predictions are the dense n x M computation's
    scale2 = np.nanstd(y) ** 2
    mean, sd = reference_regression(V, lab, y[lab], lam, X.shape[0], reg.diffusion_time_,
                                    reg.outputscale_ / scale2, reg.noise_ / scale2)
    np.testing.assert_allclose(reg.transduction_, mean, atol=1e-10)
    np.testing.assert_allclose(reg.transduction_std_, sd, atol=1e-10)
    m2, s2 = reg.predict(X[:400], return_std=True)
    np.testing.assert_allclose(m2, mean[:400], atol=1e-9)
    np.testing.assert_allclose(s2, sd[:400], atol=1e-9)


def test_row_squared_norms_from_the_transition_rows(rng):
    """``map_chunks`` with a tuple ``(L, RowSquaredNorm(F), float32 L)``: the squared norms
    |v F|² read off the transition rows through the s x s table, and through the rows
    ``P F`` when the table does not fit the working memory, equal the dense
    computation on the stored eigenvectors; the matrices give V L in their dtypes."""
    from flgp.spectral import RowSquaredNorm

    X, _ = spiral_regression(2000, rng)
    ep = flgp.compute_eigenpairs(X, n_induced=150, n_eigenpairs=30, random_state=0)
    V = ep.eigenvectors
    L = rng.standard_normal((30, 2))
    F = rng.standard_normal((30, 12))
    dense = np.einsum("ij,ij->i", V @ F, V @ F)
    project = (L, RowSquaredNorm(F), L.astype(np.float32))
    outs = []
    for memory in (None, 0.01):               # the table fits / it does not (the rows)
        with flgp.config_context(**({} if memory is None else {"working_memory": memory})):
            outs.append(ep.map_chunks(lambda Z, comp: np.c_[Z[0], Z[1], Z[2]],
                                      project=project))
    for out in outs:
        np.testing.assert_allclose(out[:, :2], V @ L, atol=1e-12)
        np.testing.assert_allclose(out[:, 2], dense, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out[:, 3:], V @ L, rtol=1e-5, atol=1e-6)
    new = X[:50] * 1.01
    Vn = ep.extend(new)
    got = ep.map_points(new, lambda Z, comp: Z[1], project=project)
    np.testing.assert_allclose(got, np.einsum("ij,ij->i", Vn @ F, Vn @ F), rtol=1e-10,
                               atol=1e-12)


def test_row_squared_norm_and_blas_limit_reject_bad_input():
    from flgp.backends import limit_blas_threads
    from flgp.spectral import RowSquaredNorm

    with pytest.raises(ValueError, match="factor"):
        RowSquaredNorm(np.ones(3))
    with pytest.raises(ValueError, match="NaN or infinity"):
        RowSquaredNorm(np.array([[1.0, np.nan]]))
    ep = flgp.compute_eigenpairs(np.random.default_rng(0).standard_normal((300, 2)),
                                 n_induced=40, n_eigenpairs=5, random_state=0)
    with pytest.raises(ValueError, match="n_eigenpairs = 5 rows"):
        ep.map_chunks(lambda Z, c: Z[0], project=(RowSquaredNorm(np.ones((4, 2))),))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="threads >= 1"):
            limit_blas_threads(bad)


def test_regressor_with_given_induced_points_and_chunks(rng):
    X, y = spiral_regression(2000, rng)
    a = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=200, n_eigenpairs=30)), GraphMaternPrior(),
                       RBFPrior()]).fit(X, y)
    U = a.eigenpairs_.extension.graph.induced.points
    with flgp.config_context(working_memory=0.01):
        b = FLGPRegressor([HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=30)),
                           GraphMaternPrior(), RBFPrior()]).fit(X, y)
    # the engine to rounding; the fits to the optimiser's tolerance (L-BFGS-B may take one
    # step more or fewer on rounding that differs in the last digit: 5e-6 here)
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, atol=1e-12)
    assert b.diffusion_time_ == pytest.approx(a.diffusion_time_, rel=1e-3)
    scale = np.abs(a.transduction_).max()
    np.testing.assert_allclose(b.transduction_, a.transduction_, atol=1e-4 * scale)
    np.testing.assert_allclose(b.transduction_std_, a.transduction_std_, atol=1e-4 * scale)


def spiral_classes(n, rng, m=120, n_classes=3):
    """The open spiral cut into ``n_classes`` arcs; ``m`` labels, -1 elsewhere."""
    X = open_spiral(n, rng)
    radius = np.hypot(X[:, 0], X[:, 1])
    truth = np.minimum((radius / radius.max() * n_classes).astype(int), n_classes - 1)
    y = np.full(n, -1)
    lab = rng.choice(n, m, replace=False)
    y[lab] = truth[lab]
    return X, y, truth


@pytest.mark.parametrize("n_classes, inference", [(2, "ep"), (3, "ep"), (3, "laplace")])
def test_classifier_blockwise_equals_the_dense_eigenvectors(rng, n_classes, inference):
    """Probabilities from blocks of 97 rows (computed from the stored transition rows)
    equal the fitted posterior's predictions from the dense path's ``n x M`` eigenvectors
    (:mod:`_flgp_reference`), and ``predict_proba`` at the cloud's points gives them too."""
    X, y, _ = spiral_classes(2000, rng, n_classes=n_classes)
    with flgp.config_context(working_memory=0.01):
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=200, n_eigenpairs=30), amplitude=None if inference == "laplace" else 1.0), inference=inference).fit(X, y)
    ep = clf.eigenpairs_
    U = ep.extension.graph.induced.points
    lam, V, _ = reference_eigenpairs(X, U, 30)
    np.testing.assert_allclose(ep.eigenvalues, lam, atol=1e-10)
    # the reference's signs are its own: align them with the engine's first
    signs = np.sign(np.sum(V * ep.eigenvectors, axis=0))
    Vd = V * signs
    # EP: the predictor reads V times each of its projections, here all in float64
    project = clf._chosen_fit.predictor.project_exact
    Z = Vd if project is None else tuple(Vd @ L for L in project)
    dense = clf._chosen_fit.predictor(Z, ep.piece_labels)
    # the probabilities read the EP variance factors in float32 (they move by ~1e-8)
    tol = 1e-10 if project is None else 1e-7
    np.testing.assert_allclose(clf.label_distributions_, dense, atol=tol)
    np.testing.assert_allclose(clf.predict_proba(X[:300]), dense[:300], atol=max(tol, 1e-9))
    assert np.all(clf.transduction_ == clf.classes_[dense.argmax(1)])
    # the latent moments read everything in float64: the dense path's to rounding
    head = Z[:300] if project is None else tuple(z[:300] for z in Z)
    mean, var = clf.predict_latent(X[:300])
    np.testing.assert_allclose(np.c_[mean, var], clf._chosen_fit.predictor.latent(head), rtol=1e-7,
                               atol=1e-10)
    # an order-free computation: shuffled rows give the same probabilities
    perm = rng.permutation(300)
    np.testing.assert_allclose(clf.predict_proba(X[perm]), dense[perm], atol=max(tol, 1e-9))


def _arrays(obj, seen=None):
    """Every numpy array reachable from ``obj`` (attributes, containers), not looking
    inside dask collections (a lazy input's graph holds what the user gave it)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or type(obj).__module__.split(".")[0] == "dask":
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        yield obj
        return
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _arrays(v, seen)
    elif isinstance(obj, (list, tuple, set)):
        for v in obj:
            yield from _arrays(v, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        yield from _arrays(vars(obj), seen)


def test_memory_shape_at_1e5_points(rng):
    """At n = 10^5 and M = 100 the fit, the transduction and predict never allocate an
    ``n x M`` array (80 MB): the traced peak stays below half of it with 8 MiB blocks, and
    the fitted model holds no array with ``n x M`` entries."""
    n, M = 100_000, 100
    th = rng.uniform(0, 2 * np.pi, n)
    X = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.01 * rng.standard_normal((n, 3))
    y = np.full(n, np.nan)
    y[:200] = np.sin(th[:200])
    with flgp.config_context(working_memory=8):
        tracemalloc.start()
        reg = FLGPRegressor(flgp.HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=M))).fit(X, y)
        reg.predict(X[:50_000])
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < n * M * 8 / 2, f"traced peak {peak / 2**20:.0f} MiB"
    arrays = list(_arrays(reg))
    assert max(a.size for a in arrays) < n * M
    # O(n r): the graph's indices, distances and values (r = 3), the two outputs
    assert sum(a.size for a in arrays if a.shape and a.shape[0] == n) == 11 * n
    for est in (DiffusionMap(2, method="flgp", n_eigenpairs=M, n_induced=500),
                GPEmbedding(2, method="flgp", n_eigenpairs=M, n_induced=500)):
        with flgp.config_context(working_memory=8):
            tracemalloc.start()
            est.fit(X)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert peak < n * M * 8 / 2
        assert max(a.size for a in _arrays(est)) < n * M


def test_classifier_memory_shape_at_1e5_points(rng):
    """The multi-class EP classifier at n = 10^5, M = 100: no ``n x M`` array during the fit
    and transduction (traced peak below half of one) nor in the fitted model."""
    n, M = 100_000, 100
    th = rng.uniform(0, 2 * np.pi, n)
    X = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.01 * rng.standard_normal((n, 3))
    y = np.full(n, -1)
    y[:150] = (th[:150] * 3 / (2 * np.pi)).astype(int)
    with flgp.config_context(working_memory=8):
        tracemalloc.start()
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=M))).fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < n * M * 8 / 2, f"traced peak {peak / 2**20:.0f} MiB"
    arrays = list(_arrays(clf))
    assert max(a.size for a in arrays) < n * M
    truth = (th * 3 / (2 * np.pi)).astype(int)
    assert np.mean(clf.transduction_ != truth) < 0.05


def test_transformers_blockwise_equal_the_eigenvector_formula(rng):
    X = open_spiral(1500, rng)
    kw = dict(n_induced=120, n_eigenpairs=20, random_state=0)
    ep = compute_eigenpairs(X, kernel="se", **kw)
    mu = 1 - ep.eigenvalues
    with flgp.config_context(working_memory=0.01):
        dm = DiffusionMap(3, method="flgp", t=4, coordinates="markov", **kw).fit(X)
        gp = GPEmbedding(4, method="flgp", t=4, sketch="rademacher", **kw).fit(X)
    assert_allclose_up_to_sign(dm.embedding_, np.sqrt(1500) * ep.eigenvectors[:, 1:4]
                               * mu[1:4] ** 4, atol=1e-9)
    gp_big = GPEmbedding(4, method="flgp", t=4, sketch="rademacher", **kw).fit(X)
    np.testing.assert_allclose(gp.sketch_coefficients_, gp_big.sketch_coefficients_,
                               atol=1e-10)
    np.testing.assert_allclose(gp.embedding_, (ep.eigenvectors * mu ** 4)
                               @ gp.sketch_coefficients_, atol=1e-9)


def test_nothing_imports_dask_without_it(tmp_path):
    """With dask unimportable, flgp imports, fits and predicts on numpy arrays; a zarr-like
    input asks for the extra."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("dask", "distributed", "zarr"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        import flgp
        from flgp.embedding import DiffusionMap
        rng = np.random.default_rng(0)
        X = rng.standard_normal((400, 3))
        y = np.full(400, np.nan); y[:20] = X[:20, 0]
        flgp.FLGPRegressor([flgp.HeatKernelPrior(flgp.Eigenbasis(n_induced=40)),
                            flgp.GraphMaternPrior(),
                            flgp.RBFPrior()]).fit(X, y).predict(X[:5])
        DiffusionMap(2, method="flgp").fit_transform(X)
        assert not any(m.split(".")[0] in ("dask", "distributed", "zarr")
                       for m in sys.modules), "dask was imported"
        from flgp._chunks import take_rows
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def _blobs_in_20d(rng, n=3000, classes=3):
    """Classes along a noisy curve in R^20: the k-means and neighbour searches take their
    GEMM paths (p > 16)."""
    t = rng.uniform(0, 3 * np.pi, n)
    Q = np.linalg.qr(rng.standard_normal((20, 20)))[0][:3]
    X = np.c_[np.cos(t), np.sin(t), t / 3] @ Q + 0.05 * rng.standard_normal((n, 20))
    y_true = np.minimum((t / (3 * np.pi) * classes).astype(int), classes - 1)
    y = np.full(n, -1)
    lab = rng.choice(n, 60, replace=False)
    y[lab] = y_true[lab]
    return X, y


@pytest.mark.parametrize("p", [3, 20])
def test_fit_does_not_depend_on_the_number_of_threads(rng, p, monkeypatch):
    """The blocks of every pass have sizes that do not depend on the thread count and
    their partials are added in block order, so one thread and two give the same fit
    (small blocks, so that every pass - k-means included - runs several on threads)."""
    import torch

    import flgp.graph.induced_points as induced

    monkeypatch.setattr(induced, "_LLOYD_BLOCK_ENTRIES", 120 * 400)   # 400-row blocks
    X, y = _blobs_in_20d(rng)
    X = X[:, :p] if p == 3 else X
    saved = torch.get_num_threads()
    fits = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with flgp.config_context(working_memory=0.01):     # 1024-row blocks
                clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=120)), random_state=0).fit(X, y)
            fits.append((clf.eigenpairs_.extension.graph.induced.points,
                         clf.eigenvalues_, clf.label_distributions_, clf.diffusion_time_))
    finally:
        torch.set_num_threads(saved)
    for a, b in zip(*fits):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("inference", ["ep", "laplace"])
def test_compared_priors_searched_on_threads_give_the_same_fit(rng, inference):
    """With several priors to compare (four spectral families x two constant-mode
    variances) the searches run on threads of their own: the fit on two threads equals
    the fit on one, bit for bit, down to the evidence and the number of posteriors."""
    import torch

    X, y = _blobs_in_20d(rng, n=1500)
    saved = torch.get_num_threads()
    fits = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=100), spectral_family="auto"),
                                 inference=inference, random_state=0).fit(X, y)
            fits.append((clf.label_distributions_, clf.diffusion_time_, clf.amplitude_,
                         clf.log_marginal_likelihood_, clf.n_iter_, clf.spectral_family_,
                         clf.constant_variance_))
    finally:
        torch.set_num_threads(saved)
    np.testing.assert_array_equal(fits[0][0], fits[1][0])
    assert fits[0][1:] == fits[1][1:]


@pytest.mark.parametrize("p", [3, 20])
def test_fit_does_not_depend_on_the_block_size(rng, p):
    """A classifier (3-class EP; k-means and neighbour search on their GEMM paths in R^20,
    the compiled search and dense products in R^3) fitted with 1024-row blocks equals the
    one fitted with the default blocks, to rounding."""
    X, y = _blobs_in_20d(rng, n=5000)
    X = X[:, :p] if p == 3 else X
    big = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), random_state=0).fit(X, y)
    with flgp.config_context(working_memory=0.01):             # 1024-row blocks
        small = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), random_state=0).fit(X, y)
    np.testing.assert_array_equal(small.eigenpairs_.extension.graph.induced.points,
                                  big.eigenpairs_.extension.graph.induced.points)
    np.testing.assert_allclose(small.eigenvalues_, big.eigenvalues_, atol=1e-12)
    # to EP's tolerance (its stopping rule moves probabilities by ~2e-8 on rounding)
    np.testing.assert_allclose(small.label_distributions_, big.label_distributions_,
                               atol=1e-6)
    np.testing.assert_array_equal(small.transduction_, big.transduction_)


def test_record_stages_is_public_and_times_a_fit():
    """flgp.record_stages: the stages of a fit, in order, with non-negative seconds; the
    full-resolution classifier's graph and scores among them."""
    import flgp
    from flgp import FLGPClassifier, GraphMaternPrior

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 2))
    y = np.full(300, -1)
    y[:4] = [0, 1, 0, 1]
    with flgp.record_stages() as stages:
        FLGPClassifier(GraphMaternPrior()).fit(X, y)
    names = [name for name, _ in stages]
    assert names.index("graph") < names.index("scores")
    assert all(sec >= 0 for _, sec in stages)
    with flgp.record_stages() as outside:
        pass
    assert list(outside) == []
