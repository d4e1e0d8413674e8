"""Induced points (landmarks): a random subsample of the cloud or k-means centres.

k-means scales to millions of points: Lloyd's algorithm on a subsample of at most
``max_fit_samples`` points, seeded by greedy k-means++ on a smaller one, refined on up to
``100 s`` points. The cluster sizes ``n_j`` come from the graph's neighbour search (its
first column), at no extra pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


from ..backends import compiled, cpu_threads, resolve_backend
from .._chunks import count, map_row_ranges, one_thread_each, row_ranges, stage, take_rows
from .._validation import check_random_state
from .neighbors import KDTREE_MAX_DIM, nearest_induced_points, search_tree

__all__ = ["InducedPoints", "random_induced_points", "kmeans_centres"]

# k-means++ seeds s centres from a uniform subsample of this many times s points
_SEED_SAMPLE_FACTOR = 4
# largest seeding distance matrix formed at once (float64 bytes)
_SEED_DIST_BYTES = 256 * 2**20


@dataclass
class InducedPoints:
    """The induced points ``U`` (s x p) and how they were chosen."""

    points: np.ndarray
    method: str  # "random", "kmeans" or "given" (the user's induced points)
    sample_indices: np.ndarray | None = None  # rows of X for "random"


def random_induced_points(X: np.ndarray, n_induced: int, random_state=None) -> InducedPoints:
    """``n_induced`` rows of ``X`` drawn uniformly without replacement."""
    rng = check_random_state(random_state)
    idx = np.sort(rng.choice(X.shape[0], size=n_induced, replace=False))
    return InducedPoints(points=take_rows(X, idx), method="random", sample_indices=idx)


def kmeans_centres(X: np.ndarray, n_clusters: int, *, random_state=None,
                   n_iter: int | None = None, tol: float = 1e-3,
                   max_fit_samples: int | None = None, n_refine: int = 2,
                   max_refine_samples: int | None = None,
                   dtype=torch.float32, backend: str = "auto") -> InducedPoints:
    """k-means centres by Lloyd's algorithm with k-means++ seeding.

    Parameters
    ----------
    X : ndarray or dask array of shape (n, p)
        Only uniform subsamples are read (a cloud of at most ``max_fit_samples`` points
        is read whole).
    n_clusters : int
        ``s``.
    random_state : int, Generator or None
    n_iter : int, optional
        Lloyd iterations (the centres only need to cover the cloud). Default 20 up to
        ``p = 16`` (k-d tree assignments), 10 above (GEMM assignments).
    tol : float, default=1e-3
        Lloyd stops when the centres' mean squared move is at most ``tol`` times the mean
        squared point-centre distance (``tol = 0``: only when no assignment changes;
        docs/engine.md). ValueError if negative or not finite.
    max_fit_samples : int, optional
        Fit on a uniform subsample of this many points when ``n`` is larger. Default
        ``max(20 * s, 20000)``.
    n_refine : int, default=2
        Lloyd iterations on a larger sample after a fit on a subsample (none when the fit
        used every point).
    max_refine_samples : int, optional
        Size of the refinement sample (at least ``s``). Default ``100 * s``.
    backend : {"auto", "torch", "keops"}, default="auto"
        Who computes the assignments (:mod:`flgp.backends`).

    Notes
    -----
    k-means++ (:func:`_kmeanspp`) seeds on at most ``4 * s`` points; an empty cluster keeps
    its previous centre; Lloyd also stops once no assignment changes.
    """
    rng = check_random_state(random_state)
    n = X.shape[0]
    s = int(n_clusters)
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0 (0: stop only when no assignment "
                         f"changes); got {tol!r}.")
    n_refine = int(n_refine)
    if n_refine < 0:
        raise ValueError(f"n_refine must be >= 0; got {n_refine!r}.")
    if max_refine_samples is not None and int(max_refine_samples) < s:
        raise ValueError(f"max_refine_samples={max_refine_samples} is below n_clusters={s}: "
                         f"the refinement needs at least one point per centre.")
    if max_fit_samples is None:
        max_fit_samples = max(20 * s, 20_000)
    if n > max_fit_samples:
        fit_idx = rng.choice(n, size=max_fit_samples, replace=False)
        Xf = take_rows(X, fit_idx)
    else:
        # a numpy cloud as it is; a dask one computed (numpy reads it through __array__)
        X = Xf = np.ascontiguousarray(X, dtype=np.float64)
    centre = Xf.mean(axis=0, keepdims=True)
    seed_n = min(Xf.shape[0], _SEED_SAMPLE_FACTOR * s)
    seed_idx = rng.choice(Xf.shape[0], size=seed_n, replace=False) if seed_n < Xf.shape[0] \
        else np.arange(Xf.shape[0])
    with stage("induced points/seeding"):
        C0 = _kmeanspp(Xf[seed_idx] - centre, s, rng)
    count("kmeans seeding points", seed_n)
    if n_iter is None:
        n_iter = 20 if Xf.shape[1] <= KDTREE_MAX_DIM else 10
    stages = [(Xf, n_iter)]
    if Xf is not X and n_refine > 0:
        if max_refine_samples is None:
            max_refine_samples = 100 * s
        if n > max_refine_samples:
            Xr = take_rows(X, rng.choice(n, size=int(max_refine_samples), replace=False))
        else:
            Xr = np.ascontiguousarray(X, dtype=np.float64)
        stages.append((Xr, n_refine))
    backend = resolve_backend(backend)          # once: "torch" or "keops"
    if Xf.shape[1] > KDTREE_MAX_DIM and backend != "keops":
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype if isinstance(dtype, torch.dtype) \
            else np.dtype(dtype)
        C = C0
        with stage("induced points/lloyd"):
            for Xs, iters in stages:
                C = _lloyd_gemm(Xs, C, iters, tol, np_dtype, centre=centre)
        return InducedPoints(points=np.ascontiguousarray(C + centre), method="kmeans")
    C = C0
    with stage("induced points/lloyd"):
        for Xs, iters in stages:
            C = _lloyd(Xs - centre, C, iters, tol, backend)
    return InducedPoints(points=C + centre, method="kmeans")


# rows x centres of one block of the GEMM assignments (float32: 8 MB)
_LLOYD_BLOCK_ENTRIES = 2_000_000


def _lloyd_gemm(X: np.ndarray, C: np.ndarray, n_iter: int, tol: float,
                dtype=np.float32, centre: np.ndarray | None = None) -> np.ndarray:
    """Lloyd iterations with ``dtype`` GEMM distances, for ``p > KDTREE_MAX_DIM``; stops as
    :func:`kmeans_centres` says.

    ``C`` is centred, ``X`` once ``centre`` is subtracted (block by block, no centred
    copy). Blocks run on threads, each on one BLAS thread; their float64 partials are
    added in block order and the block size is fixed, so the centres do not depend on the
    number of threads."""
    n, p = X.shape
    s = C.shape[0]
    def centred(a, b):
        return X[a:b] if centre is None else X[a:b] - centre

    ranges = row_ranges(n, max(1, _LLOYD_BLOCK_ENTRIES // max(s, 1)))
    Xl = np.empty((n, p), dtype=dtype)
    x2 = np.empty(n)
    for a, b in ranges:
        Xb = centred(a, b)
        Xl[a:b] = Xb
        x2[a:b] = np.einsum("ij,ij->i", Xb, Xb)
    threads = cpu_threads()
    ones = np.ones(ranges[0][1] - ranges[0][0]) if ranges else np.ones(0)
    prev = None
    C = np.array(C, dtype=np.float64)
    for _ in range(n_iter):
        count("lloyd point-iterations", n)
        Cl = np.ascontiguousarray(C, dtype=dtype)
        half = 0.5 * np.einsum("ij,ij->i", Cl, Cl)

        def block(a, b):
            S = Xl[a:b] @ Cl.T                                   # (b - a, s)
            np.subtract(half, S, out=S)                          # |c|^2 / 2 - x.c
            lab = S.argmin(axis=1)
            best = S[np.arange(b - a), lab].astype(np.float64)
            inertia = float(np.maximum(x2[a:b] + 2.0 * best, 0.0).sum())
            onehot = sp.csc_matrix((ones[:b - a], lab, np.arange(b - a + 1)),
                                   shape=(s, b - a))
            return lab, np.asarray(onehot @ centred(a, b)), np.bincount(lab, minlength=s), \
                inertia

        with one_thread_each():
            parts = map_row_ranges(block, ranges, threads)
        sums = parts[0][1]
        counts = parts[0][2].copy()
        inertia = parts[0][3]
        for _, sm, ct, ine in parts[1:]:
            sums = sums + sm
            counts += ct
            inertia += ine
        labels = np.concatenate([pt[0] for pt in parts])
        nonempty = counts > 0
        C_old = C
        C = C.copy()
        C[nonempty] = sums[nonempty] / counts[nonempty, None]
        if prev is not None and np.array_equal(labels, prev):
            break  # assignments stable: Lloyd has converged
        if _moved_little(float(((C - C_old) ** 2).sum()), inertia, n, s, tol):
            break
        prev = labels
    return C


def _moved_little(sq_move_sum: float, inertia: float, n: int, s: int, tol: float) -> bool:
    """Lloyd's stopping rule: mean squared centre move <= tol * mean squared point-centre
    distance."""
    return tol > 0 and sq_move_sum / s <= tol * inertia / n


def _lloyd(X: np.ndarray, C: np.ndarray, n_iter: int, tol: float = 0.0,
           backend: str = "torch") -> np.ndarray:
    """Lloyd iterations with :func:`flgp.graph.neighbors.nearest_induced_points`
    assignments (ties to the smaller index); stops as :func:`kmeans_centres` says.
    ``backend``: resolved, ``"torch"`` or ``"keops"``."""
    s, p = C.shape
    keops = backend == "keops"
    prev = None
    for _ in range(n_iter):
        count("lloyd point-iterations", X.shape[0])
        # the centres' tree, built whatever n is
        tree = None if keops else search_tree(C, 1)
        lab = nearest_induced_points(X, C, 1, backend=backend, tree=tree)[0][:, 0]
        counts = np.bincount(lab, minlength=s)
        nonempty = counts > 0
        C_old = C.copy()
        for d in range(p):
            sums = np.bincount(lab, weights=X[:, d], minlength=s)
            C[nonempty, d] = sums[nonempty] / counts[nonempty]
        if prev is not None and np.array_equal(lab, prev):
            break
        if tol > 0:
            # inertia of this assignment, about the centres it was made with
            resid = X - C_old[lab]
            inertia = float(np.einsum("ij,ij->", resid, resid))
            if _moved_little(float(((C - C_old) ** 2).sum()), inertia, X.shape[0], s, tol):
                break
        prev = lab
    return np.ascontiguousarray(C)


# the compiled seeding runs up to this dimension (numpy's GEMM is faster above)
_COMPILED_SEED_MAX_DIM = 4


def _kmeanspp(Xs: np.ndarray, k: int, rng: np.random.Generator,
              n_trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding (Arthur and Vassilvitskii; as scikit-learn's
    ``kmeans_plusplus``): each step draws ``2 + log k`` candidates with probability
    proportional to ``D^2`` and keeps the one that lowers ``sum D^2`` most. In low
    dimension the compiled twin (:func:`flgp.backends.compiled.kmeanspp`) runs the same
    steps from the same random numbers."""
    X = np.ascontiguousarray(Xs, dtype=np.float64)
    n, p = X.shape
    L = 2 + int(np.log(k)) if n_trials is None else int(n_trials)
    x2 = np.einsum("ij,ij->i", X, X)
    XT = np.ascontiguousarray(X.T)
    # in high dimension the (L x p) @ (p x n) product dominates each step: form all squared
    # distances once when they fit in _SEED_DIST_BYTES
    dist = None
    if p > KDTREE_MAX_DIM and n * n * 8 <= _SEED_DIST_BYTES:
        dist = X @ XT
        dist *= -2.0
        dist += x2[:, None]
        dist += x2[None, :]
        np.maximum(dist, 0.0, out=dist)
    first = int(rng.integers(n))
    if dist is None and p <= _COMPILED_SEED_MAX_DIM and compiled.enabled():
        # the compiled loop, from the same uniforms (drawn at once: the same stream)
        state = rng.bit_generator.state
        idx, done = compiled.kmeanspp(X, k, rng.random((k - 1, L)), first)
        if done < k:                          # every point is already a centre
            rng.bit_generator.state = state
            rng.random((done - 1, L))
            idx[done:] = rng.choice(n, size=k - done, replace=False)
        return X[idx].copy()
    idx = np.empty(k, dtype=np.int64)
    idx[0] = first
    d2 = np.maximum(x2 - 2.0 * X @ X[idx[0]] + x2[idx[0]], 0.0)
    cum = np.empty(n)
    D = np.empty((L, n))
    for j in range(1, k):
        np.cumsum(d2, out=cum)
        if cum[-1] <= 0:                      # every point is already a centre
            idx[j:] = rng.choice(n, size=k - j, replace=False)
            break
        cand = np.minimum(cum.searchsorted(rng.random(L) * cum[-1]), n - 1)
        if dist is not None:
            np.minimum(dist[cand], d2[None, :], out=D)
        else:
            # D = min(d2, |x_c|^2 - 2 x_c.x + |x|^2), written in place (no temporaries)
            np.dot(X[cand], XT, out=D)
            D *= -2.0
            D += x2[None, :]
            D += x2[cand][:, None]
            np.maximum(D, 0.0, out=D)
            np.minimum(D, d2[None, :], out=D)
        best = int(np.argmin(D.sum(1)))
        idx[j] = cand[best]
        d2 = D[best].copy()
    return X[idx].copy()
