"""The low-rank prior ``K = V diag(w) Vᵀ`` behind the :class:`flgp.prior.GraphPrior`
interface: ``V`` eigenvector rows (of :class:`~flgp.spectral.Eigenpairs`, or an array),
``w`` the prior weights (:func:`flgp.spectral.families.spectral_weights`); products skip
the columns of weight 0.
"""

from __future__ import annotations

import numpy as np

from ..prior import GraphPrior, as_row_indices
from .families import active_columns, spectral_weights
from .gaussian import LowRankGaussianEvidence

__all__ = ["LowRankPrior"]


class LowRankPrior(GraphPrior):
    """``K = V diag(weights) Vᵀ``.

    Parameters
    ----------
    weights : ndarray (M,)
        Non-negative prior weights of the eigenpairs' columns (ValueError unless 1-d).
    eigenpairs : Eigenpairs or ndarray (n, M), optional
        Where the rows of ``V`` come from for the interface's row indices. None: only
        :meth:`gram` and :meth:`variances_of`, which take rows.

    Examples
    --------
    >>> import numpy as np
    >>> V = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 3)))[0]
    >>> prior = LowRankPrior(np.array([1.0, 0.5, 0.1]), V)
    >>> K = V @ np.diag([1.0, 0.5, 0.1]) @ V.T
    >>> bool(np.allclose(prior.labelled_covariance([0, 2]), K[np.ix_([0, 2], [0, 2])]))
    True
    """

    def __init__(self, weights, eigenpairs=None):
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 1:
            raise ValueError(f"weights must be a 1-d array, one prior weight an "
                             f"eigenpair; got shape {self.weights.shape}.")
        self.eigenpairs = eigenpairs

    @classmethod
    def of_family(cls, eigenpairs, t, amplitude: float = 1.0, **family):
        """``amplitude · Σ w(λ_l) v_l v_lᵀ`` of a spectral family at diffusion time ``t``
        (the heat kernel by default; ``family=``, ``nu=``: see
        :func:`~flgp.spectral.families.spectral_weights`)."""
        return cls(float(amplitude) * spectral_weights(eigenpairs, t, **family), eigenpairs)

    @property
    def n_points(self) -> int:
        if self.eigenpairs is None:
            raise ValueError("this LowRankPrior holds weights only: pass eigenpairs (or "
                             "an array of eigenvector rows) to index points.")
        if isinstance(self.eigenpairs, np.ndarray):
            return self.eigenpairs.shape[0]
        return self.eigenpairs.n_samples

    def _vectors(self, rows) -> np.ndarray:
        if isinstance(self.eigenpairs, np.ndarray):
            return self.eigenpairs[rows]
        return self.eigenpairs.eigenvector_rows(rows)

    # -- on eigenvector rows (any points) --------------------------------------------------
    def gram(self, V1: np.ndarray, V2: np.ndarray) -> np.ndarray:
        """``V1 diag(w) V2ᵀ``: the prior covariance between points with rows ``V1``, ``V2``."""
        V1, w, V2 = active_columns(V1, self.weights, V2)
        return (V1 * w) @ V2.T

    def variances_of(self, V: np.ndarray) -> np.ndarray:
        """``diag(V diag(w) Vᵀ)``: the prior variances of the points with rows ``V``."""
        if V.ndim != 2 or V.shape[1] != self.weights.size:
            raise ValueError(f"V must hold eigenvector rows of {self.weights.size} columns "
                             f"(one a weight); got shape {V.shape}.")
        return (V * V) @ self.weights

    # -- the interface: rows of the fitted cloud -------------------------------------------
    def cross_covariance(self, labelled, rows=None, weights=None) -> np.ndarray:
        n = self.n_points
        labelled = as_row_indices(labelled, n)
        right = (self._vectors(labelled) * self.weights).T            # (M, m): diag(w) V_lᵀ
        if weights is not None:
            right = right @ np.asarray(weights, dtype=np.float64)
        if rows is None and not isinstance(self.eigenpairs, np.ndarray):
            return self.eigenpairs.map_chunks(lambda V, _: V @ right,
                                              n_columns=right.shape[1])
        return self._vectors(as_row_indices(rows, n)) @ right

    def marginal_variances(self, rows=None) -> np.ndarray:
        n = self.n_points
        if rows is None and not isinstance(self.eigenpairs, np.ndarray):
            w = self.weights
            return self.eigenpairs.map_chunks(lambda V, _: (V * V) @ w)
        return self.variances_of(self._vectors(as_row_indices(rows, n)))

    # -- the Gaussian evidence and posterior in weight space ---------------------------------
    def _weight_space(self, labelled, y, noise):
        """``(evidence engine, log weights, noise, kept columns)`` over the columns of
        positive weight, or None when there are none (``K = 0``)."""
        labelled, y, noise = self._checked_targets(labelled, y, noise)
        keep = np.flatnonzero(self.weights > 0)
        if keep.size == 0:
            return None
        ev = LowRankGaussianEvidence(self._vectors(labelled)[:, keep], y)
        return ev, np.log(self.weights[keep]), noise, keep

    def log_evidence(self, labelled, y, noise) -> float:
        """``log N(y | 0, K_ll + noise I)`` in ``O(m M² + M³)``
        (:class:`flgp.spectral.gaussian.LowRankGaussianEvidence`)."""
        space = self._weight_space(labelled, y, noise)
        if space is None:
            return super().log_evidence(labelled, y, noise)
        ev, log_w, noise, _ = space
        return -ev.value(log_w, np.log(noise))

    def posterior(self, labelled, y, noise, rows=None):
        """The Gaussian posterior ``(mean, variance)`` at ``rows`` through the weights
        ``u`` of ``f = F u``, ``F = V diag(√w)``: mean ``F E[u]``, variance
        ``diag(F Cov[u] Fᵀ)``."""
        space = self._weight_space(labelled, y, noise)
        if space is None:
            return super().posterior(labelled, y, noise, rows)
        ev, log_w, noise, keep = space
        sd, w_mean, w_cov = ev.posterior(log_w, noise)

        def moments(V, _=None):
            F = V[:, keep] * sd
            out = np.empty((F.shape[0], 2))
            out[:, 0] = F @ w_mean
            out[:, 1] = np.maximum(np.einsum("ij,ij->i", F @ w_cov, F), 0.0)
            return out

        if rows is None and not isinstance(self.eigenpairs, np.ndarray):
            out = self.eigenpairs.map_chunks(moments, n_columns=2)
        else:
            out = moments(self._vectors(as_row_indices(rows, self.n_points)))
        return out[:, 0], out[:, 1]
