"""The graph Matérn prior at full resolution behind the :class:`flgp.prior.GraphPrior`
interface.

On a :class:`~flgp.graph.PointGraph` the prior is ``f ~ N(0, K)`` with

* ``K = A Q_ν⁻¹``, ``Q_ν = S (C⁻¹S)^{ν-1}``, ``S = κ²C + G``
  (:mod:`flgp.precision.matern`), or, ``centred``,
* ``K = A P Q_ν⁻¹ P`` with ``P = I - 11ᵀ/n``: no constant mode (the classifier's prior,
  whose ``κ → 0`` limit at ``ν = 1`` is Poisson learning's Green function).

``Q_ν⁻¹ b`` is ``ν`` solves with ``S`` (``x ← S⁻¹ C x``): by a CHOLMOD factor of ``S``
(``solver="cholesky"``, exact) or algebraic-multigrid-preconditioned conjugate gradients
to a relative residual ``tol`` (``solver="amg"``: graphs whose factor fills in). A
covariance column costs one such application. Marginal variances are exact (one
application a point) up to ``EXACT_VARIANCE_ROWS`` points, beyond by Rao-Blackwellised
Monte Carlo: draws from the factor of ``Q_ν`` (:func:`flgp.precision.gaussian.rbmc_variances`)
or, with ``solver="amg"`` or beyond ``FACTOR_MAX_NODES`` nodes (``ν = 1, 2``), perturbation
draws that need solves with ``S`` only.
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

# marginal variances of up to this many points by one exact application of K each
EXACT_VARIANCE_ROWS = 2000
# draws of the Rao-Blackwellised variances beyond them with solver="amg"
AMG_VARIANCE_SAMPLES = 16
# draws with solver="cholesky": from Q_ν's factor, or by perturbation with S's factor on
# graphs beyond FACTOR_MAX_NODES
LARGE_VARIANCE_SAMPLES = 64
SOLVERS = ("cholesky", "amg")
# raise_order's solves (solver="amg") to this many times the prior's tol: their right-hand
# sides are the order below's columns, smooth and no more accurate than that order's solves
# (at 30 the raised columns' error stays near the first order's)
RAISE_TOL_FACTOR = 30.0


class SparsePrecisionPrior(GraphPrior):
    """``K = A Q_ν⁻¹`` (or ``A P Q_ν⁻¹ P``, ``centred``) on the nodes of ``graph`` (see the
    module notes).

    Parameters
    ----------
    graph : PointGraph
    nu : int
        The Matérn order ``ν >= 1``.
    kappa2 : float
        ``κ² >= 0`` (``κ² = 0`` needs ``centred``: the constant is then the null space).
    amplitude : float
        ``A > 0``.
    centred : bool
        Remove the constant mode (``P``). With ``ν > 1`` the graph's mass must be uniform
        (as on a k-NN graph with unit mass): ``P`` then commutes with ``Q_ν``.
    solver : {"cholesky", "amg"}
    tol : float
        The conjugate gradients' relative residual (``solver="amg"``; from
        ``flgp.precision.multigrid.FLOAT32_TOL = 1e-5`` up the V-cycles are float32, the
        iterations and results float64).

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
        # the posterior precisions' factors, one a order (CentredPosterior), shared by the
        # priors of other orders made by with_order
        self._posterior_factors = {}
        if solver == "cholesky":
            chol = PatternCholesky(stiffness)
            chol.factor(stiffness)
            self._chol = chol
            self._solve = chol.solve
        else:
            # classical (Ruge-Stüben) AMG with sparsified coarse operators
            # (flgp.precision.multigrid): S is an M-matrix (a graph Laplacian plus a
            # diagonal); fewer iterations on k-NN graphs than pyamg's hierarchies
            self._amg = ClassicalMultigrid(stiffness, tol=self.tol)
            self._solve = self._amg.solve

    @property
    def n_points(self) -> int:
        return self.graph.n_nodes

    def with_order(self, nu: int) -> "SparsePrecisionPrior":
        """The same prior at order ``nu`` (same graph, ``κ²``, amplitude and centring),
        sharing this one's factor or multigrid hierarchy: ``Q_ν`` needs solves with the
        same ``S`` only."""
        nu = check_order(nu)
        if self.centred and nu > 1 and not self._uniform_mass:
            raise ValueError("a centred prior of order nu > 1 needs a graph of uniform mass "
                             "(P commutes with Q only then); use centred=False or nu=1.")
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.nu = nu
        return other

    # -- the precision itself (the posterior precision's pieces: CentredPosterior) ----------
    def precision_operator(self):
        """``X ↦ Q_ν X`` for ``X`` of shape ``(n, k)`` (uncentred, unit amplitude), without
        forming ``Q_ν`` for ``ν > 1``: ``S (C⁻¹ S)^{ν-1} X``."""
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
        """This order's ``{"factor", "precision", "holder"}``: a CHOLMOD factor analysed
        on ``Q_ν``'s pattern (its diagonal included) for the posterior precisions
        ``Q_ν + c W``, ``Q_ν`` itself, and the posterior whose values it holds now
        (:class:`~flgp.precision.centred_posterior.CentredPosterior`); analysed once."""
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
        """``Q_ν⁻¹ B`` from ``U = Q_{ν-1}⁻¹ B`` (both centred when the prior is; unit
        amplitude), ``U`` of shape ``(n, c)``: one solve a column (``x ← S⁻¹ C x``) - how
        a chain of orders shares its solves. With ``solver="amg"`` to a relative residual
        of ``RAISE_TOL_FACTOR`` times ``tol`` (at most 0.1): ``U`` carries its own solves'
        error already."""
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
        # column by column: a column's result does not depend on the columns beside it
        return np.column_stack([B[:, c] - B[:, c].mean() for c in range(B.shape[1])])

    def apply_inverse(self, B: np.ndarray, tol=None) -> np.ndarray:
        """``Q_ν⁻¹ B`` (``P Q_ν⁻¹ P B`` when centred), ``B`` of shape ``(n, c)``; ``tol``:
        the conjugate gradients' relative residual (``solver="amg"``; default the
        prior's)."""
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
        """:meth:`GraphPrior.cross_covariance`; ``tol``: the solves' relative residual
        (``solver="amg"``; default the prior's)."""
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
        """Whether :meth:`log_evidence` and :meth:`posterior` go through the factor of
        ``Q̃ = Q + (A/σ²) PᵀP`` (uncentred, CHOLMOD) rather than the dense labelled block."""
        return self.solver == "cholesky" and not self.centred

    def _regression(self, labelled, y, noise):
        """``(MaternRegression of y at labelled, ratio r = σ²/A)``: the full-resolution
        regressor's algebra of ``Q̃`` (:class:`flgp.precision.gaussian.MaternRegression`),
        the one implementation of it."""
        labelled, y, noise = self._checked_targets(labelled, y, noise)
        return MaternRegression(self.graph, labelled, y, self.nu), noise / self.amplitude

    def log_evidence(self, labelled, y, noise) -> float:
        """``log N(y | 0, K_ll + noise I)``; uncentred with a factor, by the determinant
        lemma on the sparse ``Q̃`` (no ``m x m`` block): ``|I + c P Q⁻¹ Pᵀ| = |Q̃| / |Q|``
        and ``(I + c P Q⁻¹ Pᵀ)⁻¹ = I - c P Q̃⁻¹ Pᵀ`` (``c = A/σ²``)."""
        if not self._sparse_algebra():
            return super().log_evidence(labelled, y, noise)
        reg, ratio = self._regression(labelled, y, noise)
        return reg.log_evidence_at(self.kappa2, ratio, self.amplitude)

    def posterior(self, labelled, y, noise, rows=None):
        """The Gaussian posterior ``(mean, variance)`` at ``rows``; uncentred with a
        factor, through the posterior precision ``Q̃ / A`` (``Q̃ = Q + (A/σ²) PᵀP``): the
        mean ``c Q̃⁻¹ Pᵀ y``, the variances ``A diag(Q̃⁻¹)`` - exact for up to
        ``EXACT_VARIANCE_ROWS`` rows, by Rao-Blackwellised Monte Carlo beyond."""
        if not self._sparse_algebra():
            return super().posterior(labelled, y, noise, rows)
        reg, ratio = self._regression(labelled, y, noise)
        rows = as_row_indices(rows, self.n_points)
        mean = reg.posterior_mean(self.kappa2, ratio)[rows]
        var = reg.unit_posterior_variances(self.kappa2, ratio, rows, EXACT_VARIANCE_ROWS)
        return mean, self.amplitude * var

    def marginal_variances(self, rows=None, n_samples=None) -> np.ndarray:
        """The prior's variances at ``rows`` (every node by default): exact up to
        ``EXACT_VARIANCE_ROWS`` rows, beyond by the Rao-Blackwellised estimators of the
        module notes, with ``n_samples`` draws (default ``AMG_VARIANCE_SAMPLES`` with
        ``solver="amg"``, else 64)."""
        n = self.n_points
        rows = as_row_indices(rows, n)
        if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(
                n_samples, (int, np.integer)) or n_samples < 2):
            raise ValueError(f"n_samples must be a whole number of draws >= 2 (or None for "
                             f"the default); got {n_samples!r}.")
        if rows.size <= EXACT_VARIANCE_ROWS:
            return self.amplitude * diagonal_of_inverse(self.apply_inverse, n, rows)
        if self.solver != "cholesky" or (self.centred and self.nu in ITERATIVE_ORDERS):
            # centred: the perturbation draws centre each draw; draws from Q's factor
            # would subtract the constant mode's huge variance (~1/κ²) after the fact,
            # leaving their Monte Carlo error larger than what remains
            draws = AMG_VARIANCE_SAMPLES if n_samples is None else int(n_samples)
            return self.amplitude * self._perturbation_variances(draws)[rows]
        draws = LARGE_VARIANCE_SAMPLES if n_samples is None else int(n_samples)
        if n > FACTOR_MAX_NODES and self.nu in ITERATIVE_ORDERS:
            # Q_ν's own factor fills in; perturbation draws need only solves with S,
            # whose factor is held
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
        """The marginal variances by the Rao-Blackwellised estimator of Sidén et al. (2018)
        with draws ``x = Q⁻¹ R z`` (``R Rᵀ = Q``, :func:`flgp.precision.iterative
        .matern_root_draw`; for ``ν = 2``, ``x = S⁻¹ C^{1/2} z``, one solve a draw): for
        ``y_i = a_iᵀ x`` (``x_i``, or ``x_i - x̄`` when centred),
        ``Var y_i = a_ii²/Q_ii + Var E[y_i | x_-i]``, only the second term sampled. Its
        relative standard error is ``√(2/S)`` times that term's share (35 % at 16 draws for
        a smooth long-range prior, where it is nearly all). ``Q`` is never formed (its
        product fills in): ``Q x`` is ``S x`` or ``S C⁻¹ S x``, ``Q_ii`` is ``S_ii`` or
        ``Σ_k S_ik² / c_k``."""
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
            # R = S C^{-1/2}: Q⁻¹ R z = S⁻¹ C S⁻¹ S C^{-1/2} z = S⁻¹ C^{1/2} z, one solve a
            # draw (the same z as matern_root_draw's)
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
