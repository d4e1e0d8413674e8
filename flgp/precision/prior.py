"""The full-resolution graph Matérn prior behind :class:`flgp.prior.GraphPrior`.

On a :class:`~flgp.graph.PointGraph`, ``f ~ N(0, K)`` with ``K = A Q_ν⁻¹``,
``Q_ν = S (C⁻¹S)^{ν-1}``, ``S = κ²C + G`` (:mod:`flgp.precision.matern`), or, ``centred``,
``K = A P Q_ν⁻¹ P`` with ``P = I - 11ᵀ/n`` (no constant mode: the classifier's prior, whose
``κ → 0`` limit at ``ν = 1`` is Poisson learning's Green function).

``Q_ν⁻¹ b`` is ``ν`` solves with ``S`` (``x ← S⁻¹ C x``), by a CHOLMOD factor
(``solver="cholesky"``) or AMG-preconditioned conjugate gradients to relative residual
``tol`` (``solver="amg"``, for graphs whose factor fills in). Marginal variances are exact
up to ``EXACT_VARIANCE_ROWS`` points, beyond by Rao-Blackwellised Monte Carlo (Sidén et al.
2018): draws from the factor of ``Q_ν`` (:func:`flgp.precision.gaussian.rbmc_variances`),
or perturbation draws needing solves with ``S`` only (``ν = 1, 2``; with ``solver="amg"``,
``centred``, or beyond ``FACTOR_MAX_NODES`` nodes).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..prior import GraphPrior, as_row_indices
from .cholesky import PatternCholesky
from .gaussian import (FACTOR_MAX_NODES, MaternRegression, diagonal_of_inverse,
                       rbmc_variances)
from .iterative import ITERATIVE_ORDERS, matern_root_draw
from .multigrid import ClassicalMultigrid
from .matern import apply_matern_inverse, check_order, matern_precision, shifted_stiffness

__all__ = ["SparsePrecisionPrior", "EXACT_VARIANCE_ROWS", "SOLVERS"]

# marginal variances of up to this many points exactly (one application of K each)
EXACT_VARIANCE_ROWS = 2000
# Monte Carlo draws beyond them: perturbation draws with solver="amg" (or centred) ...
AMG_VARIANCE_SAMPLES = 16
# ... and with solver="cholesky"
LARGE_VARIANCE_SAMPLES = 64
SOLVERS = ("cholesky", "amg")
# raise_order's solves (solver="amg") run to this times tol: their right-hand sides carry
# the order below's error already (at 30 the raised columns' error stays near it)
RAISE_TOL_FACTOR = 30.0


class SparsePrecisionPrior(GraphPrior):
    """``K = A Q_ν⁻¹`` (or ``A P Q_ν⁻¹ P``, ``centred``) on the nodes of ``graph`` (module
    notes).

    Parameters
    ----------
    graph : PointGraph
    nu : int, default=1
        The Matérn order ``ν >= 1``.
    kappa2 : float, default=1.0
        ``κ² >= 0``; ``κ² = 0`` needs ``centred`` and ``solver="amg"``.
    amplitude : float, default=1.0
        ``A > 0``.
    centred : bool, default=False
        Remove the constant mode (``P``); with ``ν > 1`` the graph's mass must be uniform,
        so that ``P`` commutes with ``Q_ν``.
    solver : {"cholesky", "amg"}, default="cholesky"
    tol : float, default=1e-8
        The conjugate gradients' relative residual (``solver="amg"``; from
        ``flgp.precision.multigrid.FLOAT32_TOL`` up the V-cycles run in float32).

    Raises
    ------
    ValueError
        An order, ``kappa2``, ``amplitude``, ``solver`` or ``tol`` out of range, or a
        centred ``ν > 1`` prior on a graph of non-uniform mass.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.graph.lattice import lattice_graph
    >>> g = lattice_graph(np.argwhere(np.ones((5, 4, 1), bool)))
    >>> prior = SparsePrecisionPrior(g, nu=2, kappa2=0.3)
    >>> from flgp.precision import matern_precision
    >>> K = np.linalg.inv(matern_precision(g, 0.3, 2).toarray())
    >>> bool(np.allclose(prior.labelled_covariance([0, 7, 19]), K[np.ix_([0, 7, 19], [0, 7, 19])]))
    True
    """

    def __init__(self, graph, nu: int = 1, kappa2: float = 1.0, amplitude: float = 1.0,
                 centred: bool = False, solver: str = "cholesky", tol: float = 1e-8):
        nu = check_order(nu)
        kappa2, amplitude = float(kappa2), float(amplitude)
        if not (np.isfinite(kappa2) and kappa2 >= 0):
            raise ValueError(f"kappa2 must be finite and >= 0; got {kappa2!r}.")
        if kappa2 == 0 and not (centred and solver == "amg"):
            raise ValueError("kappa2 = 0 leaves the constant mode with infinite variance "
                             "and S singular: pass kappa2 > 0, or centred=True with "
                             "solver='amg' (conjugate gradients on the centred system).")
        if not (np.isfinite(amplitude) and amplitude > 0):
            raise ValueError(f"amplitude must be finite and > 0; got {amplitude!r}.")
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}; got {solver!r}.")
        if not (np.isfinite(tol) and 0 < tol < 1):
            raise ValueError(f"tol must be a relative residual in (0, 1), e.g. 1e-8; got "
                             f"{tol!r}.")
        mass = np.asarray(graph.mass, dtype=np.float64)
        self._uniform_mass = bool(np.all(mass == mass[0]))
        if centred and nu > 1 and not self._uniform_mass:
            raise ValueError("a centred prior of order nu > 1 needs a graph of uniform mass "
                             "(P commutes with Q only then); use centred=False or nu=1.")
        self.graph, self.nu, self.kappa2, self.amplitude = graph, nu, kappa2, amplitude
        self.centred, self.solver, self.tol = bool(centred), solver, float(tol)
        self._mass = mass
        stiffness = shifted_stiffness(graph, kappa2)
        self._stiffness = stiffness.tocsr()
        # posterior precision factors by order (CentredPosterior), shared with with_order
        self._posterior_factors = {}
        if solver == "cholesky":
            chol = PatternCholesky(stiffness)
            chol.factor(stiffness)
            self._chol = chol
            self._solve = chol.solve
        else:
            # classical (Ruge-Stüben) AMG (flgp.precision.multigrid): S is an M-matrix
            self._amg = ClassicalMultigrid(stiffness, tol=self.tol)
            self._solve = self._amg.solve

    @property
    def n_points(self) -> int:
        return self.graph.n_nodes

    def with_order(self, nu: int) -> "SparsePrecisionPrior":
        """The same prior at order ``nu``, sharing this one's factor or multigrid hierarchy
        of ``S``."""
        nu = check_order(nu)
        if self.centred and nu > 1 and not self._uniform_mass:
            raise ValueError("a centred prior of order nu > 1 needs a graph of uniform mass "
                             "(P commutes with Q only then); use centred=False or nu=1.")
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.nu = nu
        return other

    # -- the precision (pieces of CentredPosterior's posterior precision) ---------------------
    def precision_operator(self):
        """``X ↦ Q_ν X = S (C⁻¹ S)^{ν-1} X`` for ``(n, k)`` ``X`` (uncentred, unit
        amplitude), without forming ``Q_ν``."""
        S, inv_mass = self._stiffness, 1.0 / self._mass

        def times(X):
            Y = S @ X
            for _ in range(self.nu - 1):
                Y = S @ (inv_mass[:, None] * Y)
            return Y
        return times

    def precision_diagonal(self) -> np.ndarray:
        """``diag(Q_ν)`` (``ν = 1``: ``S_ii``; ``ν = 2``: ``Σ_k S_ik² / c_k``)."""
        S = self._stiffness
        if self.nu == 1:
            return S.diagonal()
        if self.nu == 2:
            return np.asarray(S.multiply(S) @ (1.0 / self._mass)).ravel()
        return matern_precision(self.graph, self.kappa2, self.nu).diagonal()

    def posterior_factor(self) -> dict:
        """This order's ``{"factor", "precision", "holder"}``, built once: a CHOLMOD factor
        analysed on ``Q_ν + I``'s pattern for the posterior precisions ``Q_ν + c W``,
        ``Q_ν``, and the :class:`~flgp.precision.centred_posterior.CentredPosterior` whose
        values the factor holds."""
        if self.solver != "cholesky":
            raise ValueError("posterior factors need solver='cholesky'.")
        entry = self._posterior_factors.get(self.nu)
        if entry is None:
            Q = matern_precision(self.graph, self.kappa2, self.nu).tocsc()
            entry = {"factor": PatternCholesky(Q + sp.identity(self.n_points,
                                                               format="csc")),
                     "precision": Q, "holder": None}
            self._posterior_factors[self.nu] = entry
        return entry

    def log_det_precision(self) -> float:
        """``log|Q_ν| = ν log|S| - (ν - 1) Σ log c_i`` (``solver="cholesky"``)."""
        if self.solver != "cholesky":
            raise ValueError("the log-determinant needs solver='cholesky'.")
        return float(self.nu * self._chol.logdet()
                     - (self.nu - 1) * np.sum(np.log(self._mass)))

    def raise_order(self, U: np.ndarray) -> np.ndarray:
        """``Q_ν⁻¹ B`` from ``(n, c)`` ``U = Q_{ν-1}⁻¹ B`` (centred when the prior is; unit
        amplitude) by one solve a column, so a chain of orders shares its solves; with
        ``solver="amg"`` to ``min(RAISE_TOL_FACTOR * tol, 0.1)``."""
        if self.nu < 2:
            raise ValueError(f"raise_order makes order nu from order nu - 1; this prior "
                             f"has nu = {self.nu} (use apply_inverse).")
        U = np.asarray(U, dtype=np.float64)
        if U.ndim != 2 or U.shape[0] != self.n_points:
            raise ValueError(f"U must have one row per node ({self.n_points}) and one "
                             f"column a right-hand side; got shape {U.shape}.")
        U = U * self._mass[:, None]
        if self.centred:
            U = self._centre(U)
        if self.solver == "amg":
            U = self._amg.solve(U, tol=min(RAISE_TOL_FACTOR * self.tol, 0.1))
        else:
            U = self._solve(U)
        return self._centre(U) if self.centred else U

    def _centre(self, B: np.ndarray) -> np.ndarray:
        # column by column, so a column's result does not depend on the others
        return np.column_stack([B[:, c] - B[:, c].mean() for c in range(B.shape[1])])

    def apply_inverse(self, B: np.ndarray, tol=None) -> np.ndarray:
        """``Q_ν⁻¹ B`` (``P Q_ν⁻¹ P B`` when centred) for ``(n, c)`` ``B``; ``tol`` overrides
        the prior's (``solver="amg"``)."""
        U = np.asarray(B, dtype=np.float64)
        if U.ndim not in (1, 2) or U.shape[0] != self.n_points:
            raise ValueError(f"B must have one row per node ({self.n_points}); got shape "
                             f"{U.shape}.")
        U = U.reshape(self.n_points, -1)
        solve = self._solve if tol is None or self.solver != "amg" else (
            lambda R: self._amg.solve(R, tol=tol))
        if not self.centred:
            return apply_matern_inverse(solve, self._mass, self.nu, U)
        # centred before each solve (a no-op between solves when the mass is uniform)
        U = apply_matern_inverse(lambda R: solve(self._centre(R)), self._mass, self.nu, U)
        return self._centre(U)

    def cross_covariance(self, labelled, rows=None, weights=None, tol=None) -> np.ndarray:
        """:meth:`GraphPrior.cross_covariance`; ``tol`` as in :meth:`apply_inverse`."""
        n = self.n_points
        labelled = as_row_indices(labelled, n)
        m = labelled.size
        W = np.eye(m) if weights is None else np.asarray(weights, dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != m:
            raise ValueError(f"weights must be an (m, c) array with m = {m} labelled "
                             f"points; got shape {W.shape}.")
        B = np.zeros((n, W.shape[1]))
        np.add.at(B, labelled, W)
        U = self.apply_inverse(B, tol=tol)
        if self.amplitude != 1.0:
            U *= self.amplitude
        return U if rows is None else U[as_row_indices(rows, n)]

    # -- the Gaussian posterior and evidence through the sparse posterior precision -------
    def _sparse_algebra(self) -> bool:
        """Whether the evidence and posterior use the sparse ``Q̃ = Q + (A/σ²) PᵀP``."""
        return self.solver == "cholesky" and not self.centred

    def _regression(self, labelled, y, noise):
        """``(MaternRegression of y at labelled, σ²/A)``."""
        labelled, y, noise = self._checked_targets(labelled, y, noise)
        return MaternRegression(self.graph, labelled, y, self.nu), noise / self.amplitude

    def log_evidence(self, labelled, y, noise) -> float:
        """``log N(y | 0, K_ll + noise I)``; uncentred with a factor, without the ``m x m``
        block: ``|I + c P Q⁻¹ Pᵀ| = |Q̃| / |Q|``, ``(I + c P Q⁻¹ Pᵀ)⁻¹ = I - c P Q̃⁻¹ Pᵀ``
        (``c = A/σ²``)."""
        if not self._sparse_algebra():
            return super().log_evidence(labelled, y, noise)
        reg, ratio = self._regression(labelled, y, noise)
        return reg.log_evidence_at(self.kappa2, ratio, self.amplitude)

    def posterior(self, labelled, y, noise, rows=None):
        """The Gaussian posterior ``(mean, variance)`` at ``rows``; uncentred with a
        factor, mean ``c Q̃⁻¹ Pᵀ y`` and variances ``A diag(Q̃⁻¹)`` (exact up to
        ``EXACT_VARIANCE_ROWS`` rows, Monte Carlo beyond)."""
        if not self._sparse_algebra():
            return super().posterior(labelled, y, noise, rows)
        reg, ratio = self._regression(labelled, y, noise)
        rows = as_row_indices(rows, self.n_points)
        mean = reg.posterior_mean(self.kappa2, ratio)[rows]
        var = reg.unit_posterior_variances(self.kappa2, ratio, rows, EXACT_VARIANCE_ROWS)
        return mean, self.amplitude * var

    def marginal_variances(self, rows=None, n_samples=None) -> np.ndarray:
        """The prior's variances at ``rows`` (default all): exact up to
        ``EXACT_VARIANCE_ROWS`` rows, beyond by the Monte Carlo of the module notes with
        ``n_samples >= 2`` draws (default ``AMG_VARIANCE_SAMPLES`` for perturbation draws
        with ``solver="amg"`` or centred, else ``LARGE_VARIANCE_SAMPLES``)."""
        n = self.n_points
        rows = as_row_indices(rows, n)
        if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(
                n_samples, (int, np.integer)) or n_samples < 2):
            raise ValueError(f"n_samples must be a whole number of draws >= 2 (or None for "
                             f"the default); got {n_samples!r}.")
        if rows.size <= EXACT_VARIANCE_ROWS:
            return self.amplitude * diagonal_of_inverse(self.apply_inverse, n, rows)
        if self.solver != "cholesky" or (self.centred and self.nu in ITERATIVE_ORDERS):
            # centred: draws from Q's factor would subtract the constant mode's huge
            # variance (~1/κ²) afterwards, their error larger than what remains
            draws = AMG_VARIANCE_SAMPLES if n_samples is None else int(n_samples)
            return self.amplitude * self._perturbation_variances(draws)[rows]
        draws = LARGE_VARIANCE_SAMPLES if n_samples is None else int(n_samples)
        if n > FACTOR_MAX_NODES and self.nu in ITERATIVE_ORDERS:
            # Q_ν's factor fills in; perturbation draws need only S's, which is held
            try:
                return self.amplitude * self._perturbation_variances(draws)[rows]
            except ValueError:          # a mesh's negative weights: no edge root
                pass
        Q = matern_precision(self.graph, self.kappa2, self.nu)
        chol = PatternCholesky(Q)
        chol.factor(Q)
        var, _ = rbmc_variances(Q, chol, n_samples=draws, random_state=0)
        if self.centred:                    # diag(P X P) = X_ii - 2 (X1)_i / n + 1ᵀX1 / n²
            g = chol.solve(np.ones(n))
            var = var - 2.0 * g / n + g.sum() / (n * n)
        return self.amplitude * var[rows]

    def _perturbation_variances(self, n_samples: int) -> np.ndarray:
        """Marginal variances by the Rao-Blackwellised estimator of Sidén et al. (2018) with
        draws ``x = Q⁻¹ R z``, ``R Rᵀ = Q`` (:func:`flgp.precision.iterative
        .matern_root_draw`; ``ν = 2``: ``x = S⁻¹ C^{1/2} z``). For ``y_i = a_iᵀ x`` (``x_i``,
        or ``x_i - x̄`` centred), ``Var y_i = a_ii²/Q_ii + Var E[y_i | x_-i]``, only the second
        term sampled (relative error ``√(2/S)`` times its share). ``Q`` is never formed."""
        if self.nu not in ITERATIVE_ORDERS:
            raise ValueError(f"perturbation variances exist for orders {ITERATIVE_ORDERS}; "
                             f"this prior has nu = {self.nu}.")
        rng = np.random.default_rng(0)
        n = self.n_points
        S = shifted_stiffness(self.graph, self.kappa2).tocsr()
        inv_mass = 1.0 / self._mass
        if self.nu == 1:
            d = S.diagonal()

            def precision_times(X):
                return S @ X
        else:
            d = S.multiply(S) @ inv_mass

            def precision_times(X):
                return S @ (inv_mass[:, None] * (S @ X))
        if not (np.all(np.isfinite(d)) and np.all(d > 0)):
            raise ValueError(f"Q_nu(kappa)'s diagonal leaves float64 at kappa2="
                             f"{self.kappa2:.3g} (a graph in extreme units); use "
                             f"graph.in_own_units().")
        if self.nu == 2:
            # R = S C^{-1/2}: Q⁻¹ R z = S⁻¹ C^{1/2} z, one solve a draw
            Z = np.column_stack([rng.standard_normal(n) for _ in range(int(n_samples))])
            X = self._solve(np.sqrt(self._mass)[:, None] * Z)
        else:
            R = np.column_stack([matern_root_draw(self.graph, self.kappa2, self.nu, rng)
                                 for _ in range(int(n_samples))])
            X = apply_matern_inverse(self._solve, self._mass, self.nu, R)
        mu = -(precision_times(X) - d[:, None] * X) / d[:, None]     # E[x_i | x_-i]
        if not self.centred:
            return 1.0 / d + np.mean(mu * mu, axis=1)
        a = 1.0 - 1.0 / n
        rest = (X.sum(axis=0)[None, :] - X) / n        # (1/n) Σ_{j≠i} x_j
        cond = a * mu - rest
        return a * a / d + np.mean(cond * cond, axis=1)
