"""A fitted sparse-precision posterior on a graph's nodes, and its values at other points.

A graph Matérn prior lives on the nodes of a :class:`~flgp.graph.PointGraph`; the posterior
mean and variance are known there (:mod:`flgp.precision.gaussian`). At any other point the
value is interpolated from the nearest nodes: weights ``1 / (d² + δ²)`` over the
``min(2^p, 8)`` nearest nodes (``δ`` a millionth of the graph's spacing, so that a point
on a node takes that node's values and the interpolant is continuous), the mean as the
weighted mean, the standard deviation as the weighted mean of the nodes' standard
deviations - the sd of the interpolated value if the nodes' errors were perfectly
correlated, an upper bound on it whatever their correlation (conservative between
nodes, exact on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NodePosterior"]


@dataclass
class NodePosterior:
    """Posterior mean and standard deviation of ``f`` at a graph's nodes (in any units),
    with the interpolation to other points described in the module notes.

    Attributes
    ----------
    points : ndarray (n, p)
        The nodes' coordinates.
    mean, sd : ndarray (n,)
    spacing : float
        The graph's spacing (:class:`~flgp.graph.PointGraph`).
    """

    points: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    spacing: float

    def __post_init__(self):
        self._tree = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tree"] = None                 # rebuilt at first use
        return state

    def _index(self):
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self.points)
        return self._tree

    def nearest_sq_distances(self, X: np.ndarray) -> np.ndarray:
        """Squared distance from each row of ``X`` to its nearest node."""
        d, _ = self._index().query(np.asarray(X, dtype=np.float64), k=1)
        return np.asarray(d, dtype=np.float64) ** 2

    def at(self, X: np.ndarray):
        """``(mean, sd)`` at the rows of ``X`` (see the module notes)."""
        X = np.asarray(X, dtype=np.float64)
        n = self.points.shape[0]
        k = int(min(n, 8, 2 ** self.points.shape[1]))
        dist, idx = self._index().query(X, k=k)
        dist = np.asarray(dist, dtype=np.float64).reshape(X.shape[0], k)
        idx = np.asarray(idx, dtype=np.int64).reshape(X.shape[0], k)
        delta = 1e-6 * self.spacing
        w = 1.0 / (dist * dist + delta * delta)
        w /= w.sum(axis=1, keepdims=True)
        return (w * self.mean[idx]).sum(axis=1), (w * self.sd[idx]).sum(axis=1)
