r"""Exact Gaussian-likelihood GP regression with a low-rank covariance (numpy, float64):
the evidence (with its gradient) and posterior of :class:`flgp.spectral.LowRankPrior`.
The sparse-precision counterpart is :mod:`flgp.precision.gaussian`.

For a covariance ``K = V D V^T + σ^2 I`` (``V`` is ``m x M``, ``D = diag(d)``), the FLGP
appendix "Scalable Gaussian process regression" (eqs. 13-14) gives, with
``Q = σ^2 I_M + D^{1/2} V^T V D^{1/2}`` and ``b = D^{1/2} V^T y``,

.. math::

    \log|K| = (m - M)\log σ^2 + \log|Q|,\qquad
    y^\top K^{-1} y = (y^\top y - b^\top Q^{-1} b) / σ^2 .

``V^T V`` and ``V^T y`` are formed once, so the negative log marginal likelihood and its
gradient cost ``O(M^3)`` per evaluation:

.. math::

    \frac{\partial(-\log p)}{\partial \log d_l} = \tfrac12 d_l\,
        \bigl[(V^\top K^{-1} V)_{ll} - (V^\top α)_l^2\bigr],\qquad
    \frac{\partial(-\log p)}{\partial \log σ^2} = \tfrac12 σ^2
        \bigl[\operatorname{tr} K^{-1} - α^\top α\bigr],

with ``α = K^{-1} y``, ``V^T K^{-1} V = (G - G S Q^{-1} S G)/σ^2`` (``G = V^T V``,
``S = D^{1/2}``), ``V^T α = (V^T y - G S Q^{-1} b)/σ^2``,
``tr K^{-1} = (m - M + σ^2 tr Q^{-1})/σ^2`` and
``α^T α = (y^T y - 2 b^T c + c^T S G S c)/σ^4``, ``c = Q^{-1} b``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

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
        self.V = np.asarray(V, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        self.m, self.M = self.V.shape
        self.G = self.V.T @ self.V
        self.Vty = self.V.T @ self.y
        self.yty = float(self.y @ self.y)

    def _factor(self, log_d, noise):
        sd = np.exp(0.5 * np.asarray(log_d, dtype=np.float64))  # no sqrt of underflowed d
        Q = sd[:, None] * self.G * sd[None, :]
        Q[np.diag_indices_from(Q)] += noise
        return sd, scipy.linalg.cho_factor(Q, lower=True, check_finite=False)

    def _value(self, log_d, log_noise: float):
        """``-log p(y)`` and what its gradient reuses: ``(nll, noise, sd, factor, b, c)``."""
        noise = math.exp(log_noise)
        sd, cf = self._factor(log_d, noise)
        b = sd * self.Vty
        c = scipy.linalg.cho_solve(cf, b, check_finite=False)
        quad = (self.yty - b @ c) / noise
        logdet = (self.m - self.M) * log_noise + 2.0 * np.log(np.diag(cf[0])).sum()
        nll = 0.5 * (quad + logdet + self.m * math.log(2 * math.pi))
        return nll, noise, sd, cf, b, c

    def value(self, log_d: np.ndarray, log_noise: float) -> float:
        """``-log p(y)``."""
        return float(self._value(log_d, log_noise)[0])

    def value_and_grad(self, log_d: np.ndarray, log_noise: float):
        """``-log p(y)``, its gradient in ``log d`` (M,) and in ``log σ^2``."""
        nll, noise, sd, cf, b, c = self._value(log_d, log_noise)
        # gradient
        SG = sd[:, None] * self.G                      # S G
        QinvSG = scipy.linalg.cho_solve(cf, SG, check_finite=False)
        VtKV_diag = (np.diag(self.G) - np.einsum("ij,ij->j", SG, QinvSG)) / noise
        Vt_alpha = (self.Vty - SG.T @ c) / noise
        g_logd = 0.5 * sd * sd * (VtKV_diag - Vt_alpha ** 2)
        Qinv_trace = np.trace(scipy.linalg.cho_solve(cf, np.eye(self.M), check_finite=False))
        tr_kinv = (self.m - self.M + noise * Qinv_trace) / noise
        Sc = sd * c
        a2 = (self.yty - 2.0 * b @ c + Sc @ self.G @ Sc) / noise ** 2
        g_lognoise = 0.5 * noise * (tr_kinv - a2)
        return float(nll), g_logd, float(g_lognoise)

    def posterior(self, log_d: np.ndarray, noise: float):
        """``(S, mean, cov)`` of the weights ``u`` in ``f(x) = v(x) S u``, ``S = D^{1/2}``."""
        sd, cf = self._factor(log_d, noise)
        mean = scipy.linalg.cho_solve(cf, sd * self.Vty, check_finite=False)
        cov = noise * scipy.linalg.cho_solve(cf, np.eye(self.M), check_finite=False)
        return sd, mean, 0.5 * (cov + cov.T)

    def ceiling(self, noise_range: tuple[float, float], rtol: float = 1e-10) -> float:
        r"""The (attained) maximum of ``log p(y)`` over every covariance ``V S V^T + σ^2 I``,
        ``S`` any PSD ``M x M`` matrix and ``σ^2`` in ``noise_range = (lo, hi)``: a bound
        over every diffusion time, family and amplitude of one eigenbasis; ``+inf`` when
        ``V`` spans ``y``. ValueError unless ``0 < lo <= hi < inf``.

        With ``W`` and ``E`` the squared norms of ``y``'s projections on ``V``'s range
        (rank ``r``) and its complement, the best ``S`` puts variance ``max(W, σ^2)``
        along the projection, giving ``-(h + m log 2π + (m - 1) log σ^2 + E / σ^2) / 2``
        with ``h = 1 + log W`` (``W ≥ σ^2``) or ``W / σ^2 + log σ^2``; concave in
        ``log σ^2`` on each side of ``W``, it peaks at ``E / (m - 1)``, ``(E + W) / m`` or
        an end."""
        lo, hi = (float(v) for v in noise_range)
        if not (0.0 < lo <= hi < np.inf):
            raise ValueError(f"noise_range must be 0 < lo <= hi < inf; got {noise_range!r}.")
        evals, evecs = np.linalg.eigh(self.G)
        keep = evals > rtol * max(float(evals[-1]), np.finfo(float).tiny)
        r = int(keep.sum())
        proj = evecs[:, keep].T @ self.Vty
        W = float(np.sum(proj ** 2 / evals[keep]))
        E = self.yty - W
        m = self.m
        if r >= m or E <= 1e-12 * self.yty:
            return np.inf
        W = max(W, np.finfo(float).tiny)

        def bound(s2):
            h = 1.0 + math.log(W) if W >= s2 else W / s2 + math.log(s2)
            return -0.5 * (m * math.log(2 * math.pi) + (m - 1) * math.log(s2) + h + E / s2)

        below = [min(max(E / (m - 1), lo), min(W, hi))] if lo <= W else []
        above = [min(max((E + W) / m, max(W, lo)), hi)] if W <= hi else []
        return max(bound(s2) for s2 in (lo, hi, *below, *above))
