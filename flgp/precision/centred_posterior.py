r"""The centred graph Matérn prior's Gaussian posterior through its sparse posterior
precision: solves a class, not a label.

The least-squares classifier (:mod:`flgp.precision.classification`) regresses targets at
labelled nodes on latents ``f = P g``, ``g ~ N(0, Q_ν⁻¹)`` (unit amplitude;
``P = I - 11ᵀ/n``), with noise precision ``c``. With ``H`` the observations' rows of the
identity and ``W = HᵀH = diag(w)``, ``w`` the observations at each node, the posterior of
``g`` has the precision

.. math:: \hat Q = Q_\nu + c\,P W P, \qquad P W P = W - (w 1ᵀ + 1 wᵀ)/n + (Σw / n²)\,11ᵀ,

sparse but for a rank-two part; for targets ``B`` whose columns sum to zero the posterior
mean of ``f`` is ``c P Q̂⁻¹ B``, one solve a class. Two ways to solve:

* **factored** (``solver="cholesky"``): CHOLMOD's factor of ``Q̃ = Q_ν + cW`` on ``Q_ν``'s
  pattern, the rank-two part by Woodbury with ``U = [1, w]``; ``log|Q̂|`` exact, and
  ``log|I + c K_ll| = log|Q̂| - log|Q_ν|``;
* **iterative** (``solver="amg"``, ``ν = 1``, uniform mass): ``P`` commutes with ``Q``, so
  ``Q̂ = P Q̃ P`` on the centred vectors: CG on that subspace
  (:meth:`~flgp.precision.multigrid.ClassicalMultigrid.solve`, ``centred=True``) with the
  prior's hierarchy plus the labels' diagonal; no log-determinant.

The variances ``diag(P Q̂⁻¹ P)`` are Rao-Blackwellised Monte Carlo estimates (Sidén et al.
2018) with perturbation draws ``x = Q̂⁻¹ (R z₁ + √c P Hᵀ z₂)``, ``R Rᵀ = Q_ν``: for
``y = P x``, ``Var y_i = a²/Q̂_ii + Var E[y_i | x_-i]``, ``a = 1 - 1/n``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .iterative import matern_root_draw

__all__ = ["CentredPosterior"]


class CentredPosterior:
    """The posterior precision ``Q̂ = Q_ν + c P W P`` of a centred
    :class:`~flgp.precision.prior.SparsePrecisionPrior` (unit amplitude) with ``counts``
    observations at each node and noise precision ``precision`` (see the module notes).

    Parameters
    ----------
    prior : SparsePrecisionPrior
        Centred, of amplitude 1; ``solver="cholesky"`` (any order), or ``"amg"`` with
        ``nu=1`` on a graph of uniform mass.
    counts : array (n,)
        Observations at each node (0 where none; a node labelled twice counts 2).
    precision : float
        ``c > 0``, the noise precision of a target in the prior's units.
    """

    def __init__(self, prior, counts, precision):
        if not prior.centred or prior.amplitude != 1.0:
            raise ValueError("CentredPosterior needs a centred prior of amplitude 1.")
        w = np.asarray(counts, dtype=np.float64)
        n = prior.n_points
        if w.shape != (n,) or not (np.all(np.isfinite(w)) and np.all(w >= 0)) \
                or not w.sum() > 0:
            raise ValueError(f"counts must hold one non-negative count a node ({n}), at "
                             f"least one of them positive; got shape {w.shape}.")
        c = float(precision)
        if not (np.isfinite(c) and c > 0):
            raise ValueError(f"precision must be finite and > 0; got {precision!r}.")
        self.prior, self.counts, self.c, self.m = prior, w, c, float(w.sum())
        self.n = n
        self.factored = prior.solver == "cholesky"
        if self.factored:
            self._refactor()
            U = np.column_stack([np.ones(n), w])
            self._Y = self._factor_solve(U)
            core_inverse = np.array([[0.0, -n], [-n, -self.m]]) / c
            self._G = core_inverse + U.T @ self._Y
            core = c * np.array([[self.m / n ** 2, -1.0 / n], [-1.0 / n, 0.0]])
            self._log_det = self._log_det_tilde + float(
                np.linalg.slogdet(np.eye(2) + core @ (U.T @ self._Y))[1])
        else:
            if prior.nu != 1 or not prior._uniform_mass:
                raise ValueError("the iterative posterior solves order 1 on a graph of "
                                 "uniform mass (where P commutes with Q); factor it "
                                 "(solver='cholesky') otherwise.")
            self._multigrid = prior._amg.with_diagonal(c * w)

    # -- the factored path ---------------------------------------------------------------
    def _refactor(self) -> None:
        """Factor ``Q̃ = Q_ν + cW`` into the prior's shared factor of ``Q_ν``'s pattern
        (one numeric factorisation; the factor held by whichever posterior factored it
        last)."""
        entry = self.prior.posterior_factor()
        chol, Q = entry["factor"], entry["precision"]
        chol.factor(Q + sp.diags(self.c * self.counts, format="csc"))
        entry["holder"] = self
        self._log_det_tilde = chol.logdet()

    def _factor_solve(self, B):
        entry = self.prior.posterior_factor()
        if entry["holder"] is not self:
            self._refactor()
        return entry["factor"].solve(B)

    def _solve_hat(self, B):
        """``Q̂⁻¹ B`` (uncentred), factored path."""
        X = self._factor_solve(B)
        X -= self._Y @ np.linalg.solve(self._G, self._Y.T @ B)
        return X

    # -- what the classifier asks ------------------------------------------------------------
    def solve(self, B, tol=None) -> np.ndarray:
        """``P Q̂⁻¹ B`` for ``B`` (``(n,)`` or ``(n, k)``) whose columns sum to zero; on the
        iterative path to the relative residual ``tol`` (default the prior's)."""
        B = np.asarray(B, dtype=np.float64)
        if B.ndim not in (1, 2) or B.shape[0] != self.n:
            raise ValueError(f"B must have one row a node ({self.n}); got shape {B.shape}.")
        if self.factored:
            X = self._solve_hat(B.reshape(self.n, -1))
            X -= X.mean(axis=0)
            return X.reshape(B.shape)
        return self._multigrid.solve(B, tol=self.prior.tol if tol is None else tol,
                                     centred=True)

    def log_det_ratio(self):
        """``log|Q̂| - log|Q_ν| = log|I + c K_ll|`` (the factored path; None on the
        iterative one)."""
        if not self.factored:
            return None
        return self._log_det - self.prior.log_det_precision()

    def covariance_columns(self, nodes, tol=None) -> np.ndarray:
        """``P Q̂⁻¹ P`` at ``nodes`` (``(n, k)``): the posterior covariance of the latent
        with its value at each node, in units of the noise variance ``1/c``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        E = np.full((self.n, nodes.size), -1.0 / self.n)
        E[nodes, np.arange(nodes.size)] += 1.0
        return self.solve(E, tol=tol)

    def variances(self, n_samples: int, random_state=0, tol=None):
        """``(diag(P Q̂⁻¹ P), standard errors)`` by Rao-Blackwellised Monte Carlo with
        ``n_samples`` perturbation draws (see the module notes)."""
        prior, n, c, w = self.prior, self.n, self.c, self.counts
        rng = np.random.default_rng(random_state)
        k = int(n_samples)
        V = np.column_stack([matern_root_draw(prior.graph, prior.kappa2, prior.nu, rng)
                             for _ in range(k)])
        Z = rng.standard_normal((n, k)) * np.sqrt(c * w)[:, None]
        V += Z - Z.mean(axis=0)                      # R z₁ + √c P Hᵀ z₂
        Q = prior.precision_operator()
        ones_image = Q(np.ones((n, 1)))[:, 0]        # Q̂ 1 = Q 1
        if self.factored:
            X = self._solve_hat(V)
            shift = X.mean(axis=0)
            Y = X - shift
        else:
            # Q̂⁻¹ v = Q̂⁻¹ P v + mean(v) Q⁻¹ 1, and Q 1 = λ₀ 1 on a graph of uniform mass
            shift = V.mean(axis=0) / (ones_image.mean())
            Y = self.solve(V - V.mean(axis=0), tol=tol)
        QY = Q(Y) + c * w[:, None] * Y
        QY += c * (self._rank_two(Y))
        diag = prior.precision_diagonal() + c * w + c * (self.m / n ** 2 - 2.0 * w / n)
        a = 1.0 - 1.0 / n
        # cond_i = E[y_i | x_-i] (module notes), with x = y + shift 1 and Σ y = 0
        cond = Y - a * (QY + shift[None, :] * ones_image[:, None]) / diag[:, None]
        cond *= cond
        var = a * a / diag + cond.mean(axis=1)
        se = cond.std(axis=1, ddof=1) / np.sqrt(k)
        return var, se

    def _rank_two(self, Y):
        """``(P W P - W) Y``."""
        n, w = self.n, self.counts
        ones_Y = Y.sum(axis=0)
        w_Y = w @ Y
        return (-(w[:, None] * ones_Y[None, :] + w_Y[None, :]) / n
                + (self.m / n ** 2) * ones_Y[None, :])
