"""One interface for the Gaussian priors ``f ~ N(0, K)`` the estimators put on the ``n``
points of a cloud (or the nodes of a graph). Two representations:

* **low rank** - ``K = V diag(w) Vᵀ`` over the top ``M`` eigenpairs of an induced-point
  graph (:class:`flgp.spectral.LowRankPrior`);
* **sparse precision** - ``K = A P Q⁻¹ P`` with ``Q`` the graph Matérn precision of the
  cloud's own graph, untruncated (:class:`flgp.precision.SparsePrecisionPrior`).

Both provide :meth:`GraphPrior.cross_covariance` (``K[rows, labelled]``, or that block
times weights), :meth:`GraphPrior.labelled_covariance` (``K[labelled, labelled]``, used by
EP and Laplace), :meth:`GraphPrior.marginal_variances` (``diag K``) and
:meth:`GraphPrior.log_evidence` (``log N(y | 0, K_ll + σ² I)``); the base class derives
the Gaussian posterior (:meth:`GraphPrior.posterior`). Indices are rows of the fitted
cloud.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular

__all__ = ["GraphPrior", "as_row_indices"]

_LOG_2PI = float(np.log(2.0 * np.pi))


def as_row_indices(rows, n: int) -> np.ndarray:
    """``rows`` as int64 indices into ``range(n)`` (None: all of them)."""
    if rows is None:
        return np.arange(n, dtype=np.int64)
    rows = np.asarray(rows)
    if rows.dtype == bool:
        if rows.shape != (n,):
            raise ValueError(f"a boolean row mask needs {n} entries; got shape {rows.shape}.")
        return np.flatnonzero(rows).astype(np.int64)
    rows = rows.astype(np.int64, copy=False).ravel()
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise IndexError(f"row indices must lie in [0, {n}); got {rows.min()}..{rows.max()}.")
    return rows


class GraphPrior(ABC):
    """A zero-mean Gaussian prior ``f ~ N(0, K)`` on ``n_points`` points (see the module notes).
    Subclasses give :attr:`n_points`, :meth:`cross_covariance` and :meth:`marginal_variances`."""

    @property
    @abstractmethod
    def n_points(self) -> int:
        """The number of points the prior lives on."""

    @abstractmethod
    def cross_covariance(self, labelled, rows=None, weights=None) -> np.ndarray:
        """``K[rows, labelled]`` (``(r, m)``; ``rows`` None: every point), or with ``weights``
        (``(m, c)``) the product ``K[rows, labelled] @ weights`` (``(r, c)``)."""

    @abstractmethod
    def marginal_variances(self, rows=None) -> np.ndarray:
        """``diag K`` at ``rows`` (None: every point)."""

    def labelled_covariance(self, labelled) -> np.ndarray:
        """``K[labelled, labelled]`` (``(m, m)``, symmetric to the last bit)."""
        labelled = as_row_indices(labelled, self.n_points)
        K = np.asarray(self.cross_covariance(labelled, rows=labelled), dtype=np.float64)
        return 0.5 * (K + K.T)

    def _checked_targets(self, labelled, y, noise):
        """``(labelled, y, noise)`` checked: row indices, one float target each, a finite positive
        noise variance."""
        labelled = as_row_indices(labelled, self.n_points)
        y = np.asarray(y, dtype=np.float64).ravel()
        if y.shape != labelled.shape:
            raise ValueError(f"y needs one value per labelled point ({labelled.size}); "
                             f"got {y.size}.")
        noise = float(noise)
        if not (np.isfinite(noise) and noise > 0):
            raise ValueError(f"noise must be a finite positive variance; got {noise!r}.")
        return labelled, y, noise

    def _labelled_system(self, labelled, y, noise):
        """``(labelled, y, Cholesky factor of K_ll + noise I)``, the arguments checked."""
        labelled, y, noise = self._checked_targets(labelled, y, noise)
        K = self.labelled_covariance(labelled)
        K[np.diag_indices_from(K)] += noise
        return labelled, y, cho_factor(K, lower=True, check_finite=False)

    def log_evidence(self, labelled, y, noise) -> float:
        """``log N(y | 0, K_ll + noise I)``: the marginal likelihood of ``y`` at ``labelled`` under
        Gaussian noise of variance ``noise``."""
        _, y, factor = self._labelled_system(labelled, y, noise)
        alpha = cho_solve(factor, y, check_finite=False)
        logdet = 2.0 * float(np.sum(np.log(np.diag(factor[0]))))
        return float(-0.5 * (y @ alpha) - 0.5 * logdet - 0.5 * y.size * _LOG_2PI)

    def posterior(self, labelled, y, noise, rows=None):
        """Gaussian posterior ``(mean, variance)`` of ``f`` at ``rows`` given ``y`` at
        ``labelled``: ``K_rl (K_ll + σ²I)⁻¹ y`` and
        ``diag K_rr - diag(K_rl (K_ll + σ²I)⁻¹ K_lr)``."""
        labelled, y, factor = self._labelled_system(labelled, y, noise)
        rows = as_row_indices(rows, self.n_points)
        K_rl = np.asarray(self.cross_covariance(labelled, rows=rows), dtype=np.float64)
        mean = K_rl @ cho_solve(factor, y, check_finite=False)
        half = solve_triangular(factor[0], K_rl.T, lower=True, check_finite=False)
        var = self.marginal_variances(rows) - np.einsum("ij,ij->j", half, half)
        return mean, np.maximum(var, 0.0)
