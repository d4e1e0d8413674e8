"""One call from a point cloud to its heat-kernel eigenpairs."""

from __future__ import annotations

import numpy as np

from .._chunks import is_dask_array, is_zarr_array
from .._validation import check_option, check_points
from ..backends import resolve_backend
from ..graph import build_cross_graph, build_dense_graph, build_nystrom_graph
from ..graph.dense import bandwidth_neighbour_count, neighbour_bandwidth
from .dense import glgp_eigenpairs, glgp_eigenpairs_lazy, nystrom_eigenpairs
from .eigenpairs import Eigenpairs
from .flgp import flgp_eigenpairs

__all__ = ["compute_eigenpairs", "default_n_induced", "default_n_eigenpairs"]

EIGENPAIR_METHODS = ("flgp", "glgp", "nystrom")


def default_n_induced(n_samples: int) -> int:
    """``s = min(n, max(10, min(1000, n // 4)))``: a quarter of the cloud, at least 10 and
    at most 1000 induced points."""
    return int(min(n_samples, max(10, min(1000, n_samples // 4))))


def default_n_eigenpairs(n_induced: int) -> int:
    """``M = min(100, s - 1)``."""
    return int(max(1, min(100, n_induced - 1)))


def compute_eigenpairs(X, *, method: str = "flgp", n_induced: int | None = None,
                       n_eigenpairs: int | None = None, n_neighbors: int = 3,
                       subsample: str = "kmeans", kernel: str = "lae",
                       bandwidth: float | None = None, bandwidth_scale: float = 1.0,
                       lae_regularization: float = 1e-3, spectrum: str = "one_step",
                       random_state=None, backend: str = "auto", induced_points=None,
                       chunk_size: int | None = None) -> Eigenpairs:
    """Heat-kernel eigenpairs of the cloud ``X``.

    Parameters
    ----------
    X : array-like, dask array or zarr array (n_samples, n_features)
        A dask or zarr array runs the Dask engine (FLGP only; ``pip install
        'flgp[dask]'``): the passes over the points are Dask tasks on the active scheduler
        and the eigenvectors stay lazy (:attr:`Eigenpairs.eigenvectors` is a dask array).
    method : {"flgp", "glgp", "nystrom"}, default="flgp"
    n_induced : int, optional
        ``s``; default :func:`default_n_induced` (ignored by GLGP).
    n_eigenpairs : int, optional
        ``M``; default :func:`default_n_eigenpairs`.
    n_neighbors : int, default=3
        ``r`` (FLGP). GLGP and Nyström keep every pair; their default-bandwidth rule
        averages over ``max(n_neighbors, 10)`` nearest neighbours (the 10 capped at the
        points available), because a dense SE graph needs a wider kernel than a sparse
        r-nearest one to stay connected.
    subsample : {"kmeans", "random"}, default="kmeans"
    kernel : {"lae", "se"}, default="lae"
        FLGP cross kernel; GLGP and Nyström always use SE.
    bandwidth, bandwidth_scale, lae_regularization : see
        :func:`flgp.graph.build_cross_graph`.
    spectrum : {"one_step", "two_step"}, default="one_step"
        FLGP eigenvalue rule (see :mod:`flgp.spectral.flgp`).
    random_state : int, Generator or None
    backend : {"auto", "torch", "keops"}, default="auto"
        :mod:`flgp.backends`. FLGP: who does the distance work. GLGP: "keops" never stores
        the ``n x n`` matrix (KeOps products inside Lanczos; for GPUs). Nyström: dense
        ``s x s`` either way.
    induced_points : array-like (n_induced, n_features), optional
        FLGP: use these induced points (see :func:`flgp.graph.build_cross_graph`).
    chunk_size : int, optional
        FLGP: rows per block of the passes over the points; default from the working-memory
        budget (:func:`flgp.get_config`).

    Returns
    -------
    Eigenpairs
        Eigenvalues ascending in ``[0, 1]`` (the first 0), eigenvectors of the cloud, and
        the out-of-sample map (:meth:`Eigenpairs.extend`).

    Examples
    --------
    >>> import numpy as np
    >>> from flgp import compute_eigenpairs
    >>> from flgp.datasets import make_spiral
    >>> X, y, f = make_spiral(1000, random_state=0)
    >>> eigenpairs = compute_eigenpairs(X, n_induced=100, n_eigenpairs=20, random_state=0)
    >>> eigenpairs.eigenvalues.shape, eigenpairs.eigenvectors.shape
    ((20,), (1000, 20))
    >>> print(round(float(eigenpairs.eigenvalues[0]), 6), bool(np.all(np.diff(eigenpairs.eigenvalues) >= 0)))
    0.0 True
    >>> eigenpairs.extend(X[:3] * 1.01).shape      # eigenvectors at new points
    (3, 20)
    """
    check_option(method, "method", EIGENPAIR_METHODS)
    in_memory = not (is_dask_array(X) or is_zarr_array(X))
    if not in_memory and method != "flgp":
        raise ValueError(f"method={method!r} needs the cloud in memory (dense kernels); dask "
                         f"and zarr arrays run with method='flgp'.")
    if in_memory and method != "flgp":
        X = check_points(X)
    n = X.shape[0]
    if method == "flgp":
        if induced_points is not None:
            s = n_induced
            M = (default_n_eigenpairs(np.shape(induced_points)[0]) if n_eigenpairs is None
                 else n_eigenpairs)
        else:
            s = default_n_induced(n) if n_induced is None else n_induced
            M = default_n_eigenpairs(s) if n_eigenpairs is None else n_eigenpairs
        graph = build_cross_graph(X, n_induced=s, n_neighbors=n_neighbors,
                                  subsample=subsample, kernel=kernel, bandwidth=bandwidth,
                                  bandwidth_scale=bandwidth_scale,
                                  lae_regularization=lae_regularization,
                                  random_state=random_state, backend=backend,
                                  induced_points=induced_points, chunk_size=chunk_size)
        return flgp_eigenpairs(graph, M, spectrum=spectrum)
    s = default_n_induced(n) if n_induced is None else n_induced
    if method == "glgp":
        M = default_n_eigenpairs(n) if n_eigenpairs is None else n_eigenpairs
        r = bandwidth_neighbour_count(n_neighbors, n - 1)
        if resolve_backend(backend) == "keops":
            if bandwidth is None:
                bandwidth = neighbour_bandwidth(X, X, r, bandwidth_scale, skip_self=True)
            return glgp_eigenpairs_lazy(X, M, bandwidth=bandwidth, backend="keops")
        graph = build_dense_graph(X, bandwidth=bandwidth, n_neighbors=r,
                                  bandwidth_scale=bandwidth_scale)
        return glgp_eigenpairs(graph, M)
    M = default_n_eigenpairs(s) if n_eigenpairs is None else n_eigenpairs
    graph = build_nystrom_graph(X, n_induced=s, subsample=subsample, bandwidth=bandwidth,
                                n_neighbors=bandwidth_neighbour_count(n_neighbors, s),
                                bandwidth_scale=bandwidth_scale, random_state=random_state)
    return nystrom_eigenpairs(graph, M, X)
