"""One call from a point cloud to its heat-kernel eigenpairs."""

from __future__ import annotations

import numpy as np

from .._chunks import is_dask_array, is_zarr_array
from .._validation import check_cloud, check_int, check_option, check_positive
from ..backends import resolve_backend
from ..graph.cross_graph import validate_cloud
from ..graph.dense import bandwidth_neighbour_count, check_dense_size
from .candidates import eigenpair_candidates
from .eigenpairs import Eigenpairs

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
        A dask or zarr array runs the Dask engine (FLGP only, else ValueError; ``pip
        install 'flgp[dask]'``); the eigenvectors then stay lazy.
    method : {"flgp", "glgp", "nystrom"}, default="flgp"
    n_induced : int, optional
        ``s``; default :func:`default_n_induced` (ignored by GLGP).
    n_eigenpairs : int, optional
        ``M``; default :func:`default_n_eigenpairs`.
    n_neighbors : int, default=3
        ``r`` (FLGP). GLGP's and Nyström's bandwidth rule averages over
        ``max(n_neighbors, 10)`` neighbours (:func:`flgp.graph.dense.bandwidth_neighbour_count`).
    subsample : {"kmeans", "random"}, default="kmeans"
    kernel : {"lae", "se"}, default="lae"
        FLGP cross kernel; GLGP and Nyström always use SE.
    bandwidth, bandwidth_scale, lae_regularization : see
        :func:`flgp.graph.build_cross_graph`.
    spectrum : {"one_step", "two_step"}, default="one_step"
        FLGP eigenvalue rule (see :mod:`flgp.spectral.flgp`).
    random_state : int, Generator or None
    backend : {"auto", "torch", "keops"}, default="auto"
        :mod:`flgp.backends`; with "keops" GLGP never stores the ``n x n`` matrix (for GPUs).
    induced_points, chunk_size : optional
        FLGP: see :func:`flgp.graph.build_cross_graph`.

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
    >>> lam = eigenpairs.eigenvalues
    >>> print(round(float(lam[0]), 6), bool(np.all(np.diff(lam) >= 0)))
    0.0 True
    >>> eigenpairs.extend(X[:3] * 1.01).shape      # eigenvectors at new points
    (3, 20)
    """
    check_option(method, "method", EIGENPAIR_METHODS)
    in_memory = not (is_dask_array(X) or is_zarr_array(X))
    if not in_memory and method != "flgp":
        raise ValueError(f"method={method!r} needs the cloud in memory (dense kernels); dask "
                         f"and zarr arrays run with method='flgp'.")
    check_positive(bandwidth, "bandwidth", allow_none=True)
    check_positive(bandwidth_scale, "bandwidth_scale")
    if method == "flgp":                 # the graph options are checked with the cloud's size
        X = validate_cloud(X)
        n = X.shape[0]
        if induced_points is not None:
            s = n_induced
            M = (default_n_eigenpairs(np.shape(induced_points)[0]) if n_eigenpairs is None
                 else n_eigenpairs)
        else:
            s = default_n_induced(n) if n_induced is None else n_induced
            M = default_n_eigenpairs(s) if n_eigenpairs is None else n_eigenpairs
    elif method == "nystrom":
        X = check_cloud(X)
        n = X.shape[0]
        check_option(subsample, "subsample", ("kmeans", "random"))
        s = check_int(default_n_induced(n) if n_induced is None else n_induced, "n_induced",
                      low=2, high=n, high_name="n_samples")
        check_int(bandwidth_neighbour_count(n_neighbors, s), "n_neighbors", low=1, high=s,
                  high_name="n_induced")
        M = default_n_eigenpairs(s) if n_eigenpairs is None else n_eigenpairs
    else:
        keops = resolve_backend(backend) == "keops"
        X = check_cloud(X, min_samples=3 if keops else 2)
        n = X.shape[0]
        s = None
        M = default_n_eigenpairs(n) if n_eigenpairs is None else n_eigenpairs
        if keops:
            M = check_int(M, "n_eigenpairs", low=1, high=n - 2, high_name="n_samples - 2")
        else:
            check_dense_size(n)
        check_int(bandwidth_neighbour_count(n_neighbors, n - 1), "n_neighbors", low=1,
                  high=n - 1, high_name="n_samples - 1")
    (_, make), = eigenpair_candidates(
        X, method, (bandwidth_scale,), n_induced=s, n_eigenpairs=M, n_neighbors=n_neighbors,
        subsample=subsample, kernel=kernel, bandwidth=bandwidth,
        lae_regularization=lae_regularization, spectrum=spectrum, random_state=random_state,
        backend=backend, induced_points=induced_points, chunk_size=chunk_size)
    return make()
