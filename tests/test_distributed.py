"""The Dask engine: the same results as the in-memory engine on the same induced points,
whatever the chunking and the scheduler (threads, or a two-process LocalCluster, with a
worker killed in the middle of a fit), lazy outputs, clear errors, zarr input."""

import logging
import pickle
import threading
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,  # noqa: E402
                  RBFPrior)
from flgp.embedding import DiffusionMap, GPEmbedding  # noqa: E402
from flgp.spectral import compute_eigenpairs  # noqa: E402

from conftest import assert_allclose_up_to_sign  # noqa: E402
from test_chunks import _arrays, open_spiral, spiral_classes, spiral_regression  # noqa: E402,E501


def _same_eigenpairs(lazy, ref, atol=1e-10):
    assert lazy.is_dask and not ref.is_dask
    V = lazy.eigenvectors
    assert isinstance(V, da.Array)
    np.testing.assert_allclose(lazy.eigenvalues, ref.eigenvalues, atol=atol)
    assert_allclose_up_to_sign(V.compute(), ref.eigenvectors, atol=atol)
    np.testing.assert_array_equal(lazy.piece_labels.compute(), ref.piece_labels)
    np.testing.assert_array_equal(lazy.piece_sizes, ref.piece_sizes)


@pytest.mark.parametrize("kernel, subsample", [("lae", "kmeans"), ("se", "kmeans"),
                                               ("lae", "random"), ("se", "random")])
def test_dask_eigenpairs_equal_in_memory(rng, kernel, subsample):
    X = open_spiral(3000, rng)
    kw = dict(n_induced=200, n_eigenpairs=25, kernel=kernel, subsample=subsample,
              random_state=4)
    ref = compute_eigenpairs(X, **kw)
    lazy = compute_eigenpairs(da.from_array(X, chunks=700), **kw)
    np.testing.assert_array_equal(lazy.extension.graph.induced.points,
                                  ref.extension.graph.induced.points)
    _same_eigenpairs(lazy, ref)
    idx = np.array([2999, 0, 1234, 0])
    np.testing.assert_allclose(lazy.eigenvector_rows(idx), ref.eigenvector_rows(idx),
                               atol=1e-10)
    out = lazy.map_chunks(lambda V, comp: V[:, 1], dtype=np.float64)
    assert isinstance(out, da.Array) and out.chunks == ((700,) * 4 + (200,),)
    np.testing.assert_allclose(np.abs(out.compute()), np.abs(ref.eigenvectors[:, 1]),
                               atol=1e-10)
    with pytest.raises(TypeError, match="map_chunks"):
        next(lazy.iter_chunks())


def test_results_do_not_depend_on_the_dask_chunks(rng):
    X = open_spiral(2500, rng)
    U = X[rng.choice(2500, 150, replace=False)]
    ref = compute_eigenpairs(X, induced_points=U, n_eigenpairs=20)
    for chunks in [(2500,), (1000, 1000, 500), (1, 999, 37, 1463), 101]:
        lazy = compute_eigenpairs(da.from_array(X, chunks=(chunks, 3)), induced_points=U,
                                  n_eigenpairs=20, chunk_size=64)
        _same_eigenpairs(lazy, ref)
    # columns split into chunks are joined
    lazy = compute_eigenpairs(da.from_array(X, chunks=(500, 1)), induced_points=U,
                              n_eigenpairs=20)
    _same_eigenpairs(lazy, ref)


def test_regressor_on_dask_equals_in_memory(rng):
    X, y = spiral_regression(3000, rng)
    ref = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=300, n_eigenpairs=40))).fit(X, y)
    U = ref.eigenpairs_.extension.graph.induced.points
    # t and the noise fixed; the amplitude is still fitted (L-BFGS-B), so the fits agree
    # to the optimiser's tolerance (a step more or fewer on rounding-level differences of
    # the eigenvectors moves the predictions by ~1e-6), the engine to rounding
    fixed = dict(prior=HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=40), diffusion_time=ref.diffusion_time_),
                 noise=ref.noise_)
    a = FLGPRegressor(**fixed).fit(X, y)
    b = FLGPRegressor(**fixed).fit(da.from_array(X, chunks=800),
                                   da.from_array(y, chunks=500))
    assert isinstance(b.transduction_, da.Array) and isinstance(b.transduction_std_, da.Array)
    _same_eigenpairs(b.eigenpairs_, a.eigenpairs_)
    np.testing.assert_allclose(b.transduction_.compute(), a.transduction_, atol=1e-5)
    np.testing.assert_allclose(b.transduction_std_.compute(), a.transduction_std_, atol=1e-5)
    Xn = X[:500] + 0.01
    mean, sd = b.predict(da.from_array(Xn, chunks=128), return_std=True)
    assert isinstance(mean, da.Array)
    ma, sa = a.predict(Xn, return_std=True)
    np.testing.assert_allclose(mean.compute(), ma, atol=1e-5)
    np.testing.assert_allclose(sd.compute(), sa, atol=1e-5)
    np.testing.assert_allclose(b.predict(Xn), ma, atol=1e-5)      # numpy in, numpy out
    # fitted t, s^2 and noise: the evidence is flat in t, so rounding-level differences in
    # the eigenvectors (1e-13 here) move its maximiser by ~1e-7 relative
    free = FLGPRegressor(HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=40))).fit(
        da.from_array(X, chunks=900), y)
    assert free.diffusion_time_ == pytest.approx(ref.diffusion_time_, rel=1e-4)
    np.testing.assert_allclose(free.transduction_.compute(), ref.transduction_, atol=1e-4)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_on_dask_equals_in_memory(rng, n_classes):
    X, y, truth = spiral_classes(3000, rng, n_classes=n_classes)
    ref = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=300, n_eigenpairs=40))).fit(X, y)
    U = ref.eigenpairs_.extension.graph.induced.points
    fixed = dict(eigenbasis=Eigenbasis(induced_points=U, n_eigenpairs=40),
                 diffusion_time=ref.diffusion_time_)
    a = FLGPClassifier(HeatKernelPrior(**fixed)).fit(X, y)
    b = FLGPClassifier(HeatKernelPrior(**fixed)).fit(da.from_array(X, chunks=700),
                                                     da.from_array(y, chunks=500))
    assert isinstance(b.label_distributions_, da.Array)
    assert isinstance(b.transduction_, da.Array)
    _same_eigenpairs(b.eigenpairs_, a.eigenpairs_)
    np.testing.assert_allclose(b.label_distributions_.compute(), a.label_distributions_,
                               atol=1e-6)
    np.testing.assert_array_equal(b.transduction_.compute(), a.transduction_)
    Xn = X[:400] + 0.01
    lazy = b.predict_proba(da.from_array(Xn, chunks=150))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), a.predict_proba(Xn), atol=1e-6)
    np.testing.assert_array_equal(b.predict(Xn), a.predict(Xn))       # numpy in, numpy out
    mean, var = b.predict_latent(da.from_array(Xn, chunks=150))
    ma, va = a.predict_latent(Xn)
    np.testing.assert_allclose(mean.compute(), ma, atol=1e-6)
    np.testing.assert_allclose(var.compute(), va, atol=1e-6)
    # the fitted model holds no n-sized numpy array (the lazy X and y aside)
    assert not any(X.shape[0] in v.shape for v in _arrays(b))
    assert any(X.shape[0] in v.shape for v in _arrays(a))
    # string labels, -1 for the unlabelled rows, in a dask array of objects
    names = np.array(["arc0", "arc1", "arc2"])[np.maximum(y, 0)].astype(object)
    names[y == -1] = -1
    c = FLGPClassifier(HeatKernelPrior(**fixed)).fit(da.from_array(X, chunks=700),
                                                     da.from_array(names, chunks=500))
    np.testing.assert_array_equal(c.classes_, np.array(["arc0", "arc1", "arc2"])[:n_classes])
    np.testing.assert_allclose(c.label_distributions_.compute(), a.label_distributions_,
                               atol=1e-6)
    assert np.mean(b.transduction_.compute()[y == -1] != truth[y == -1]) < 0.05


def test_regressor_dask_x_unlabeled_and_bad_input(rng):
    X, y = spiral_regression(1500, rng)
    lab = ~np.isnan(y)
    ref = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=150, n_eigenpairs=20), diffusion_time=50.0),
                        noise=0.1)
    ref.fit(X[lab], y[lab], X_unlabeled=X[~lab])
    U = ref.eigenpairs_.extension.graph.induced.points
    est = FLGPRegressor(HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=20), diffusion_time=50.0), noise=0.1)
    est.fit(da.from_array(X[lab]), y[lab], X_unlabeled=da.from_array(X[~lab], chunks=400))
    np.testing.assert_allclose(est.transduction_.compute(), ref.transduction_, atol=1e-5)
    with pytest.raises(ValueError, match="FLGP heat kernel only"):
        FLGPRegressor(HeatKernelPrior(Eigenbasis("glgp"))).fit(da.from_array(X), y)
    with pytest.raises(ValueError, match="one entry per row"):
        FLGPRegressor().fit(da.from_array(X), y[:-1])
    with pytest.raises(ValueError, match="2-d"):
        FLGPRegressor().fit(da.from_array(X[:, 0]), y)


def test_nan_in_a_chunk_names_its_rows(rng):
    X = open_spiral(3000, rng)
    X[2345, 1] = np.nan
    X[2500, 0] = np.inf
    with pytest.raises(ValueError, match=r"NaN or infinity in 2 row\(s\) of its chunk of "
                                          r"rows 2000-2999 \(first at row 2345\)"):
        compute_eigenpairs(da.from_array(X, chunks=1000), n_induced=100)
    y = np.full(3000, np.nan)
    y[:50] = 1.0
    with pytest.raises(ValueError, match="rows 2000-2999"):
        FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(), RBFPrior()]).fit(
            da.from_array(X, chunks=1000), y)
    # the in-memory path's message starts the same way
    with pytest.raises(ValueError, match=r"X contains NaN or infinity in 2 row\(s\)"):
        compute_eigenpairs(X, n_induced=100)


@pytest.mark.parametrize("sketch", ["gaussian", "rademacher"])
def test_transformers_on_dask_equal_in_memory(rng, sketch):
    X = open_spiral(2000, rng)
    kw = dict(method="flgp", n_induced=150, n_eigenpairs=20, random_state=0)
    for est_cls, extra in ((DiffusionMap, {}), (GPEmbedding, {"sketch": sketch})):
        ref = est_cls(3, **kw, **extra).fit(X)
        lazy = est_cls(3, **kw, **extra)
        Y = lazy.fit_transform(da.from_array(X, chunks=600))
        assert isinstance(Y, da.Array) and isinstance(lazy.embedding_, da.Array)
        assert isinstance(lazy.piece_labels_, da.Array)
        signs = np.sign(np.sum(Y.compute() * ref.embedding_, axis=0))
        np.testing.assert_allclose(Y.compute() * signs, ref.embedding_, atol=1e-9)
        T = lazy.transform(da.from_array(X[:300] + 0.01, chunks=100))
        assert isinstance(T, da.Array)
        np.testing.assert_allclose(T.compute() * signs, ref.transform(X[:300] + 0.01),
                                   atol=1e-9)
        np.testing.assert_allclose(lazy.transform(X[:10]) * signs, ref.embedding_[:10],
                                   atol=1e-9)
    with pytest.raises(ValueError, match="method='flgp'"):
        DiffusionMap(2, method="dense").fit(da.from_array(X))


def test_zarr_input_and_small_pickles(rng, tmp_path):
    zarr = pytest.importorskip("zarr")
    n = 40_000
    X = open_spiral(n, rng)
    z = zarr.create_array(store=str(tmp_path / "cloud.zarr"), shape=X.shape,
                          chunks=(10_000, 3), dtype="float64")
    z[:] = X
    y = np.full(n, np.nan)
    y[:100] = X[:100, 0]
    ref = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=200, n_eigenpairs=30), diffusion_time=20.0),
                        noise=0.01).fit(X, y)
    U = ref.eigenpairs_.extension.graph.induced.points
    est = FLGPRegressor(HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=30), diffusion_time=20.0),
                        noise=0.01)
    est.fit(zarr.open_array(str(tmp_path / "cloud.zarr"), mode="r"), y)
    np.testing.assert_allclose(est.transduction_.compute(), ref.transduction_, atol=1e-5)
    blob = pickle.dumps(est)
    # O(s k) - induced points, the projected row map the lazy outputs carry - not O(n):
    # less than half a float per point (one n-sized float array alone is n * 8 bytes)
    assert len(blob) < n * 8 / 2
    back = pickle.loads(blob)
    np.testing.assert_allclose(back.transduction_[:1000].compute(), ref.transduction_[:1000],
                               atol=1e-5)
    assert not any(isinstance(v, np.ndarray) and v.shape[:1] == (n,)
                   for v in vars(est).values())


# -- a two-process LocalCluster ---------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, memory_limit="2GiB",
                                       silence_logs=logging.ERROR)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_local_cluster_fit_equals_in_memory(client, rng):
    X, y = spiral_regression(4000, rng)
    ref = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=300, n_eigenpairs=40), diffusion_time=30.0),
                        noise=0.1).fit(X, y)
    U = ref.eigenpairs_.extension.graph.induced.points
    est = FLGPRegressor(HeatKernelPrior(Eigenbasis(induced_points=U, n_eigenpairs=40), diffusion_time=30.0),
                        noise=0.1)
    est.fit(da.from_array(X, chunks=500), da.from_array(y, chunks=500))
    _same_eigenpairs(est.eigenpairs_, ref.eigenpairs_)
    np.testing.assert_allclose(est.transduction_.compute(), ref.transduction_, atol=1e-5)
    assert len(client.scheduler_info()["workers"]) == 2


def _slow_down_blocks(delay):
    """Run on each worker: every pass over a block sleeps ``delay`` seconds first, so that
    a small fit is still running when a worker is killed."""
    import functools

    import flgp._chunks.dask_blocks as engine

    for name in ("_reduce_chunk",):
        fn = getattr(engine, name)

        @functools.wraps(fn)
        def slow(*args, _fn=fn, **kwargs):
            time.sleep(delay)
            return _fn(*args, **kwargs)

        setattr(engine, name, slow)


def _restore_blocks():
    import flgp._chunks.dask_blocks as engine

    for name in ("_reduce_chunk",):
        fn = getattr(engine, name)
        setattr(engine, name, getattr(fn, "__wrapped__", fn))


def test_worker_killed_during_a_fit_does_not_change_the_result(client, rng):
    X = open_spiral(6000, rng)
    U = X[rng.choice(6000, 200, replace=False)]
    ref = compute_eigenpairs(X, induced_points=U, n_eigenpairs=20)
    client.run(_slow_down_blocks, 0.25)
    try:
        _fit_and_kill(client, X, U, ref)
    finally:
        client.run(_restore_blocks)


def _fit_and_kill(client, X, U, ref):
    out, errors = {}, []

    def fit():
        try:
            out["ep"] = compute_eigenpairs(da.from_array(X, chunks=300), induced_points=U,
                                           n_eigenpairs=20)
        except Exception as exc:      # reported below
            errors.append(exc)

    worker = threading.Thread(target=fit)
    worker.start()
    deadline = time.time() + 60
    busy = []
    while time.time() < deadline and not busy:
        busy = [w for w, tasks in client.processing().items() if tasks]
        time.sleep(0.05)
    assert busy, "the fit never reached the workers"
    time.sleep(0.3)
    assert worker.is_alive(), "the fit ended before the worker could be killed"
    before = set(client.scheduler_info()["workers"])
    assert client.restart_workers([busy[0]]) == {busy[0]: "OK"}
    assert busy[0] in before and busy[0] not in set(client.scheduler_info()["workers"])
    worker.join(timeout=180)
    assert not worker.is_alive() and not errors, errors
    _same_eigenpairs(out["ep"], ref)
