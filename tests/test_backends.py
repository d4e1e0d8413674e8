"""The keops backend against the torch backend (k-d tree / GEMM) on small problems.

KeOps compiles each new formula on first use (seconds, cached afterwards). These tests
skip, saying why, only when pykeops cannot be imported; `.ci/run` installs it.
"""

import warnings

import numpy as np
import pytest

import flgp.backends as backends
import flgp.backends.choice as choice
from flgp import compute_eigenpairs
from flgp.graph import build_cross_graph, kmeans_centres, nearest_induced_points

from conftest import assert_allclose_up_to_sign

needs_keops = pytest.mark.skipif(not backends.keops_available(),
                                 reason="pykeops is not installed or does not import "
                                        "(pip install 'flgp[keops]')")


def test_auto_is_torch_on_a_cpu_and_bad_names_are_errors():
    if not choice._cuda_available():
        assert backends.resolve_backend("auto") == "torch"
    assert backends.resolve_backend("torch") == "torch"
    with pytest.raises(ValueError, match="backend='gpu' is not supported"):
        backends.resolve_backend("gpu")


def test_keops_requested_without_pykeops_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(choice, "_keops_status", lambda: (False, "pykeops is missing"))
    with pytest.warns(RuntimeWarning, match="using the torch backend"):
        assert backends.resolve_backend("keops") == "torch"


@needs_keops
@pytest.mark.parametrize("p", [3, 20])
def test_nearest_landmarks_agree(rng, p):
    X = rng.standard_normal((3000, p))
    U = rng.standard_normal((200, p))
    i_t, d_t = nearest_induced_points(X, U, 3, backend="torch")
    i_k, d_k = nearest_induced_points(X, U, 3, backend="keops")
    np.testing.assert_array_equal(i_k, i_t)
    np.testing.assert_allclose(d_k, d_t, rtol=1e-6, atol=1e-6)


@needs_keops
def test_kmeans_agrees(rng):
    X = rng.standard_normal((4000, 3))
    c_t = kmeans_centres(X, 40, random_state=0, backend="torch").points
    c_k = kmeans_centres(X, 40, random_state=0, backend="keops").points
    np.testing.assert_allclose(c_k, c_t, atol=1e-6)


@needs_keops
def test_engine_eigenpairs_agree(rng):
    th = rng.uniform(0, 2 * np.pi, 3000)
    X = np.c_[np.cos(th), np.sin(th), 0.3 * np.cos(3 * th)]
    kw = dict(n_induced=150, n_eigenpairs=12, kernel="se", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no silent fall-back
        e_k = compute_eigenpairs(X, backend="keops", **kw)
    e_t = compute_eigenpairs(X, backend="torch", **kw)
    np.testing.assert_allclose(e_k.eigenvalues, e_t.eigenvalues, atol=1e-6)
    assert_allclose_up_to_sign(e_k.eigenvectors, e_t.eigenvectors, atol=1e-6)
    g = build_cross_graph(X, n_induced=150, kernel="se", random_state=0, backend="keops")
    idx, vals = g.transition_rows(X[:100] + 0.01)
    g_t = build_cross_graph(X, n_induced=150, kernel="se", random_state=0, backend="torch")
    idx_t, vals_t = g_t.transition_rows(X[:100] + 0.01)
    np.testing.assert_array_equal(idx, idx_t)
    np.testing.assert_allclose(vals, vals_t, atol=1e-6)


def test_lazy_affinity_matches_dense(rng):
    """The never-stored affinity (torch row chunks here) against the stored matrix."""
    from flgp.graph.affinity import build_dense_affinity, build_lazy_affinity

    th = rng.uniform(0, 2 * np.pi, 200)
    X = np.c_[np.cos(th), np.sin(th)] + 0.01 * rng.standard_normal((200, 2))
    X_new = np.r_[X[:7] + 0.03, [[40.0, -40.0]]]          # the last one is far away
    W = rng.standard_normal((200, 3))
    for normalization, alpha in [("symmetric", None), ("symmetric", 0.3),
                                 ("bistochastic", None), ("bistochastic", 1.0)]:
        dense = build_dense_affinity(X, epsilon=0.1, normalization=normalization,
                                     alpha=alpha, tol=1e-12)
        lazy = build_lazy_affinity(X, epsilon=0.1, normalization=normalization, alpha=alpha,
                                   tol=1e-12, backend="torch")
        # the bistochastic fixed point stops at row sums within 1e-12 in both, possibly
        # after a different number of steps (torch's threaded sums run in another order):
        # entries then agree to ~1e-10 (2.8e-10 seen in CI), not to the last digit
        atol = 1e-10 if normalization == "symmetric" else 1e-8
        np.testing.assert_allclose(lazy.matmat(W), dense.matrix @ W, atol=atol)
        (o1, g1), (o2, g2) = dense.apply_rows(X_new, W), lazy.apply_rows(X_new, W)
        assert np.all(np.isfinite(o2))
        np.testing.assert_allclose(o2, o1, atol=atol)
        np.testing.assert_allclose(g2, g1, atol=1e-8)


@needs_keops
@pytest.mark.parametrize("cls", ["DiffusionMap", "GPEmbedding"])
def test_dense_embeddings_keops_agree_with_torch(rng, cls):
    import flgp.embedding as emb

    th = rng.uniform(0, 2 * np.pi, 300)
    X = np.c_[np.cos(th), np.sin(th)] + 0.01 * rng.standard_normal((300, 2))
    kw = dict(epsilon=0.25, t=4, random_state=0)
    e_t = getattr(emb, cls)(2, backend="torch", **kw).fit(X)
    e_k = getattr(emb, cls)(2, backend="keops", **kw).fit(X)
    X_new = X[:20] + 0.02
    if cls == "DiffusionMap":
        assert_allclose_up_to_sign(e_k.embedding_, e_t.embedding_, atol=1e-6)
        assert_allclose_up_to_sign(e_k.transform(X_new), e_t.transform(X_new), atol=1e-6)
    else:
        np.testing.assert_allclose(e_k.embedding_, e_t.embedding_, atol=1e-6)
        np.testing.assert_allclose(e_k.transform(X_new), e_t.transform(X_new), atol=1e-6)


def test_glgp_without_the_matrix_matches_dense_glgp(rng):
    from flgp.graph import build_dense_graph
    from flgp.spectral.dense import glgp_eigenpairs, glgp_eigenpairs_lazy

    th = rng.uniform(0, 2 * np.pi, 250)
    X = np.c_[np.cos(th), np.sin(th)] + 0.01 * rng.standard_normal((250, 2))
    dense = glgp_eigenpairs(build_dense_graph(X, bandwidth=0.15), 5)
    lazy = glgp_eigenpairs_lazy(X, 5, bandwidth=0.15, backend="torch")
    with pytest.raises(ValueError, match="bandwidth"):
        glgp_eigenpairs_lazy(X, 5, bandwidth=-1.0, backend="torch")
    np.testing.assert_allclose(lazy.eigenvalues, dense.eigenvalues, atol=1e-8)
    assert_allclose_up_to_sign(lazy.eigenvectors, dense.eigenvectors, atol=1e-6)
    X_new = X[:9] + 0.02
    assert_allclose_up_to_sign(lazy.extend(X_new), dense.extend(X_new), atol=1e-6)
    # a kernel wide enough to be numerically low-rank: the same error type as the dense
    # solver's, which the estimators' bandwidth grid skips
    from flgp.spectral.dense import TooFewEigenvaluesError
    with pytest.raises(TooFewEigenvaluesError, match="smaller bandwidth"):
        glgp_eigenpairs_lazy(X, 60, bandwidth=50.0, backend="torch")


@needs_keops
def test_glgp_keops_agrees_with_torch(rng):
    th = rng.uniform(0, 2 * np.pi, 250)
    X = np.c_[np.cos(th), np.sin(th)] + 0.01 * rng.standard_normal((250, 2))
    e_t = compute_eigenpairs(X, method="glgp", n_eigenpairs=5, backend="torch")
    e_k = compute_eigenpairs(X, method="glgp", n_eigenpairs=5, backend="keops")
    np.testing.assert_allclose(e_k.eigenvalues, e_t.eigenvalues, atol=1e-6)
    assert_allclose_up_to_sign(e_k.eigenvectors, e_t.eigenvectors, atol=1e-6)
    assert_allclose_up_to_sign(e_k.extend(X[:9] + 0.02), e_t.extend(X[:9] + 0.02), atol=1e-6)


@needs_keops
def test_estimators_take_the_backend(rng):
    from flgp import Eigenbasis, FLGPClassifier, FLGPRegressor, HeatKernelPrior, RBFPrior

    th = rng.uniform(0, 2 * np.pi, 1500)
    X = np.c_[np.cos(th), np.sin(th), 0.3 * np.cos(3 * th)]
    y = (np.cos(th) > 0).astype(int)
    y_semi = np.full(1500, -1)
    y_semi[:60] = y[:60]
    kw = dict(kernel="se", n_induced=150, bandwidth_grid=(1.0,))
    p_t = FLGPClassifier(HeatKernelPrior(Eigenbasis(**kw)), backend="torch", random_state=0).fit(X, y_semi).predict_proba(X[:50])
    p_k = FLGPClassifier(HeatKernelPrior(Eigenbasis(**kw)), backend="keops", random_state=0).fit(X, y_semi).predict_proba(X[:50])
    np.testing.assert_allclose(p_k, p_t, atol=1e-6)
    f = np.sin(th) + 0.05 * rng.standard_normal(1500)
    f_semi = np.where(np.arange(1500) < 80, f, np.nan)
    r_t = FLGPRegressor(RBFPrior(), backend="torch", max_iter=20).fit(X, f_semi)
    r_k = FLGPRegressor(RBFPrior(), backend="keops", max_iter=20).fit(X, f_semi)
    np.testing.assert_allclose(r_k.predict(X[:50]), r_t.predict(X[:50]), atol=1e-5)
    with pytest.raises(ValueError, match="backend"):
        FLGPClassifier(HeatKernelPrior(), backend="cuda").fit(X, y_semi)


def test_keops_cuda_probe_reports_a_crash_without_crashing():
    """The probe runs its code in a child process: a segmentation fault there (pykeops 2.3
    under CUDA 13) is a reason, not the end of the user's process."""
    from flgp.backends import keops_cuda_probe

    ok, why = keops_cuda_probe("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert not ok and "signal 11" in why
    ok, why = keops_cuda_probe("raise RuntimeError('no nvrtc')")
    assert not ok and "exit status 1" in why and "no nvrtc" in why
    assert keops_cuda_probe("x = 1") == (True, "")


def test_auto_is_torch_when_the_gpu_probe_fails(monkeypatch):
    monkeypatch.setattr(choice, "_keops_status",
                        lambda: (False, "pykeops failed a test reduction on the GPU"))
    monkeypatch.setattr(choice, "_cuda_available", lambda: True)
    assert backends.resolve_backend("auto") == "torch"
    with pytest.warns(RuntimeWarning, match="test reduction on the GPU"):
        assert backends.resolve_backend("keops") == "torch"


def test_backends_import_nothing_of_the_input_checks():
    """The input checks import the compiled kernels at module level, so the backends
    package (whose ``__init__`` any import of ``flgp.backends.compiled`` runs) must import
    nothing of them: else the two close an import cycle that only a function-level import
    kept from failing."""
    import ast
    import pathlib

    import flgp.backends

    for path in pathlib.Path(flgp.backends.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "_validation" not in (node.module or ""), path.name
    # (tests/test_structure.py imports either side first in a fresh interpreter)
