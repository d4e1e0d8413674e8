r"""Dense graphs: GLGP's full ``n x n`` graph and the Nyström graph over induced points.

GLGP (Dunson et al.; He et al., appendix "The Nyström Approximation for GLGP"):

.. math:: Z_{ij} = \frac{K_{ij}}{\sum_q K_{iq} \sum_q K_{qj}},\qquad
          A_{ij} = \frac{Z_{ij}}{\sum_q Z_{iq}},\qquad L = I - A.

``A`` is similar to the symmetric ``S = D^{-1/2} Z D^{-1/2}`` (``D = diag(Z 1)``), whose
eigenvectors ``psi`` give those of ``A`` as ``D^{-1/2} psi``.

Nyström: the same construction on the ``s x s`` kernel ``K'`` among induced points, and the
``n x s`` kernel ``K^nys`` normalised by the *induced-point* column sums ``Σ_q K'_qj``.
Rows for new points use the same formulas, so a cloud point gets back its own row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validation import check_cloud, check_int, check_option, check_positive
from .cross_kernel import bandwidth_from_mean, check_bandwidth
from .induced_points import InducedPoints, kmeans_centres, random_induced_points
from .neighbors import (mean_neighbour_sq_distance, nearest_induced_points,
                        pairwise_sq_distances)

__all__ = ["DenseGraph", "build_dense_graph", "dense_graph", "NystromGraph",
           "build_nystrom_graph", "nystrom_graph", "neighbour_bandwidth",
           "bandwidth_neighbour_count", "check_dense_size"]


def _log_se(X: np.ndarray, Y: np.ndarray, bandwidth: float) -> torch.Tensor:
    Xt = torch.from_numpy(X)
    Yt = torch.from_numpy(Y)
    return pairwise_sq_distances(Xt, Yt).mul_(-1.0 / (4.0 * bandwidth * bandwidth))


def _symmetric_operator(log_k: torch.Tensor):
    """``S = D^{-1/2} Z D^{-1/2}``, ``log c`` and ``d``, in place on the one ``n x n``
    buffer (the diagonal ``exp(0) = 1`` keeps every row sum positive)."""
    K = log_k.exp_()
    c = K.sum(1)
    K.div_(c[:, None]).div_(c[None, :])          # Z
    d = K.sum(1)
    rs = torch.rsqrt(d)
    K.mul_(rs[:, None]).mul_(rs[None, :])        # S (symmetric up to rounding; eigh reads
    return K.numpy(), torch.log(c).numpy(), d.numpy()  # one triangle)


def _rows(X_new: np.ndarray, Y: np.ndarray, bandwidth: float, log_colsum: np.ndarray,
          chunk: int = 2048):
    """Yield ``(start, stop, A rows)`` for new points against the columns ``Y``."""
    if X_new.shape[1] != Y.shape[1]:          # X_new: checked (n, p) points
        raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                         f"{Y.shape[1]}.")
    lc = torch.from_numpy(log_colsum)
    for start in range(0, X_new.shape[0], chunk):
        stop = min(X_new.shape[0], start + chunk)
        logits = _log_se(X_new[start:stop], Y, bandwidth) - lc[None, :]
        yield start, stop, torch.softmax(logits, dim=1).numpy()


@dataclass
class DenseGraph:
    """GLGP's full graph on the cloud.

    Attributes
    ----------
    points : ndarray (n, p)
    bandwidth : float
    symmetric : ndarray (n, n)
        ``S``, same eigenvalues as ``A``.
    row_sums : ndarray (n,)
        ``d = Z 1``.
    log_colsum : ndarray (n,)
        ``log Σ_q K_qj``.
    """

    points: np.ndarray
    bandwidth: float
    symmetric: np.ndarray
    row_sums: np.ndarray
    log_colsum: np.ndarray

    def transition_rows(self, X_new):
        return _rows(X_new, self.points, self.bandwidth, self.log_colsum)


@dataclass
class NystromGraph:
    """Nyström graph: ``A'`` (s x s, via ``S'``) and the rule that builds ``A^nys`` rows."""

    induced: InducedPoints
    bandwidth: float
    symmetric: np.ndarray
    row_sums: np.ndarray
    log_colsum: np.ndarray
    # largest squared distance from a cloud point to its nearest induced point (for the
    # estimators' far-point warning)
    nearest_sq_max: float | None = None

    def transition_rows(self, X_new):
        return _rows(X_new, self.induced.points, self.bandwidth, self.log_colsum)

    def with_bandwidth(self, bandwidth: float) -> "NystromGraph":
        """The graph on the same induced points at another bandwidth (no pass over the
        cloud)."""
        bandwidth = check_bandwidth(bandwidth)
        U = self.induced.points
        S, log_c, d = _symmetric_operator(_log_se(U, U, bandwidth))
        return NystromGraph(induced=self.induced, bandwidth=bandwidth, symmetric=S,
                            row_sums=d, log_colsum=log_c, nearest_sq_max=self.nearest_sq_max)


def bandwidth_neighbour_count(n_neighbors: int, available: int) -> int:
    """Neighbours of the GLGP / Nyström bandwidth rule: ``max(n_neighbors, 10)``, the 10
    capped at the ``available`` ones (``n - 1`` for GLGP, ``s`` for Nyström)."""
    return max(int(n_neighbors), min(10, int(available)))


def neighbour_bandwidth(X, Y, r, scale=1.0, skip_self=False):
    """``4 eps^2 = scale * mean d^2`` over each row of ``X``'s ``r`` nearest rows of ``Y``
    (``skip_self``: ``Y`` is ``X``)."""
    return bandwidth_from_mean(mean_neighbour_sq_distance(X, Y, r, skip_self), scale)


def build_dense_graph(X, *, bandwidth: float | None = None, n_neighbors: int = 10,
                      bandwidth_scale: float = 1.0, max_samples: int = 20_000) -> DenseGraph:
    """The GLGP graph (memory ``O(n^2)``; ValueError beyond ``max_samples`` points).
    Default bandwidth: ``4 eps^2 = bandwidth_scale * mean d^2`` over each point's
    ``n_neighbors`` nearest other points."""
    X = check_cloud(X)
    n = X.shape[0]
    check_dense_size(n, max_samples)
    r = check_int(n_neighbors, "n_neighbors", low=1, high=n - 1, high_name="n_samples - 1")
    check_positive(bandwidth, "bandwidth", allow_none=True)
    check_positive(bandwidth_scale, "bandwidth_scale")
    return dense_graph(X, bandwidth=bandwidth, n_neighbors=r, bandwidth_scale=bandwidth_scale)


def check_dense_size(n: int, max_samples: int = 20_000) -> None:
    """GLGP's dense ``n x n`` matrix is refused beyond ``max_samples`` points."""
    if n > max_samples:
        raise ValueError(f"GLGP builds a dense {n} x {n} matrix ({8 * n * n / 2**30:.1f} GiB); "
                         f"it is meant for n <= {max_samples}. Use the FLGP or Nyström "
                         f"methods for larger clouds, or raise max_samples.")


def dense_graph(X: np.ndarray, *, bandwidth: float | None, n_neighbors: int,
                bandwidth_scale: float = 1.0) -> DenseGraph:
    """:func:`build_dense_graph` on a validated cloud with validated options."""
    if bandwidth is None:
        bandwidth = neighbour_bandwidth(X, X, n_neighbors, bandwidth_scale, skip_self=True)
    bandwidth = check_bandwidth(bandwidth)
    S, log_c, d = _symmetric_operator(_log_se(X, X, bandwidth))
    return DenseGraph(points=X, bandwidth=bandwidth, symmetric=S, row_sums=d, log_colsum=log_c)


def build_nystrom_graph(X, *, n_induced: int, subsample: str = "kmeans",
                        bandwidth: float | None = None, n_neighbors: int = 10,
                        bandwidth_scale: float = 1.0, random_state=None,
                        induced: InducedPoints | None = None,
                        backend: str = "auto") -> NystromGraph:
    """The Nyström-GLGP graph on ``s`` induced points (default k-means, as in the paper).
    Default bandwidth: ``4 eps^2 = bandwidth_scale * mean d^2`` over each point's
    ``n_neighbors`` nearest induced points; ``induced`` reuses given induced points."""
    X = check_cloud(X)
    n = X.shape[0]
    check_option(subsample, "subsample", ("kmeans", "random"))
    s = check_int(n_induced, "n_induced", low=2, high=n, high_name="n_samples")
    r = check_int(n_neighbors, "n_neighbors", low=1, high=s, high_name="n_induced")
    check_positive(bandwidth, "bandwidth", allow_none=True)
    check_positive(bandwidth_scale, "bandwidth_scale")
    return nystrom_graph(X, n_induced=s, subsample=subsample, bandwidth=bandwidth,
                         n_neighbors=r, bandwidth_scale=bandwidth_scale,
                         random_state=random_state, induced=induced, backend=backend)


def nystrom_graph(X: np.ndarray, *, n_induced: int, subsample: str = "kmeans",
                  bandwidth: float | None = None, n_neighbors: int = 10,
                  bandwidth_scale: float = 1.0, random_state=None,
                  induced: InducedPoints | None = None, backend: str = "auto") -> NystromGraph:
    """:func:`build_nystrom_graph` on a validated cloud with validated options."""
    if induced is not None:
        pass
    elif subsample == "random":
        induced = random_induced_points(X, n_induced, random_state)
    else:
        induced = kmeans_centres(X, n_induced, random_state=random_state, backend=backend)
    U = induced.points
    # the bandwidth rule's distances, and the cloud's reach (the nearest)
    _, sq = nearest_induced_points(X, U, n_neighbors if bandwidth is None else 1)
    if bandwidth is None:
        bandwidth = bandwidth_from_mean(float(np.mean(sq)), bandwidth_scale)
    bandwidth = check_bandwidth(bandwidth)
    S, log_c, d = _symmetric_operator(_log_se(U, U, bandwidth))
    return NystromGraph(induced=induced, bandwidth=bandwidth, symmetric=S, row_sums=d,
                        log_colsum=log_c, nearest_sq_max=float(sq[:, 0].max()))
