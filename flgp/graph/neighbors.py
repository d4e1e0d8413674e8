"""Nearest induced points: for every point, the ``r`` closest rows of a small set ``U``.

In low dimension (``p <= 16``) the search is a k-d tree (``scipy.spatial.cKDTree``, as
many workers as torch has threads). Otherwise distances come from one GEMM per chunk
(``|x|^2 - 2 x.u + |u|^2``) followed by a partial sort (``torch.topk``), so memory stays at
``chunk x s`` whatever ``n`` is. The squared distances of the selected pairs are then
recomputed exactly, in float64, from the coordinates, so the search precision never leaks
into the kernel weights.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree

from ..backends import cpu_threads, keops_nearest, pairwise_sq_distances, resolve_backend

__all__ = ["nearest_induced_points", "mean_neighbour_sq_distance", "pairwise_sq_distances",
           "KDTREE_MAX_DIM"]

# number of distance entries (rows x induced points) computed at once
_CHUNK_ENTRIES = 2_000_000
# up to this dimension a k-d tree beats brute force
KDTREE_MAX_DIM = 16


def nearest_induced_points(X: np.ndarray, U: np.ndarray, n_neighbors: int, *,
                      search_dtype=torch.float32, backend: str = "auto",
                      workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and exact squared distances of each point's ``n_neighbors`` nearest induced points.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    U : ndarray of shape (s, p)
    n_neighbors : int
        ``r``, at most ``s``.
    search_dtype : torch.dtype, default=torch.float32
        Precision of the distance GEMM used only to *rank* candidates.
    backend : {"auto", "torch", "keops"}, default="auto"
        Who ranks the candidates (:mod:`flgp.backends`); the returned squared distances are
        exact float64 whatever the backend.
    workers : int, optional
        Threads of the k-d tree query; default :func:`flgp.backends.cpu_threads` (1 when
        the caller already runs blocks in parallel).

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
        _, indices = cKDTree(U).query(X, k=r,
                                      workers=cpu_threads() if workers is None else workers)
        return _sorted_exact(X, U, np.asarray(indices, dtype=np.int64).reshape(n, r))
    # centre both sets on the induced points' mean: the GEMM identity loses digits far from 0
    centre = U.mean(axis=0, keepdims=True)
    Ut = torch.from_numpy(U - centre).to(search_dtype)
    u2 = (Ut * Ut).sum(1)
    chunk = max(1, _CHUNK_ENTRIES // max(s, 1))
    indices = np.empty((n, r), dtype=np.int64)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        Xc = torch.from_numpy(X[start:stop] - centre).to(search_dtype)
        d2 = torch.addmm(u2[None, :], Xc, Ut.T, beta=1.0, alpha=-2.0)
        if r == 1:
            idx = d2.argmin(dim=1, keepdim=True)
        else:
            idx = torch.topk(d2, r, dim=1, largest=False, sorted=False).indices
        indices[start:stop] = idx.numpy()
    return _sorted_exact(X, U, indices)


def mean_neighbour_sq_distance(X: np.ndarray, Y: np.ndarray, n_neighbors: int,
                               skip_self: bool = False) -> float:
    """The mean squared distance from each row of ``X`` to its ``n_neighbors`` nearest rows
    of ``Y`` (``skip_self``: ``Y`` is ``X`` and each row's own entry is left out) - the
    scale every data-driven Gaussian bandwidth of flgp is set from."""
    _, sq = nearest_induced_points(X, Y, int(n_neighbors) + int(skip_self))
    return float(np.mean(sq[:, 1:] if skip_self else sq))


def _sorted_exact(X: np.ndarray, U: np.ndarray, indices: np.ndarray):
    """Exact float64 squared distances of the kept pairs, each row sorted by them."""
    sq = _exact_sq_distances(X, U, indices)
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
