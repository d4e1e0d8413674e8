"""Sparse Cholesky factors of symmetric positive definite matrices that share a pattern.

A sparse-precision prior is factored many times while its hyperparameters are searched:
``κ²C + L``, ``(κ²C + L) C⁻¹ (κ²C + L)`` and the posterior precision ``Q + Pᵀ P / σ²``
keep their sparsity pattern for every ``κ`` and ``σ²``. :class:`PatternCholesky` orders and
analyses a pattern once (CHOLMOD's symbolic factorisation) and then factors any matrix of
that pattern numerically, giving solves, the log-determinant (twice the sum of the logs of
the factor's diagonal) and samples ``x ~ N(0, A⁻¹)``.

The library is CHOLMOD (SuiteSparse) through ``cvxopt.cholmod``, whose wheels carry
OpenBLAS, so the supernodal factorisation runs at BLAS speed (several times faster on these
matrices than scikit-sparse's build, QDLDL or SuperLU). CHOLMOD's supernodal module is
GPL-licensed (as in every distribution of it); flgp's own code stays MIT.

The fill-reducing order is METIS's nested dissection of the pattern's graph (``pymetis``,
seeded; cvxopt's CHOLMOD is built without METIS), computed once a pattern and kept
(:func:`fill_reducing_order`); on 3-D lattices it about halves each numeric factorisation
against AMD. Patterns of fewer than ``NESTED_DISSECTION_MIN_NODES`` rows keep CHOLMOD's own
(AMD) order.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import scipy.sparse as sp

from .._fingerprint import array_fingerprint

__all__ = ["PatternCholesky", "NotPositiveDefiniteError", "fill_reducing_order"]

# patterns of fewer rows keep CHOLMOD's own (AMD) order: there the order costs more than
# it saves
NESTED_DISSECTION_MIN_NODES = 2_000
# the orders of the last patterns factored, by the pattern's fingerprint
_ORDERS: OrderedDict = OrderedDict()
ORDER_CACHE_SIZE = 8


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """A matrix given to :meth:`PatternCholesky.factor` is not positive definite (numerically):
    the precision is singular (e.g. ``κ = 0`` on a piece of the graph without an
    observation) or its hyperparameters are out of range."""


def _cholmod():
    try:
        import cvxopt
        import cvxopt.cholmod as cholmod
    except ImportError as exc:          # pragma: no cover - cvxopt is a dependency
        raise ImportError("sparse-precision priors need CHOLMOD through cvxopt: "
                          "pip install cvxopt") from exc
    cholmod.options["supernodal"] = 2     # P A Pᵀ = L Lᵀ: the diagonal gives log|A|
    return cvxopt, cholmod


def _lower(A: sp.spmatrix):
    """The lower triangle of ``A`` as a cvxopt sparse matrix (CSC arrays passed as they
    are)."""
    cvxopt, _ = _cholmod()
    L = sp.tril(A, format="csc")
    L.sort_indices()
    n = L.shape[0]
    return cvxopt.spmatrix(L.data.astype(np.float64, copy=False),
                           L.indices.astype(np.int64, copy=False),
                           np.repeat(np.arange(n, dtype=np.int64), np.diff(L.indptr)),
                           (n, n))


class PatternCholesky:
    """Cholesky factors ``P A Pᵀ = L Lᵀ`` of sparse symmetric positive definite matrices of
    one sparsity pattern (see the module notes).

    Parameters
    ----------
    pattern : scipy.sparse matrix (n, n)
        A symmetric matrix with the pattern of every matrix to be factored (its values
        are not used; entries that are numerically 0 in some factored matrix must be
        stored in the pattern).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(5, 5), format="csc")
    >>> chol = PatternCholesky(A)
    >>> chol.factor(A)
    >>> np.allclose(A @ chol.solve(np.ones(5)), 1.0)
    True
    >>> bool(np.isclose(chol.logdet(), np.linalg.slogdet(A.toarray())[1]))
    True
    """

    def __init__(self, pattern: sp.spmatrix):
        _, cholmod = _cholmod()
        pattern = sp.csc_matrix(pattern)
        if pattern.shape[0] != pattern.shape[1]:
            raise ValueError(f"a Cholesky factor needs a square matrix; got shape "
                             f"{pattern.shape}.")
        self.n = pattern.shape[0]
        self._structure = _structure(pattern)
        self._matrix = _lower(pattern)        # values replaced by factor_values
        order = fill_reducing_order(pattern)
        self._symbolic = (cholmod.symbolic(self._matrix) if order is None else
                          cholmod.symbolic(self._matrix, p=_cvxopt_ints(order)))
        self._factored = False

    @classmethod
    def of_lower_pattern(cls, indptr: np.ndarray, indices: np.ndarray) -> "PatternCholesky":
        """The factor of the symmetric pattern whose lower triangle is the CSC arrays
        ``(indptr, indices)`` (sorted; the diagonal included), for :meth:`factor_values`."""
        n = indptr.size - 1
        L = sp.csc_matrix((np.ones(indices.size), indices, indptr), shape=(n, n))
        return cls(L + sp.tril(L, k=-1, format="csc").T)

    def factor_values(self, values: np.ndarray) -> None:
        """Factor the matrix whose lower triangle holds ``values`` in the analysed pattern's
        CSC order (the fast path of :class:`~flgp.precision.matern.MaternFamily`: no
        sparse matrix is built)."""
        cvxopt, _ = _cholmod()
        values = np.ascontiguousarray(values, dtype=np.float64)
        if values.shape != (self._matrix.V.size[0],):
            raise ValueError(f"values must hold the pattern's {self._matrix.V.size[0]} "
                             f"lower-triangle entries; got shape {values.shape}.")
        self._matrix.V = cvxopt.matrix(values)
        self._numeric(self._matrix)

    def factor(self, A: sp.spmatrix) -> None:
        """Factor ``A`` numerically (its pattern must be within the analysed one)."""
        A = sp.csc_matrix(A)
        if A.shape != (self.n, self.n):
            raise ValueError(f"A has shape {A.shape}; the analysed pattern is "
                             f"{self.n} x {self.n}.")
        self._numeric(_lower(_on_pattern(A, self._structure)))

    def _numeric(self, lower) -> None:
        """CHOLMOD's numeric factorisation of ``lower`` (a cvxopt lower triangle on the
        analysed pattern); a matrix that is not positive definite leaves no factor."""
        _, cholmod = _cholmod()
        try:
            cholmod.numeric(lower, self._symbolic)
        except ArithmeticError as exc:
            self._factored = False
            raise NotPositiveDefiniteError(
                f"the precision matrix is not positive definite (CHOLMOD stopped at column "
                f"{exc.args[0] if exc.args else '?'}): it is singular or its "
                f"hyperparameters are out of range.") from exc
        self._factored = True

    def _check(self):
        if not self._factored:
            raise RuntimeError("factor(A) first.")

    def solve(self, B: np.ndarray) -> np.ndarray:
        """``A⁻¹ B`` for a vector or an ``n x k`` matrix."""
        return self._sys(B, 0)

    def logdet(self) -> float:
        """``log |A|``."""
        self._check()
        _, cholmod = _cholmod()
        return 2.0 * float(np.sum(np.log(np.asarray(cholmod.diag(self._symbolic)))))

    def sample(self, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        """``n_samples`` draws of ``x ~ N(0, A⁻¹)``, as the columns of an ``n x k`` array:
        ``x = Pᵀ L⁻ᵀ z`` with ``z ~ N(0, I)``."""
        z = rng.standard_normal((self.n, int(n_samples)))
        return self._sys(self._sys(z, 5), 8)

    def _sys(self, B, sys: int) -> np.ndarray:
        self._check()
        cvxopt, cholmod = _cholmod()
        B = np.asarray(B, dtype=np.float64)
        vector = B.ndim == 1
        X = cvxopt.matrix(np.asfortranarray(B.reshape(self.n, -1)))
        cholmod.solve(self._symbolic, X, sys=sys)
        out = np.asarray(X)
        return out[:, 0].copy() if vector else out


def fill_reducing_order(pattern: sp.spmatrix):
    """METIS's nested dissection order of a symmetric pattern's graph (``perm``: row
    ``perm[i]`` eliminated ``i``-th), seeded and kept for the next call on the same pattern;
    None for fewer than ``NESTED_DISSECTION_MIN_NODES`` rows (CHOLMOD orders those)."""
    import pymetis

    A = sp.csr_matrix(pattern)
    n = A.shape[0]
    if A.shape[1] != n:
        raise ValueError(f"a fill-reducing order needs a square pattern; got shape "
                         f"{A.shape}.")
    if n < NESTED_DISSECTION_MIN_NODES:
        return None
    A = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    A = (A + A.T).tocsr()                 # the same graph whichever triangles were given
    A.setdiag(0)                          # METIS takes the graph without self-loops
    A.eliminate_zeros()
    A.sort_indices()
    key = (n, array_fingerprint(A.indptr), array_fingerprint(A.indices))
    order = _ORDERS.pop(key, None)
    if order is None:
        order, _ = pymetis.nested_dissection(
            pymetis.CSRAdjacency(A.indptr.astype(np.int64), A.indices.astype(np.int64)),
            options=pymetis.Options(seed=0))
        order = np.asarray(order, dtype=np.int64)
    _ORDERS[key] = order
    while len(_ORDERS) > ORDER_CACHE_SIZE:
        _ORDERS.popitem(last=False)
    return order


def _cvxopt_ints(a: np.ndarray):
    cvxopt, _ = _cholmod()
    return cvxopt.matrix(np.ascontiguousarray(a, dtype=np.int64))


def _structure(A: sp.csc_matrix):
    A = sp.csc_matrix(A, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    return A.indptr.copy(), A.indices.copy()


def _on_pattern(A: sp.csc_matrix, structure) -> sp.csc_matrix:
    """``A`` with exactly the analysed pattern (explicit zeros where ``A`` has none), so that
    CHOLMOD's numeric step meets the structure its analysis saw."""
    indptr, indices = structure
    A = sp.csc_matrix(A, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    if A.indptr.shape == indptr.shape and np.array_equal(A.indptr, indptr) \
            and np.array_equal(A.indices, indices):
        return A
    n = A.shape[0]
    cols = np.repeat(np.arange(n), np.diff(indptr))
    a = A.tocoo()
    merged = sp.coo_matrix((np.r_[np.zeros(indices.size), a.data],
                            (np.r_[indices, a.row], np.r_[cols, a.col])), shape=A.shape)
    out = merged.tocsc()              # sums duplicates, keeps the pattern's explicit zeros
    out.sort_indices()
    if out.nnz != indices.size:
        raise ValueError("A has non-zeros outside the analysed pattern.")
    return out
