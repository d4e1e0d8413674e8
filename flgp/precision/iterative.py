r"""The graph Matérn posterior on graphs too large to factor: conjugate gradients
preconditioned by algebraic multigrid.

A sparse Cholesky factor of a 3-d lattice's precision fills in like ``n^{4/3}``; at
``10^6`` voxels and ``ν = 2`` it would not fit in memory. There the posterior mean
``Q̃⁻¹ Pᵀz / r`` comes from conjugate gradients:

* orders 1 and 2 (``ITERATIVE_ORDERS``): preconditioned by pyamg's smoothed aggregation
  hierarchy of ``Q̃`` itself;
* orders 3 and 4, whose wide stencils defeat AMG: with ``K = κ²C + G`` and
  ``Q_ν = K (C⁻¹K)^{ν-1}``, the preconditioner ``M = (K + sC)(C⁻¹(K + sC))^{ν-1}``,
  ``s = δ^{1/ν}`` with ``δ`` the observations' precision ``m / r`` per unit of mass
  (``Σ C``), matches ``Q̃ = Q_ν + PᵀP/r`` within a factor ``2^{ν-1}`` on the smooth modes
  (where the observations act as that uniform precision) and is ``Q_ν`` on the rough ones.
  ``M⁻¹`` is ``ν`` float32 V-cycles of a smoothed-aggregation hierarchy of ``K + sC``
  interleaved with ``C``; ``Q̃`` is applied by ``2ν - 1`` sparse products, never formed.

Variances use the Rao-Blackwellised estimator of the factored path
(:func:`flgp.precision.gaussian.rbmc_variances`) with perturbation draws
``x = Q̃⁻¹ (R z₁ + Pᵀ z₂ / √r)``, ``R Rᵀ = Q`` (:func:`matern_root_draw`), so that
``Cov(x) = Q̃⁻¹ (Q + PᵀP/r) Q̃⁻¹ = Q̃⁻¹``: one solve a draw. Hyperparameters come from the
exact evidence of a ball of the graph (:func:`flgp.precision.gaussian.search_subgraph`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from ..backends import cpu_threads, limit_blas_threads
from .matern import MaternFamily, check_order

__all__ = ["IterativeMaternRegression", "ITERATIVE_ORDERS", "LARGE_GRAPH_ORDERS",
           "matern_root_draw"]

# the orders whose (posterior) precision AMG preconditions directly
ITERATIVE_ORDERS = (2, 1)
# the orders the large-graph posterior solves: these, and 3 and 4 by the shifted-product
# preconditioner (the module notes)
LARGE_GRAPH_ORDERS = (2, 3, 4, 1)
# relative residual of the solves behind a variance draw (the mean's: 1e-8)
SAMPLE_TOL = 1e-4


def _pyamg():
    try:
        import pyamg
    except ImportError as exc:          # pragma: no cover - pyamg is a dependency
        raise ImportError("graphs too large to factor need pyamg: pip install pyamg") from exc
    return pyamg


def matern_root_draw(graph, kappa2: float, nu: int, rng) -> np.ndarray:
    """``R z`` for a standard normal ``z``, with ``R Rᵀ = Q_ν(κ) = K (C⁻¹K)^{ν-1}``: then
    ``Q⁻¹ R z ~ N(0, Q⁻¹)`` - a draw of the prior by one solve. Odd ``ν``: ``R = (K C⁻¹)^{(ν-1)/2}
    [κ C^{1/2}, Eᵀ W^{1/2}]`` (``E`` the edge incidence, ``W`` the edge weights:
    ``Eᵀ W E = G``); even ``ν``: ``R = (K C⁻¹)^{ν/2} C^{1/2}``."""
    nu = check_order(nu)
    g = graph
    K = (g.stiffness + sp.diags(kappa2 * g.mass)).tocsr()
    if nu % 2 == 0:
        out = np.sqrt(g.mass) * rng.standard_normal(g.n_nodes)
    else:
        W = sp.triu(g.adjacency, k=1).tocoo()
        if np.any(W.data < 0):
            raise ValueError("a graph with negative weights (a mesh's obtuse angles) has "
                             "no edge root for an odd order; factor it instead.")
        e = rng.standard_normal(W.data.size) * np.sqrt(W.data)
        out = np.sqrt(kappa2 * g.mass) * rng.standard_normal(g.n_nodes)
        np.add.at(out, W.row, e)
        np.add.at(out, W.col, -e)
    for _ in range(nu // 2):
        out = K @ (out / g.mass)
    return out


def _float32_cycle(A):
    """A symmetric V-cycle of pyamg's smoothed aggregation hierarchy of ``A`` (symmetric
    positive definite) in float32 (memory-bound; the outer CG stays float64), its levels
    in CSR (faster than pyamg's 1 x 1 block smoothers), symmetric Gauss-Seidel down and up.
    Smoothed aggregation, not Ruge-Stüben: the ``ν`` cycles of
    :meth:`IterativeMaternRegression._precondition` compound each cycle's error, and CG
    needs far fewer iterations with it than with
    :class:`flgp.precision.multigrid.ClassicalMultigrid`'s cycle."""
    from pyamg.relaxation.smoothing import change_smoothers

    ml = _pyamg().smoothed_aggregation_solver(sp.csr_matrix(A).astype(np.float32),
                                              symmetry="symmetric", max_coarse=2000)
    for level in ml.levels:
        level.A = level.A.tocsr()
    change_smoothers(ml, presmoother=("gauss_seidel", {"sweep": "symmetric"}),
                     postsmoother=("gauss_seidel", {"sweep": "symmetric"}))
    cycle = ml.aspreconditioner(cycle="V")
    return LinearOperator(cycle.shape, dtype=np.float64, matvec=lambda r: cycle.matvec(
        np.asarray(r, dtype=np.float32)).astype(np.float64))


def _matern_diagonal(K, mass, nu: int) -> np.ndarray:
    """The diagonal of ``Q_ν = K (C⁻¹K)^{ν-1}`` (``ν`` up to 4) without forming it: with
    ``B = K C⁻¹ K``, ``Σ_j K_ij²/c_j`` (``ν = 2``), ``Σ_j B_ij K_ji/c_j`` (3),
    ``Σ_j B_ij²/c_j`` (4)."""
    K = sp.csr_matrix(K)
    inv = sp.diags(1.0 / np.asarray(mass, dtype=np.float64))
    if nu == 1:
        return K.diagonal()
    if nu == 2:
        return np.asarray(K.multiply(K @ inv).sum(axis=1)).ravel()
    B = (K @ inv @ K).tocsr()
    other = K if nu == 3 else B
    return np.asarray(B.multiply(other @ inv).sum(axis=1)).ravel()


class IterativeMaternRegression:
    """The posterior of a graph Matérn prior of order ``nu`` (1 to 4) at fixed
    hyperparameters ``(κ², r, A)`` on a large graph, by preconditioned conjugate gradients
    (see the module notes)."""

    def __init__(self, graph, observed, z, nu, kappa2, ratio, amplitude, tol=1e-8):
        if int(nu) not in LARGE_GRAPH_ORDERS:
            raise ValueError(f"the iterative path solves orders {LARGE_GRAPH_ORDERS}; got "
                             f"nu={nu!r}.")
        self.graph, self.nu = graph, int(nu)
        self.kappa2, self.ratio, self.amplitude = float(kappa2), float(ratio), float(amplitude)
        self.observed = np.asarray(observed, dtype=np.int64)
        self.z = np.asarray(z, dtype=np.float64)
        self.tol = float(tol)
        n = graph.n_nodes
        obs = np.zeros(n)
        obs[self.observed] = 1.0 / self.ratio
        self._obs_precision = obs
        self.iterations = []
        if self.nu in ITERATIVE_ORDERS:
            self.Q = MaternFamily(graph, self.nu).matrix(self.kappa2)
            self.Qt = (self.Q + sp.diags(obs)).tocsr()
            self._solver = _pyamg().smoothed_aggregation_solver(
                self.Qt, symmetry="symmetric", max_coarse=2000)
            return
        mass = np.asarray(graph.mass, dtype=np.float64)
        self._mass = mass
        self._K = (graph.stiffness + sp.diags(self.kappa2 * mass)).tocsr()
        # the observations' precision per unit of mass, and the shift that makes M match
        # Q̃ on the smooth modes (the module notes)
        shift = (obs.sum() / mass.sum()) ** (1.0 / self.nu)
        self._cycle = _float32_cycle(self._K + sp.diags(shift * mass))
        self.Qt = LinearOperator((n, n), dtype=np.float64, matvec=self._apply)
        self._M = LinearOperator((n, n), dtype=np.float64, matvec=self._precondition)

    def _apply(self, x):
        """``Q̃ x = K (C⁻¹K)^{ν-1} x + PᵀPx / r``."""
        x = np.ravel(x)
        y = self._K @ x
        for _ in range(self.nu - 1):
            y = self._K @ (y / self._mass)
        return y + self._obs_precision * x

    def _precondition(self, b):
        """``M⁻¹ b ≈ (K + sC)⁻¹ (C (K + sC)⁻¹)^{ν-1} b`` by V-cycles (symmetric: the cycle
        is)."""
        x = self._cycle.matvec(np.ravel(b))
        for _ in range(self.nu - 1):
            x = self._cycle.matvec(self._mass * x)
        return x

    def diagonal(self) -> np.ndarray:
        """The diagonal of ``Q̃``."""
        if self.nu in ITERATIVE_ORDERS:
            return self.Qt.diagonal()
        return _matern_diagonal(self._K, self._mass, self.nu) + self._obs_precision

    def solve(self, b: np.ndarray, tol: float | None = None) -> np.ndarray:
        residuals = []
        tol = self.tol if tol is None else tol
        if self.nu in ITERATIVE_ORDERS:
            x = self._solver.solve(b, tol=tol, accel="cg", maxiter=1000,
                                   residuals=residuals)
        else:
            x, _ = _pyamg().krylov.cg(self.Qt, b, tol=tol, M=self._M, maxiter=1000,
                                      residuals=residuals)
        self.iterations.append(len(residuals))
        return x

    def mean(self) -> np.ndarray:
        """The posterior mean ``Q̃⁻¹ Pᵀz / r`` at every node (standardised units)."""
        b = np.zeros(self.graph.n_nodes)
        b[self.observed] = self.z / self.ratio
        return self.solve(b)

    def _root_draw(self, rng) -> np.ndarray:
        """``R z`` with ``R Rᵀ = Q``."""
        return matern_root_draw(self.graph, self.kappa2, self.nu, rng)

    def variances(self, n_samples: int = 16, random_state=0):
        """``(variance, standard error)`` of ``f`` (times ``A``) by RBMC with
        perturbation draws (one solve each, several at once on threads); the standard
        error of the unit variances' sum over the observed nodes is kept as
        ``observed_sum_se`` (for the cross-validated amplitude, as on the factored
        path)."""
        rng = np.random.default_rng(random_state)
        n = self.graph.n_nodes
        d = self.diagonal()
        rhs = []
        for _ in range(int(n_samples)):         # drawn in order: reproducible
            r = self._root_draw(rng)
            r[self.observed] += rng.standard_normal(self.observed.size) / np.sqrt(
                self.ratio)
            rhs.append(r)
        # a draw needs no more digits than the estimator's Monte Carlo error keeps
        threads = (1 if self.nu in ITERATIVE_ORDERS       # pyamg's solver: one at a time
                   else max(1, min(len(rhs), cpu_threads())))
        with limit_blas_threads(1):
            if threads > 1:
                with ThreadPoolExecutor(threads, thread_name_prefix="flgp-draw") as pool:
                    draws = list(pool.map(lambda b: self.solve(b, tol=SAMPLE_TOL), rhs))
            else:
                draws = [self.solve(b, tol=SAMPLE_TOL) for b in rhs]
        terms = np.empty((n, len(draws)))
        for k, x in enumerate(draws):
            # Σ_{j≠i} Q̃_ij x_j = (Q̃x)_i - Q̃_ii x_i
            terms[:, k] = (self._apply_full(x) - d * x) ** 2 / (d * d)
        var = 1.0 / d + terms.mean(axis=1)
        se = terms.std(axis=1, ddof=1) / np.sqrt(terms.shape[1])
        per_draw = terms[self.observed].sum(axis=0)
        self.observed_sum_se = float(per_draw.std(ddof=1) / np.sqrt(per_draw.size))
        return self.amplitude * var, self.amplitude * se

    def _apply_full(self, x):
        return self.Qt @ x
