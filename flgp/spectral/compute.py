"""One call from a point cloud to its heat-kernel eigenpairs."""

from __future__ import annotations

from .._validation import check_option, check_points
from ..backends import resolve_backend
from ..graph import build_cross_graph, build_dense_graph, build_nystrom_graph
from ..graph.dense import bandwidth_neighbour_count, neighbour_bandwidth
from .dense import glgp_eigenpairs, glgp_eigenpairs_lazy, nystrom_eigenpairs
from .eigenpairs import Eigenpairs
from .flgp import flgp_eigenpairs

__all__ = ["compute_eigenpairs", "default_n_induced", "default_n_eigenpairs"]

METHODS = ("flgp", "glgp", "nystrom")


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
                       random_state=None, backend: str = "auto") -> Eigenpairs:
    """Heat-kernel eigenpairs of the cloud ``X``.

    Parameters
    ----------
    X : array-like (n_samples, n_features)
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
    """
    check_option(method, "method", METHODS)
    X = check_points(X)
    n = X.shape[0]
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
    if method == "nystrom":
        graph = build_nystrom_graph(X, n_induced=s, subsample=subsample, bandwidth=bandwidth,
                                    n_neighbors=bandwidth_neighbour_count(n_neighbors, s),
                                    bandwidth_scale=bandwidth_scale, random_state=random_state)
        return nystrom_eigenpairs(graph, M, X)
    graph = build_cross_graph(X, n_induced=s, n_neighbors=n_neighbors, subsample=subsample,
                              kernel=kernel, bandwidth=bandwidth,
                              bandwidth_scale=bandwidth_scale,
                              lae_regularization=lae_regularization, random_state=random_state,
                              backend=backend)
    return flgp_eigenpairs(graph, M, spectrum=spectrum)
