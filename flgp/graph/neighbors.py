"""Nearest induced points: for every point, the ``r`` closest rows of a small set ``U``.

Up to ``p = 16`` the search is exact: flgp's compiled k-d tree (:func:`search_tree`) or
``scipy.spatial.cKDTree`` (:func:`kdtree_nearest`), both breaking ties by the smaller
index. Above, the induced points are ranked by ``|u|^2 / 2 - x.u`` from one float32 GEMM
per chunk (memory ``chunk x s``). Either way the kept pairs' squared distances are
recomputed exactly in float64.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree

from ..backends import (compiled, cpu_threads, keops_nearest, pairwise_sq_distances,
                        resolve_backend)

__all__ = ["nearest_induced_points", "mean_neighbour_sq_distance", "pairwise_sq_distances",
           "smallest_columns", "search_tree", "kdtree_nearest", "KDTREE_MAX_DIM"]

# number of distance entries (rows x induced points) computed at once
_CHUNK_ENTRIES = 2_000_000
# up to this dimension a k-d tree beats brute force
KDTREE_MAX_DIM = 16
# without a prebuilt tree, the compiled search builds one from this many query rows per
# induced point
_TREE_ROWS_PER_POINT = 8


def search_tree(U: np.ndarray, n_neighbors: int):
    """The compiled search structure of ``U`` for up to ``n_neighbors`` nearest points
    (:func:`flgp.backends.compiled.build_tree`; picklable), or None where
    :func:`nearest_induced_points` would not use it."""
    if U.shape[1] > KDTREE_MAX_DIM or not compiled.enabled():
        return None
    return compiled.build_tree(U, n_neighbors)


def nearest_induced_points(X: np.ndarray, U: np.ndarray, n_neighbors: int, *,
                           search_dtype=torch.float32, backend: str = "auto",
                           workers: int | None = None,
                           tree=None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and exact squared distances of each point's ``r`` nearest induced points.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    U : ndarray of shape (s, p)
    n_neighbors : int
        ``r``, at most ``s``.
    search_dtype : torch.dtype, default=torch.float32
        Precision of the GEMM that only *ranks* candidates (``p > 16``).
    backend : {"auto", "torch", "keops"}, default="auto"
        Who ranks the candidates (:mod:`flgp.backends`).
    workers : int, optional
        Threads of the k-d tree query; default :func:`flgp.backends.cpu_threads`.
    tree : optional
        ``U``'s :func:`search_tree`, for callers that query the same ``U`` many times
        (ValueError if built on another shape).

    Returns
    -------
    indices : ndarray of shape (n, r), int64
        Sorted by increasing distance.
    sq_distances : ndarray of shape (n, r), float64
        Exact squared distances ``||x_i - u_j||^2``.
    """
    n, s = X.shape[0], U.shape[0]
    r = int(n_neighbors)
    if resolve_backend(backend) == "keops":
        indices = keops_nearest(X, U, r)
        if indices is not None:
            return _sorted_exact(X, U, indices)
    if X.shape[1] <= KDTREE_MAX_DIM:
        if tree is not None and tree.source.shape != U.shape:
            raise ValueError(f"tree was built on {tree.source.shape[0]} points in "
                             f"{tree.source.shape[1]} dimensions, but U is {U.shape[0]} x "
                             f"{U.shape[1]}; pass search_tree(U, n_neighbors) of this U.")
        if compiled.enabled() and (tree is not None or n >= _TREE_ROWS_PER_POINT * s):
            if tree is None:
                tree = compiled.build_tree(U, r)
            return compiled.query(tree, X, r,
                                 threads=cpu_threads() if workers is None else workers)
        return kdtree_nearest(X, U, r, cpu_threads() if workers is None else workers)
    # centre both sets on the induced points' mean: the GEMM identity loses digits far from 0
    dtype = _numpy_dtype(search_dtype)
    centre = U.mean(axis=0, keepdims=True)
    Ul = np.ascontiguousarray(U - centre, dtype=dtype)
    half = 0.5 * np.einsum("ij,ij->i", Ul, Ul)
    chunk = max(1, _CHUNK_ENTRIES // max(s, 1))
    indices = np.empty((n, r), dtype=np.int64)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        # |u|^2 / 2 - x.u ranks the induced points of a row as |x - u|^2 does
        S = np.asarray(X[start:stop] - centre, dtype=dtype) @ Ul.T
        np.subtract(half, S, out=S)
        indices[start:stop] = smallest_columns(S, r)
    return _sorted_exact(X, U, indices)


def kdtree_nearest(X: np.ndarray, U: np.ndarray, r: int, workers: int):
    """``cKDTree``'s ``r`` nearest, sorted by (squared distance, index) as the compiled
    search does: ties are common on grids, so a row whose ``r``-th and ``(r+1)``-th
    distances tie is redone from a ball query."""
    n, s = X.shape[0], U.shape[0]
    k = min(r + 1, s)
    tree = cKDTree(U)
    _, idx = tree.query(X, k=k, workers=workers)
    idx = np.asarray(idx, dtype=np.int64).reshape(n, k)
    sq = _exact_sq_distances(X, U, idx)
    order = np.lexsort((idx, sq))
    idx = np.take_along_axis(idx, order, axis=1)
    sq = np.take_along_axis(sq, order, axis=1)
    if k > r:
        tied = np.flatnonzero(sq[:, r - 1] == sq[:, r])
        if tied.size:
            # every induced point at the r-th distance (a radius a little beyond it, the
            # exact distances then decide)
            radius = np.sqrt(sq[tied, r - 1]) * (1.0 + 1e-9) + 1e-300
            for row, found in zip(tied, tree.query_ball_point(X[tied], radius,
                                                               workers=workers)):
                cand = np.asarray(found, dtype=np.int64)
                d2 = _exact_sq_distances(X[row:row + 1], U, cand[None, :])[0]
                pick = np.lexsort((cand, d2))[:r]
                idx[row, :r], sq[row, :r] = cand[pick], d2[pick]
    return idx[:, :r].copy(), sq[:, :r].copy()


def smallest_columns(S: np.ndarray, r: int) -> np.ndarray:
    """Column indices of the ``r`` smallest entries of each row of ``S`` (unsorted; ``S``
    is overwritten): ``r`` masked argmins up to ``r = 8`` (faster than a top-k),
    ``argpartition`` above."""
    b = S.shape[0]
    if r > 8:
        return np.argpartition(S, r - 1, axis=1)[:, :r]
    out = np.empty((b, r), dtype=np.int64)
    rows = np.arange(b)
    for k in range(r):
        out[:, k] = S.argmin(axis=1)
        if k + 1 < r:
            S[rows, out[:, k]] = np.inf
    return out


def _numpy_dtype(dtype):
    """A numpy dtype from a numpy or torch dtype (``torch.float32`` -> ``float32``)."""
    if isinstance(dtype, torch.dtype):
        return torch.empty(0, dtype=dtype).numpy().dtype
    return np.dtype(dtype)


def mean_neighbour_sq_distance(X: np.ndarray, Y: np.ndarray, n_neighbors: int,
                               skip_self: bool = False) -> float:
    """Mean squared distance from each row of ``X`` to its ``n_neighbors`` nearest rows of
    ``Y`` (``skip_self``: ``Y`` is ``X``, own entry left out)."""
    _, sq = nearest_induced_points(X, Y, int(n_neighbors) + int(skip_self))
    return float(np.mean(sq[:, 1:] if skip_self else sq))


def _sorted_exact(X: np.ndarray, U: np.ndarray, indices: np.ndarray):
    """Exact float64 squared distances of the kept pairs, each row sorted by them."""
    sq = _exact_sq_distances(X, U, indices)
    if sq.shape[1] < 2 or bool(np.all(sq[:, 1:] >= sq[:, :-1])):
        return indices, sq
    order = np.argsort(sq, axis=1, kind="stable")
    return np.take_along_axis(indices, order, axis=1), np.take_along_axis(sq, order, axis=1)


def _exact_sq_distances(X: np.ndarray, U: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``||x_i - u_{indices[i, k]}||^2`` in float64, computed by subtraction."""
    n, r = indices.shape
    out = np.empty((n, r), dtype=np.float64)
    chunk = max(1, 4_000_000 // max(1, r * X.shape[1]))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        diff = U[indices[start:stop]] - X[start:stop, None, :]
        np.einsum("irp,irp->ir", diff, diff, out=out[start:stop])
    return out
