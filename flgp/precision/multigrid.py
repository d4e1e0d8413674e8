r"""Classical (Ruge-Stüben) algebraic multigrid for the graph priors' shifted stiffness
``S = κ²C + G`` on graphs whose factor fills in (a k-NN graph in high dimension): CG
preconditioned by one V-cycle, column by column.

pyamg builds the pieces (strength of connection, C/F splitting, classical interpolation,
Gauss-Seidel smoothers, the cycle); this module changes two things:

* **Sparsified coarse operators** (non-Galerkin coarse grids, Falgout & Schroder 2014).
  On a k-NN graph the Galerkin products ``Pᵀ A P`` fill in, and smoothing on the coarse
  levels would cost more than on the graph itself. Each coarse operator is formed from
  the sparsified one above it, then loses the off-diagonal entries below ``COARSE_DROP``
  of both its rows' largest, each added to its row's diagonal so that every row sum (what
  the coarse grid must get right for smooth errors) is kept. Dropping can make a coarse
  operator indefinite: CG detects it, and the solver then rebuilds the hierarchy with
  Galerkin coarse operators and solves again.
* **Mixed precision.** At tolerances of at least ``FLOAT32_TOL`` the hierarchy and its
  V-cycles are float32 (they are memory-bound), the outer CG float64.

The solves run on one BLAS thread (the vector products are too small for more); several
columns are solved at once on threads instead (:meth:`ClassicalMultigrid.solve`).
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from ..backends import cpu_threads, limit_blas_threads
from .iterative import _pyamg

__all__ = ["ClassicalMultigrid", "sparsify_lumped", "COARSE_DROP", "FLOAT32_TOL"]

# coarse operators' off-diagonal entries below this share of both their rows' largest are
# dropped into the diagonal
COARSE_DROP = 0.05
# at relative residuals of at least this the V-cycles are float32 (rounding 6e-8)
FLOAT32_TOL = 1e-5
# the hierarchy's depth and its coarsest size (pyamg's defaults)
MAX_LEVELS, MAX_COARSE = 10, 10


def _square(A, name) -> sp.csr_matrix:
    A = sp.csr_matrix(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square sparse matrix; got shape "
                         f"{A.shape}.")
    if not np.all(np.isfinite(A.data)):
        raise ValueError(f"{name} holds NaN or infinite entries; give a finite matrix.")
    return A


def _share(drop, name) -> float:
    drop = float(drop)
    if not 0.0 <= drop < 1.0:
        raise ValueError(f"{name} must be a share in [0, 1) of a row's largest entry (0: "
                         f"keep every entry); got {drop!r}.")
    return drop


def sparsify_lumped(A, drop: float) -> sp.csr_matrix:
    """``A`` (symmetric) without the off-diagonal entries below ``drop`` times the largest
    off-diagonal magnitude of both their rows, each dropped entry added to its row's
    diagonal: the pattern is symmetric and every row sum is kept."""
    A = _square(A, "A")
    drop = _share(drop, "drop")
    coo = A.tocoo()
    off = coo.row != coo.col
    r, c, v = coo.row[off], coo.col[off], coo.data[off]
    largest = np.zeros(A.shape[0], dtype=v.dtype)
    np.maximum.at(largest, r, np.abs(v))
    kept = (np.abs(v) >= drop * largest[r]) | (np.abs(v) >= drop * largest[c])
    diagonal = A.diagonal() + np.bincount(r[~kept], weights=v[~kept],
                                          minlength=A.shape[0]).astype(A.dtype)
    n = A.shape[0]
    rows = np.concatenate([r[kept], np.arange(n)])
    cols = np.concatenate([c[kept], np.arange(n)])
    return sp.csr_matrix((np.concatenate([v[kept], diagonal]), (rows, cols)), shape=A.shape)


def _hierarchy(A, drop: float):
    """A Ruge-Stüben hierarchy of ``A`` with coarse operators sparsified by ``drop``
    (``0``: Galerkin), forward Gauss-Seidel down and backward up (a symmetric cycle)."""
    _pyamg()
    from pyamg.classical.interpolate import classical_interpolation
    from pyamg.classical.split import RS
    from pyamg.multilevel import MultilevelSolver
    from pyamg.strength import classical_strength_of_connection

    levels = [MultilevelSolver.Level()]
    levels[0].A = sp.csr_matrix(A)
    while len(levels) < MAX_LEVELS and levels[-1].A.shape[0] > MAX_COARSE:
        fine = levels[-1].A
        strength = classical_strength_of_connection(fine, theta=0.25)
        splitting = RS(strength)
        if splitting.sum() in (0, splitting.size):
            break
        P = classical_interpolation(fine, strength, splitting)
        levels[-1].P, levels[-1].R = P, P.T.tocsr()
        coarse = (P.T @ fine @ P).tocsr()
        levels.append(MultilevelSolver.Level())
        levels[-1].A = sparsify_lumped(coarse, drop) if drop > 0 else coarse
    return _with_smoothers(levels)


def _with_smoothers(levels):
    """A pyamg solver of ``levels`` with this module's cycle: symmetric Gauss-Seidel, the
    coarsest level by its pseudo-inverse."""
    pyamg = _pyamg()
    from pyamg.relaxation.smoothing import change_smoothers

    ml = pyamg.multilevel.MultilevelSolver(levels, coarse_solver="pinv")
    change_smoothers(ml, presmoother=("gauss_seidel", {"sweep": "forward"}),
                     postsmoother=("gauss_seidel", {"sweep": "backward"}))
    return ml


def _updated_hierarchy(hierarchy, extra):
    """``hierarchy`` (of ``A``) as one of ``A + diag(extra)``: the same splitting and
    interpolation, each level's operator plus the Galerkin product of the added diagonal
    (``D₀ = diag(extra)``, ``D_{k+1} = R_k D_k P_k``) - positive semi-definite, so every
    level stays positive definite."""
    from pyamg.multilevel import MultilevelSolver

    nonzero = np.flatnonzero(extra)
    n = extra.size
    D = sp.csr_matrix((extra[nonzero], (nonzero, nonzero)), shape=(n, n))
    levels = []
    for old in hierarchy.levels:
        level = MultilevelSolver.Level()
        level.A = (old.A + D).tocsr() if D.nnz else old.A
        if hasattr(old, "P"):
            level.P, level.R = old.P, old.R
            D = (old.R @ D @ old.P).tocsr()
        levels.append(level)
    return _with_smoothers(levels)


class ClassicalMultigrid:
    """``A⁻¹ B`` column by column by CG to a relative residual ``tol``, preconditioned by a
    V-cycle of a Ruge-Stüben hierarchy of ``A`` (symmetric positive definite, an
    M-matrix such as a graph Laplacian plus a positive diagonal) with sparsified coarse
    operators (see the module notes)."""

    def __init__(self, A, tol: float = 1e-8, drop: float = COARSE_DROP):
        self.A = _square(A, "A").astype(np.float64)
        self.tol = float(tol)
        if not 0.0 < self.tol < 1.0:
            raise ValueError(f"tol must be a relative residual in (0, 1), e.g. 1e-8; got "
                             f"{tol!r}.")
        drop = _share(drop, "drop")
        self.dtype = np.float32 if self.tol >= FLOAT32_TOL else np.float64
        self.drop = float(drop)
        self.hierarchy = _hierarchy(self.A.astype(self.dtype), self.drop)

    @property
    def operator_complexity(self) -> float:
        return float(self.hierarchy.operator_complexity())

    def _preconditioner(self) -> LinearOperator:
        cycle = self.hierarchy.aspreconditioner(cycle="V")
        dtype = self.dtype
        return LinearOperator(cycle.shape, dtype=np.float64,
                              matvec=lambda r: cycle.matvec(r.astype(dtype, copy=False))
                              .astype(np.float64))

    def with_diagonal(self, extra) -> "ClassicalMultigrid":
        """The solver of ``A + diag(extra)`` (``extra >= 0``, e.g. the labels' noise
        precision added to a prior's) on this hierarchy's splitting and interpolation,
        each coarse operator gaining the Galerkin product of the added diagonal: a
        fraction of a new hierarchy's set-up, and about as few iterations."""
        extra = np.asarray(extra, dtype=np.float64)
        if extra.shape != (self.A.shape[0],) or not (np.all(np.isfinite(extra))
                                                     and np.all(extra >= 0)):
            raise ValueError(f"extra must hold one finite non-negative value a row "
                             f"({self.A.shape[0]}); got shape {extra.shape}.")
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.A = (self.A + sp.diags(extra)).tocsr()
        other.hierarchy = _updated_hierarchy(self.hierarchy, extra.astype(self.dtype))
        return other

    def solve(self, B: np.ndarray, tol=None, centred: bool = False) -> np.ndarray:
        """``A⁻¹ B`` for ``B`` of shape ``(n,)`` or ``(n, c)``, to the relative residual
        ``tol`` (default: the solver's). ``centred``: ``B``'s columns sum to zero
        and ``A`` maps the constants to themselves (a graph Laplacian plus a constant
        diagonal, plus any symmetric ``P D P``); the solution in the same subspace, by CG
        on the projected operator ``P A P`` with the projected cycle ``P M P`` - no
        near-constant mode of ``A`` slows it or leaves its trace in the solution."""
        tol = self.tol if tol is None else float(tol)
        if not 0.0 < tol < 1.0:
            raise ValueError(f"tol must be a relative residual in (0, 1); got {tol!r}.")
        B = np.asarray(B, dtype=np.float64)
        if B.ndim not in (1, 2) or B.shape[0] != self.A.shape[0]:
            raise ValueError(f"B must have one row per row of A ({self.A.shape[0]}); got "
                             f"shape {B.shape}.")
        cols = B.reshape(B.shape[0], -1)
        out = np.empty_like(cols)
        # pyamg's CG warns of the indefinite cycle under its own "always" filter: recorded
        # (here, on the calling thread, for every thread's columns: a record context
        # entered on several threads would leave the filters of whichever left last), and
        # any other warning passed on
        with limit_blas_threads(1), warnings.catch_warnings(record=True) as caught:
            failed = self._solve_columns(cols, out, tol, range(cols.shape[1]), centred)
            if failed and self.drop > 0:
                # an indefinite sparsified coarse operator: Galerkin ones from now on
                self.drop = 0.0
                self.hierarchy = _hierarchy(self.A.astype(self.dtype), 0.0)
                self._solve_columns(cols, out, tol, failed, centred)
        for w in caught:
            if "Indefinite" not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return out.reshape(B.shape)

    def _solve_columns(self, cols, out, tol, which, centred=False) -> list:
        """CG for the columns ``which`` of ``cols`` into those of ``out`` (on the centred
        subspace: :meth:`solve`), several at once on up to
        :func:`~flgp.backends.cpu_threads` threads (pyamg's smoothing and scipy's sparse
        products release the interpreter lock); each column's iterations are those it has
        alone. Returns the columns whose CG met an indefinite preconditioner."""
        cg = _pyamg().krylov.cg
        M = self._preconditioner()
        A = self.A
        if centred:
            A, M = _projected(A), _projected(M)

        def one(c):
            out[:, c], info = cg(A, cols[:, c], tol=tol, M=M, maxiter=1000)
            if centred:
                out[:, c] -= out[:, c].mean()
            return info < 0

        which = list(which)
        threads = min(len(which), cpu_threads())
        if threads > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="flgp-cg") as pool:
                indefinite = list(pool.map(one, which))
        else:
            indefinite = [one(c) for c in which]
        return [c for c, bad in zip(which, indefinite) if bad]


def _projected(op) -> LinearOperator:
    """``P op P`` with ``P = I - 11ᵀ/n`` (the operator's output centred; its inputs are
    centred vectors already)."""
    def matvec(x):
        y = np.asarray(op @ x if sp.issparse(op) else op.matvec(x), dtype=np.float64)
        return y - y.mean()
    return LinearOperator(op.shape, dtype=np.float64, matvec=matvec)
