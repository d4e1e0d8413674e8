"""The FLGP graph of a point cloud: induced points, r-nearest sparse kernel, transition.

:func:`build_cross_graph` runs steps 1-4 of He et al.'s Algorithm 1 and returns a
:class:`CrossGraph`, which also extends the transition to new points with exactly the same
arithmetic (so a point of the cloud gets back its own row).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..backends import BACKENDS
from .._validation import (check_duplicates, check_int, check_option, check_points,
                           check_positive)
from .cross_kernel import default_bandwidth, lae_weights, se_log_weights
from .landmarks import Landmarks, kmeans_centres, random_landmarks
from .neighbors import nearest_landmarks
from .transition import CrossTransition, cross_transition, transition_rows

__all__ = ["CrossGraph", "build_cross_graph"]

SUBSAMPLE_METHODS = ("kmeans", "random")
KERNELS = ("se", "lae")


@dataclass
class CrossGraph:
    """Sparse two-step random-walk graph between a cloud ``X`` (n x p) and ``U`` (s x p).

    Attributes
    ----------
    landmarks : Landmarks
    kernel : {"se", "lae"}
    n_neighbors : int
        ``r``.
    bandwidth : float or None
        SE ``eps`` in ``exp(-d^2 / (4 eps^2))``; None for LAE.
    indices, sq_distances : ndarray (n, r)
        Each point's nearest induced points and squared distances to them.
    sizes : ndarray (s,) or None
        k-means cluster sizes ``n_j`` (None for random subsampling).
    transition : CrossTransition
        ``A`` and ``Λ``.
    log_colsum : ndarray (s,)
        ``log Σ_q K_qj`` over the cloud.
    """

    landmarks: Landmarks
    kernel: str
    n_neighbors: int
    bandwidth: float | None
    indices: np.ndarray
    sq_distances: np.ndarray
    sizes: np.ndarray | None
    transition: CrossTransition
    log_colsum: np.ndarray
    lae_regularization: float = 0.0
    backend: str = "auto"

    @property
    def n_samples(self) -> int:
        return self.indices.shape[0]

    @property
    def n_induced(self) -> int:
        return self.landmarks.points.shape[0]

    def _log_sizes(self):
        return None if self.sizes is None else np.log(self.sizes.astype(np.float64))

    def with_bandwidth(self, bandwidth: float) -> "CrossGraph":
        """Same induced points and neighbours, new SE bandwidth (cost O(n r))."""
        if self.kernel != "se":
            raise ValueError("with_bandwidth applies to the 'se' kernel only.")
        bandwidth = check_positive(bandwidth, "bandwidth")
        log_k = se_log_weights(self.sq_distances, bandwidth)
        transition, log_colsum = cross_transition(log_k, self.indices, self.n_induced,
                                                  self.sizes)
        return replace(self, bandwidth=bandwidth, transition=transition, log_colsum=log_colsum)

    def transition_rows(self, X_new: np.ndarray, return_sq: bool = False):
        """Indices and values of ``a(x)``, the transition rows of new points to ``U``
        (``return_sq``: also the squared distances to those induced points, nearest
        first)."""
        X_new = check_points(X_new, name="X", min_samples=1)
        if X_new.shape[1] != self.landmarks.points.shape[1]:
            raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                             f"{self.landmarks.points.shape[1]}.")
        idx, sq = nearest_landmarks(X_new, self.landmarks.points, self.n_neighbors,
                                    backend=self.backend)
        log_k = self._log_kernel(X_new, idx, sq)
        rows = transition_rows(log_k, idx, self.log_colsum, self._log_sizes())
        return (idx, rows, sq) if return_sq else (idx, rows)

    def _log_kernel(self, X, idx, sq):
        if self.kernel == "se":
            return se_log_weights(sq, self.bandwidth)
        with np.errstate(divide="ignore"):
            return np.log(lae_weights(X, self.landmarks.points, idx,
                                      regularization=self.lae_regularization))


def build_cross_graph(X, *, n_induced: int, n_neighbors: int = 3, subsample: str = "kmeans",
                      kernel: str = "lae", bandwidth: float | None = None,
                      bandwidth_scale: float = 1.0, lae_regularization: float = 1e-3,
                      random_state=None, kmeans_iter: int | None = None,
                      backend: str = "auto") -> CrossGraph:
    """Steps 1-4 of FLGP: induced points, sparse cross kernel, ``Z``, ``A`` and ``Λ``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The whole cloud (labelled and unlabelled points).
    n_induced : int
        ``s``, number of induced points (``2 <= s <= n``).
    n_neighbors : int, default=3
        ``r``, induced points kept per row (``r <= s``).
    subsample : {"kmeans", "random"}, default="kmeans"
    kernel : {"lae", "se"}, default="lae"
    bandwidth : float, optional
        SE ``eps``; default from the data, ``4 eps^2 = bandwidth_scale * mean d^2``
        (see :func:`flgp.graph.cross_kernel.default_bandwidth`).
    bandwidth_scale : float, default=1.0
        The multiplier ``a`` of that rule.
    lae_regularization : float, default=1e-3
        ``γ`` of the LAE local Gram ``G + γ tr(G) I`` (see
        :func:`flgp.graph.cross_kernel.lae_weights`); 0 is the paper's exact LAE. Exact LAE
        gives a point that coincides with an induced point (every induced point under random
        subsampling) weight 1 on it alone, which splits the graph into many pieces.
    random_state : int, Generator or None
    backend : {"auto", "torch", "keops"}, default="auto"
        Who does the distance work (k-means assignments, nearest induced points); see
        :mod:`flgp.backends`.
    """
    X = check_points(X)
    n = X.shape[0]
    check_option(subsample, "subsample", SUBSAMPLE_METHODS)
    check_option(kernel, "kernel", KERNELS)
    s = check_int(n_induced, "n_induced", low=2, high=n, high_name="n_samples",
                  fix="Use at most as many induced points as there are points.")
    r = check_int(n_neighbors, "n_neighbors", low=1, high=s, high_name="n_induced",
                  fix="Each point can keep at most n_induced nearest induced points.")
    check_positive(bandwidth, "bandwidth", allow_none=True)
    check_positive(bandwidth_scale, "bandwidth_scale")
    if not (np.isfinite(lae_regularization) and lae_regularization >= 0):
        raise ValueError(f"lae_regularization must be a finite number >= 0; got "
                         f"{lae_regularization}.")
    check_option(backend, "backend", BACKENDS)
    check_duplicates(X)
    if subsample == "random":
        landmarks = random_landmarks(X, s, random_state)
    else:
        landmarks = kmeans_centres(X, s, random_state=random_state, n_iter=kmeans_iter,
                                   backend=backend)
    idx, sq = nearest_landmarks(X, landmarks.points, r, backend=backend)
    sizes = None
    if subsample == "kmeans":
        sizes = np.bincount(idx[:, 0], minlength=s)
    if kernel == "se":
        if bandwidth is None:
            bandwidth = default_bandwidth(sq, bandwidth_scale)
        log_k = se_log_weights(sq, bandwidth)
    else:
        bandwidth = None
        with np.errstate(divide="ignore"):
            log_k = np.log(lae_weights(X, landmarks.points, idx,
                                       regularization=lae_regularization))
    transition, log_colsum = cross_transition(log_k, idx, s, sizes)
    return CrossGraph(landmarks=landmarks, kernel=kernel, n_neighbors=r, bandwidth=bandwidth,
                      indices=idx, sq_distances=sq, sizes=sizes, transition=transition,
                      log_colsum=log_colsum, lae_regularization=float(lae_regularization),
                      backend=backend)
