"""The compiled row kernels (flgp.backends.compiled) against their numpy twins and against direct
computations: every kernel on the inputs that stress it (ties, duplicates, points far
outside, degenerate Gram matrices, NaN), and whole fits with the kernels on and off.

The kernels are built by ``pip install`` (setup.py); CI must have them, so their absence
fails here unless FLGP_ALLOW_NO_COMPILED=1 says that this machine builds without a C
compiler on purpose.
"""

import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial import cKDTree

import flgp
from flgp.backends import compiled
from flgp._validation import (_row_hash_multipliers, check_cloud, check_cloud_values,
                              count_distinct_rows)
from flgp.graph import build_cross_graph, nearest_induced_points
from flgp.graph.cross_kernel import lae_weights
from flgp.graph.induced_points import _kmeanspp
from flgp.graph.transition import transition_rows

needs_compiled = pytest.mark.skipif(not compiled.available(),
                                    reason="flgp.backends._rows was not built")


def test_the_compiled_kernels_are_built():
    if os.environ.get("FLGP_ALLOW_NO_COMPILED") == "1":
        pytest.skip("FLGP_ALLOW_NO_COMPILED=1: this machine builds without the kernels")
    assert compiled.available(), (
        "flgp.backends._rows did not build: reinstall with a C compiler and Cython "
        "(pip install -e .), or set FLGP_ALLOW_NO_COMPILED=1 to run the numpy twins only")
    assert compiled.enabled()


def test_the_switch_turns_the_kernels_off_and_checks_its_value():
    with flgp.config_context(compiled=False):
        assert not compiled.enabled()
        assert flgp.get_config()["compiled"] is False
    assert flgp.get_config()["compiled"] is True
    with pytest.raises(TypeError, match="compiled must be True or False"):
        flgp.set_config(compiled="yes")


# -- the search ----------------------------------------------------------------------------

def _brute_nearest(X, U, r):
    """The r smallest (squared distance, index) pairs of each row, by sorting all."""
    D = ((X[:, None, :] - U[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(len(U)), D.shape), D), axis=1)[:, :r]
    return order, np.take_along_axis(D, order, axis=1)


def _clouds(rng):
    n = 1500
    th = rng.uniform(0, 2 * np.pi, n)
    grid = np.stack(np.meshgrid(*[np.arange(11.0)] * 3), -1).reshape(-1, 3)
    return {
        "curve in R^3": np.c_[np.cos(th), np.sin(th), np.cos(3 * th)]
        + 0.05 * rng.standard_normal((n, 3)),
        "line": rng.standard_normal((n, 1)),
        "plane": rng.standard_normal((n, 2)),
        "gaussian in R^9": rng.standard_normal((n, 9)),
        "gaussian in R^16": rng.standard_normal((n, 16)),
        "grid (ties)": grid,
        "duplicates": np.repeat(rng.standard_normal((150, 3)), 10, axis=0),
    }


@needs_compiled
@pytest.mark.parametrize("s", [4, 70, 400])
@pytest.mark.parametrize("r", [1, 3, 7])
def test_search_is_exact_with_ties_to_the_smaller_index(rng, s, r):
    for name, X in _clouds(rng).items():
        if r > s:
            continue
        U = X[rng.choice(len(X), s, replace=False)]
        tree = compiled.build_tree(U, r)
        for Q in (X, 3.0 * X + 1.0):              # the cloud, and new points far outside
            idx, sq = compiled.query(tree, Q, r)
            ref_idx, ref_sq = _brute_nearest(Q, U, r)
            np.testing.assert_array_equal(idx, ref_idx, err_msg=f"{name}, s={s}, r={r}")
            np.testing.assert_allclose(sq, ref_sq, rtol=1e-13, atol=0, err_msg=name)


@needs_compiled
def test_search_falls_back_to_the_tree_and_stays_exact_in_high_intrinsic_dimension(rng):
    """In R^16 the anchored lists run out for most rows: the rows fall back to the tree
    search (counted), and a block stops trying the lists after 256 rows - with the same
    answer as scipy's k-d tree."""
    X = rng.standard_normal((3000, 16))
    U = rng.standard_normal((500, 16))
    tree = compiled.build_tree(U, 3)
    idx = np.empty((3000, 3), dtype=np.int64)
    sq = np.empty((3000, 3))
    fallbacks = tree.query(X, 3, idx, sq)
    assert 128 < fallbacks <= 256
    d, i = cKDTree(U).query(X, k=3)
    np.testing.assert_array_equal(idx, i)
    np.testing.assert_allclose(sq, d ** 2, rtol=1e-12)
    # on a curve the lists answer almost every row
    th = rng.uniform(0, 2 * np.pi, 20000)
    C = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.05 * rng.standard_normal((20000, 3))
    tree = compiled.build_tree(C[:1000], 3)
    idx = np.empty((20000, 3), dtype=np.int64)
    assert tree.query(C, 3, idx, np.empty((20000, 3))) < 0.02 * 20000


@needs_compiled
def test_search_tree_pickles_and_threads_split_rows_without_changing_answers(rng):
    X = rng.standard_normal((120_000, 2))
    U = X[:300]
    tree = compiled.build_tree(U, 3)
    clone = pickle.loads(pickle.dumps(tree))
    one = compiled.query(tree, X, 3, threads=1)
    two = compiled.query(clone, X, 3, threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


@needs_compiled
def test_a_pickled_fit_holds_no_compiled_object_and_rebuilds_its_search(rng):
    """A saved estimator must load where the kernels were not built: the graph drops its
    search tree when pickled and builds it again at first use."""
    X = rng.standard_normal((6000, 3))
    y = np.where(np.arange(6000) < 100, X[:, 0], np.nan)
    reg = flgp.FLGPRegressor(flgp.HeatKernelPrior(flgp.Eigenbasis(n_induced=150)), random_state=0).fit(X, y)
    assert reg.eigenpairs_.extension.graph.tree is not None
    blob = pickle.dumps(reg)
    assert b"flgp.backends._rows" not in blob
    back = pickle.loads(blob)
    assert back.eigenpairs_.extension.graph.tree is None
    Q = X[:200] + 0.01
    np.testing.assert_array_equal(back.predict(Q), reg.predict(Q))
    assert back.eigenpairs_.extension.graph.tree is not None
    with flgp.config_context(compiled=False):
        np.testing.assert_allclose(pickle.loads(blob).predict(Q), reg.predict(Q), atol=1e-12)


@needs_compiled
def test_nearest_induced_points_agrees_with_the_scipy_path(rng):
    X = rng.standard_normal((5000, 3))
    U = rng.standard_normal((300, 3))
    with pytest.raises(ValueError, match="tree was built on 200 points in 3 dimensions"):
        nearest_induced_points(X, U, 3, tree=compiled.build_tree(U[:200], 3))
    i_c, d_c = nearest_induced_points(X, U, 3)
    with flgp.config_context(compiled=False):
        i_n, d_n = nearest_induced_points(X, U, 3)
    np.testing.assert_array_equal(i_c, i_n)
    np.testing.assert_allclose(d_c, d_n, rtol=1e-14)


# -- LAE weights ---------------------------------------------------------------------------

def _lae_objective(X, U, idx, w):
    return ((np.einsum("ik,ikp->ip", w, U[idx]) - X) ** 2).sum(1)


@needs_compiled
@pytest.mark.parametrize("p", [2, 3, 40])
@pytest.mark.parametrize("reg", [0.0, 1e-3])
def test_lae3_equals_the_numpy_solver(rng, p, reg):
    X = rng.standard_normal((4000, p))
    U = rng.standard_normal((60, p))
    U[1] = U[0]                                        # a repeated anchor
    U[2] = 0.5 * (U[3] + U[4])                         # collinear anchors
    X[:20] = U[rng.integers(0, 60, 20)]                # rows sitting on an anchor
    idx = nearest_induced_points(X, U, 3)[0]
    idx[20:30] = [0, 1, 5]                             # two anchors at one place
    idx[30:40] = [2, 3, 4]                             # affinely dependent anchors
    w = lae_weights(X, U, idx, regularization=reg)
    with flgp.config_context(compiled=False):
        w_ref = lae_weights(X, U, idx, regularization=reg)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-12)
    assert (w >= 0).all()
    # rows 20-40 have a whole segment of minimisers when unregularised (two anchors at one
    # place, or three on a line): there the two solvers may pick different ones, with the
    # same objective; a regularised Gram (or any other row) has one minimiser
    unique = np.ones(len(X), bool) if reg > 0 else np.r_[np.ones(20, bool),
                                                         np.zeros(20, bool),
                                                         np.ones(len(X) - 40, bool)]
    np.testing.assert_allclose(w[unique], w_ref[unique], atol=1e-8)
    f, f_ref = _lae_objective(X, U, idx, w), _lae_objective(X, U, idx, w_ref)
    if reg == 0.0:
        np.testing.assert_allclose(f, f_ref, rtol=1e-9, atol=1e-12)


# -- passes --------------------------------------------------------------------------------

def _rows(rng, n=3000, s=80, r=3):
    idx = np.stack([rng.choice(s, r, replace=False) for _ in range(n)])
    values = rng.random((n, r))
    return idx, values / values.sum(1, keepdims=True)


@needs_compiled
def test_products_equal_the_sparse_gram(rng):
    idx, values = _rows(rng)
    values[0] = [0.5, 0.5, 0.0]                        # a tie: the first maximum counts
    deg, gram, top = compiled.products(idx, values, 80)
    A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, idx.size + 1, 3)),
                      shape=(len(idx), 80))
    np.testing.assert_allclose(gram, (A.T @ A).toarray(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(deg, np.asarray(A.sum(0)).ravel(), rtol=1e-13)
    first_max = idx[np.arange(len(idx)), values.argmax(1)]
    np.testing.assert_array_equal(top, np.bincount(first_max, minlength=80))


@needs_compiled
@pytest.mark.parametrize("k", [1, 7, 130])
def test_rows_times_and_quadratic_forms(rng, k):
    idx, values = _rows(rng)
    P = rng.standard_normal((80, k))
    A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, idx.size + 1, 3)),
                      shape=(len(idx), 80))
    np.testing.assert_allclose(compiled.rows_times(idx, values, P), np.asarray(A @ P),
                               rtol=1e-13, atol=1e-14)
    S = rng.standard_normal((80, 80))
    quad = compiled.rows_quadratic(idx, values, S)
    np.testing.assert_allclose(quad, np.einsum("bj,bjl,bl->b", values,
                                               S[idx[:, :, None], idx[:, None, :]], values),
                               rtol=1e-12, atol=1e-13)


@needs_compiled
def test_transition_rows_and_column_sums_equal_the_numpy_twins(rng):
    idx, values = _rows(rng)
    log_k = np.log(values)
    log_k[5, 1] = -np.inf                              # an LAE weight of 0
    log_colsum = rng.standard_normal(80)
    log_colsum[idx[7, 0]] = -np.inf                    # a column no point reaches
    counts = rng.integers(1, 5, 80).astype(float)
    counts[[idx[9, 0], idx[11, 2]]] = 0.0              # two clusters empty
    with np.errstate(divide="ignore"):
        sizes = np.log(counts)
        for log_sizes in (None, sizes):
            got = transition_rows(log_k, idx, log_colsum, log_sizes)
            with flgp.config_context(compiled=False):
                want = transition_rows(log_k, idx, log_colsum, log_sizes)
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    from flgp.graph.passes import lse_partial
    from flgp.graph.transition import column_lse

    np.testing.assert_allclose(lse_partial(log_k, idx, 80), column_lse(log_k, idx, 80),
                               rtol=1e-13)
    dead = log_k.copy()
    dead[3] = -np.inf                                  # a row with no reachable point
    for on in (True, False):
        with flgp.config_context(compiled=on):
            with pytest.raises(ValueError, match="1 point\\(s\\) have zero kernel weight"):
                transition_rows(dead, idx, np.zeros(80))
            bad = log_k.copy()
            bad[2, 2] = np.nan
            with pytest.raises(ValueError, match="NaN or \\+inf"):
                lse_partial(bad, idx, 80)


# -- k-means++ and the cloud check ---------------------------------------------------------

@needs_compiled
@pytest.mark.parametrize("p", [1, 2, 3])
def test_kmeanspp_draws_the_same_centres_as_numpy(rng, p):
    X = rng.standard_normal((3000, p))
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    got = _kmeanspp(X, 200, a)
    with flgp.config_context(compiled=False):
        want = _kmeanspp(X, 200, b)
    np.testing.assert_array_equal(got, want)
    assert a.random() == b.random()                    # the same random numbers used


@needs_compiled
def test_kmeanspp_with_fewer_distinct_points_than_centres(rng):
    """Every point becomes a centre before k are chosen: the rest are drawn as the numpy
    loop draws them (integer coordinates: both compute the distances exactly)."""
    X = np.repeat(rng.integers(0, 20, (50, 3)).astype(float), 4, axis=0)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    got = _kmeanspp(X, 80, a)
    with flgp.config_context(compiled=False):
        want = _kmeanspp(X, 80, b)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got[:50], axis=0)) == 50
    assert a.random() == b.random()


@needs_compiled
def test_scan_cloud_reads_what_the_numpy_checks_compute(rng):
    X = rng.standard_normal((5000, 4))
    X[10] = X[20]
    X[30, 1] = -0.0
    finite, largest, lo, hi, hashes = compiled.scan_cloud(X, _row_hash_multipliers(4))
    assert finite and largest == np.abs(X).max()
    np.testing.assert_array_equal(lo, X.min(0))
    np.testing.assert_array_equal(hi, X.max(0))
    mult = _row_hash_multipliers(4)
    with np.errstate(over="ignore"):
        by_numpy = ((X + 0.0).view(np.uint64) * mult).sum(1, dtype=np.uint64)
    np.testing.assert_array_equal(hashes, by_numpy)
    assert count_distinct_rows(X, hashes=hashes) == count_distinct_rows(X) == 4999
    assert count_distinct_rows(X[100:], hashes=compiled.scan_cloud(X[100:], mult)[4]) == 4900
    X[40, 3] = np.inf
    assert not compiled.scan_cloud(X, _row_hash_multipliers(4))[0]
    for on in (True, False):
        with flgp.config_context(compiled=on):
            with pytest.raises(ValueError, match="NaN or infinity in 1 row\\(s\\) \\(first "
                                                 "at row 40\\)"):
                check_cloud(X)
            with pytest.raises(ValueError, match="duplicate rows"):
                check_cloud(np.repeat(X[:30], 3, axis=0))
            with pytest.raises(ValueError, match="spans only"):
                check_cloud(1e-120 * rng.standard_normal((50, 2)))
            with pytest.raises(ValueError, match="as large as"):
                check_cloud(1e160 * rng.standard_normal((50, 2)))
            with pytest.raises(ValueError, match="only 1 distinct point"):
                check_cloud(np.ones((6, 2)))
            Y = np.ascontiguousarray(X[:40])
            assert check_cloud_values(Y) is Y                  # checked, not copied
            # finite=False: the caller has scanned; the other checks still run
            with pytest.raises(ValueError, match="duplicate rows"):
                check_cloud_values(np.repeat(X[:30], 3, axis=0), finite=False)


# -- whole fits ----------------------------------------------------------------------------

@needs_compiled
@pytest.mark.parametrize("kernel,subsample", [("lae", "kmeans"), ("se", "random")])
def test_graphs_and_fits_equal_with_the_kernels_on_and_off(rng, kernel, subsample):
    th = rng.uniform(0, 2 * np.pi, 6000)
    X = np.c_[np.cos(th), np.sin(th), 0.3 * np.cos(3 * th)] + 0.02 * rng.standard_normal(
        (6000, 3))
    y = np.where(rng.random(6000) < 0.05, np.sin(2 * th), np.nan)
    fits = []
    for on in (True, False):
        with flgp.config_context(compiled=on):
            g = build_cross_graph(X, n_induced=200, kernel=kernel, subsample=subsample,
                                  random_state=0)
            reg = flgp.FLGPRegressor(flgp.HeatKernelPrior(flgp.Eigenbasis(n_induced=200, kernel=kernel, subsample=subsample)),
                                     random_state=0).fit(X, y)
            mean, sd = reg.predict(X[:50] * 1.01, return_std=True)
            fits.append((g, reg, mean, sd))
    (g1, r1, m1, s1), (g0, r0, m0, s0) = fits
    np.testing.assert_allclose(g1.induced.points, g0.induced.points, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(g1.indices, g0.indices)
    np.testing.assert_allclose(g1.transition.values, g0.transition.values, atol=1e-12)
    np.testing.assert_allclose(g1.cross_products()["gram"], g0.cross_products()["gram"],
                               atol=1e-10)
    np.testing.assert_allclose(r1.eigenvalues_, r0.eigenvalues_, atol=1e-12)
    # the fits to the optimiser's tolerance: rounding in the last digit may make L-BFGS-B
    # take one step more or fewer (2e-6 on the transduction here)
    assert r1.diffusion_time_ == pytest.approx(r0.diffusion_time_, rel=1e-3)
    scale = np.abs(r0.transduction_).max()
    np.testing.assert_allclose(r1.transduction_, r0.transduction_, atol=1e-4 * scale)
    np.testing.assert_allclose(r1.transduction_std_, r0.transduction_std_, atol=1e-4 * scale)
    np.testing.assert_allclose(m1, m0, atol=1e-4 * scale)
    np.testing.assert_allclose(s1, s0, atol=1e-4 * scale)
