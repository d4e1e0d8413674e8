r"""Exact Gaussian-likelihood GP regression with a low-rank covariance (torch, float64).

For a covariance ``K = Φ Φ^T`` with ``Φ = V D^{1/2}`` (``m x M``; ``D`` diagonal) plus noise
``σ^2 I``, the FLGP appendix "Scalable Gaussian process regression" (eqs. 13-14) gives

.. math::

    Q = σ^2 I_M + D^{1/2} V^\top V D^{1/2},\quad
    \log|K + σ^2 I| = (m - M)\log σ^2 + \log|Q|,\quad
    y^\top (K+σ^2 I)^{-1} y = (y^\top y - b^\top Q^{-1} b) / σ^2,\ b = D^{1/2} V^\top y.

``V^T V`` and ``V^T y`` are formed once, so each evaluation of the marginal likelihood
costs ``O(M^3)`` whatever ``m`` is; the posterior over the weights gives predictions.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["LowRankGaussianEvidence"]


class LowRankGaussianEvidence:
    """Negative log marginal likelihood of ``y ~ N(0, V diag(d) V^T + σ^2 I)``.

    Parameters
    ----------
    V : ndarray (m, M)
        Unscaled features at the labelled points.
    y : ndarray (m,)
    """

    def __init__(self, V: np.ndarray, y: np.ndarray):
        self.V = torch.as_tensor(V, dtype=torch.float64)
        self.y = torch.as_tensor(y, dtype=torch.float64)
        self.m, self.M = self.V.shape
        self.VtV = self.V.T @ self.V
        self.Vty = self.V.T @ self.y
        self.yty = float(self.y @ self.y)

    def _q(self, d: torch.Tensor, noise: torch.Tensor):
        sd = torch.sqrt(d)
        Q = noise * torch.eye(self.M, dtype=torch.float64) + sd[:, None] * self.VtV * sd[None, :]
        L = torch.linalg.cholesky(Q)
        return sd, L

    def __call__(self, d: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``-log p(y)`` for prior weights ``d`` (M,) and noise variance ``σ^2``."""
        sd, L = self._q(d, noise)
        b = sd * self.Vty
        z = torch.linalg.solve_triangular(L, b[:, None], upper=False)[:, 0]
        quad = (self.yty - z @ z) / noise
        logdet = (self.m - self.M) * torch.log(noise) + 2.0 * torch.log(torch.diagonal(L)).sum()
        return 0.5 * (quad + logdet + self.m * math.log(2 * math.pi))

    def posterior(self, d: np.ndarray, noise: float):
        """Mean and covariance of the weights ``u`` in ``f(x) = v(x) D^{1/2} u``."""
        with torch.no_grad():
            d_t = torch.as_tensor(d, dtype=torch.float64)
            noise_t = torch.as_tensor(noise, dtype=torch.float64)
            sd, L = self._q(d_t, noise_t)
            b = sd * self.Vty
            mean = torch.cholesky_solve(b[:, None], L)[:, 0]
            Linv = torch.linalg.solve_triangular(L, torch.eye(self.M, dtype=torch.float64),
                                                 upper=False)
            cov = noise_t * (Linv.T @ Linv)
        return sd.numpy(), mean.numpy(), cov.numpy()
