r"""GLGP and Nyström-GLGP eigenpairs (He et al., appendix "The Nyström Approximation").

GLGP: eigenpairs ``(μ, v)`` of the dense ``n x n`` transition ``A``, ``λ = 1 - μ``,
``||v|| = 1``, kernel scale ``n``. Out of sample: ``v(x) = a(x) v / μ``.

Nyström-GLGP: eigenpairs ``(μ', v')`` of the ``s x s`` induced-point transition ``A'``,
extended by ``v = A^{nys} v' / μ'``, ``λ = 1 - μ'``, kernel scale ``s``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

from .._validation import check_cloud, check_int, check_points, check_random_state
from ..graph.affinity import lazy_affinity
from ..graph.cross_kernel import check_bandwidth
from ..graph.dense import DenseGraph, NystromGraph
from .eigenpairs import Eigenpairs, deterministic_sign_flip

__all__ = ["glgp_eigenpairs", "glgp_eigenpairs_lazy", "glgp_lazy", "nystrom_eigenpairs",
           "TooFewEigenvaluesError", "top_eigenpairs", "top_eigenpairs_lanczos"]


class TooFewEigenvaluesError(ValueError):
    """Fewer than ``n_eigenpairs`` transition eigenvalues are positive (a too wide kernel);
    ``n_positive`` is how many are."""

    def __init__(self, message: str, n_positive: int = 0):
        super().__init__(message)
        self.n_positive = int(n_positive)

_MU_FLOOR = 1e-10


def top_eigenpairs(S: np.ndarray, M: int, random_state: int = 0):
    """Top ``M`` eigenpairs of a symmetric matrix with spectrum in [0, 1], largest first:
    dense subset ``eigh`` up to n = 6000, above shift-invert Lanczos about ``1 + 1e-3``
    (the wanted eigenvalues cluster just below 1, where plain Lanczos crawls)."""
    n = S.shape[0]
    if n <= 6000 or M >= n // 2:
        w, U = scipy.linalg.eigh(S, subset_by_index=[n - M, n - 1], driver="evx",
                                 check_finite=False)
    else:
        v0 = np.random.default_rng(random_state).standard_normal(n)
        w, U = scipy.sparse.linalg.eigsh(S, k=M, sigma=1.0 + 1e-3, which="LM", v0=v0,
                                         tol=1e-10)
        order = np.argsort(w)
        w, U = w[order], U[:, order]
    return w[::-1].copy(), U[:, ::-1].copy()


class _DenseExtension:
    def __init__(self, graph, vectors_over_mu: np.ndarray):
        self.graph = graph
        self.vectors_over_mu = vectors_over_mu  # (columns of A, M)

    def __call__(self, X_new) -> np.ndarray:
        return self.values(check_points(X_new, name="X", min_samples=1))

    def values(self, X_new: np.ndarray) -> np.ndarray:
        """``v(x)`` of validated points."""
        out = np.empty((X_new.shape[0], self.vectors_over_mu.shape[1]))
        for start, stop, rows in self.graph.transition_rows(X_new):
            out[start:stop] = rows @ self.vectors_over_mu
        return out


def _transition_eigenvectors(S: np.ndarray, d: np.ndarray, M: int, what: str):
    mu, psi = top_eigenpairs(S, M)
    if mu[-1] <= _MU_FLOOR:
        keep = mu > _MU_FLOOR
        raise TooFewEigenvaluesError(
            f"only {int(keep.sum())} {what} eigenvalues are positive: the Gaussian kernel is "
            f"so wide that it is numerically of low rank. Lower n_eigenpairs to at most "
            f"that, or use a smaller bandwidth.", int(keep.sum()))
    return np.clip(mu, 0.0, 1.0), _random_walk_vectors(psi, d, mu)


def _count_unit(mu: np.ndarray) -> int:
    return max(1, int(np.sum(mu > 1.0 - 1e-9)))


def _random_walk_vectors(psi: np.ndarray, d: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """The random walk's eigenvectors ``D^{-1/2} ψ``, each of unit norm, the modes of
    ``μ = 1`` (one per piece) orthonormalised so that ``V_z V_zᵀ`` does not depend on the
    rotation the solver returns for a repeated eigenvalue."""
    vec = psi / np.sqrt(d)[:, None]
    z = _count_unit(mu)
    if z > 1:
        vec[:, :z] = np.linalg.qr(vec[:, :z])[0]
    vec /= np.linalg.norm(vec, axis=0, keepdims=True)
    return vec


def glgp_eigenpairs(graph: DenseGraph, n_eigenpairs: int) -> Eigenpairs:
    """Top ``M`` eigenpairs of GLGP's ``L = I - A`` (dense; for n up to ~10,000)."""
    n = graph.points.shape[0]
    M = check_int(n_eigenpairs, "n_eigenpairs", low=1, high=n - 1, high_name="n_samples - 1")
    mu, V = _transition_eigenvectors(graph.symmetric, graph.row_sums, M, "GLGP")
    V *= deterministic_sign_flip(V)
    return Eigenpairs(eigenvalues=1.0 - mu, eigenvectors=V, kernel_scale=float(n),
                      extension=_DenseExtension(graph, V / mu[None, :]), method="glgp",
                      n_pieces=_count_unit(mu))


class _LazyMarkovExtension:
    """``v(x) = a(x) v / mu`` with the Markov rows of a never-stored affinity."""

    def __init__(self, affinity, vectors_over_mu: np.ndarray):
        self.affinity = affinity
        self.vectors_over_mu = vectors_over_mu

    def __call__(self, X_new) -> np.ndarray:
        return self.affinity.markov_apply_rows(X_new, self.vectors_over_mu)


def top_eigenpairs_lanczos(matmat, n: int, M: int, random_state=0):
    """Top ``M`` eigenpairs (largest first) of a symmetric ``n x n`` operator known through
    ``matmat(B)`` (``eigsh``, start vector from ``random_state``)."""
    import scipy.sparse.linalg as spla

    op = spla.LinearOperator((n, n), matvec=matmat, matmat=matmat, dtype=np.float64)
    v0 = check_random_state(random_state).standard_normal(n)
    mu, psi = spla.eigsh(op, k=M, which="LA", v0=v0, tol=1e-10)
    order = np.argsort(mu)[::-1]
    return mu[order], psi[:, order]


def glgp_eigenpairs_lazy(X, n_eigenpairs: int, *, bandwidth: float,
                         backend: str = "keops", random_state: int = 0) -> Eigenpairs:
    """GLGP's eigenpairs without the ``n x n`` matrix: ``S`` is
    :class:`flgp.graph.affinity.LazyAffinity` (``alpha = 1``, ``epsilon = 4 eps^2``) inside
    Lanczos. Memory ``O(n M)``, ``O(n^2 p)`` per product: meant for GPUs."""
    X = check_cloud(X, min_samples=3)
    n = X.shape[0]
    M = check_int(n_eigenpairs, "n_eigenpairs", low=1, high=n - 2, high_name="n_samples - 2")
    bandwidth = check_bandwidth(bandwidth)
    return glgp_lazy(X, M, bandwidth=bandwidth, backend=backend, random_state=random_state)


def glgp_lazy(X: np.ndarray, M: int, *, bandwidth: float, backend: str = "keops",
              random_state: int = 0) -> Eigenpairs:
    """:func:`glgp_eigenpairs_lazy` on a validated cloud with validated options."""
    n = X.shape[0]
    aff = lazy_affinity(X, epsilon=4.0 * bandwidth * bandwidth, normalization="symmetric",
                        alpha=1.0, backend=backend)
    mu, psi = top_eigenpairs_lanczos(aff.matmat, n, M, random_state)
    if mu[-1] <= _MU_FLOOR:
        raise TooFewEigenvaluesError(
            f"only {int(np.sum(mu > _MU_FLOOR))} GLGP eigenvalues are positive: the Gaussian "
            f"kernel is so wide that it is numerically of low rank. Lower n_eigenpairs to at "
            f"most that, or use a smaller bandwidth.", int(np.sum(mu > _MU_FLOOR)))
    vec = _random_walk_vectors(psi, aff.degrees, mu)
    vec *= deterministic_sign_flip(vec)
    mu = np.clip(mu, 0.0, 1.0)
    return Eigenpairs(eigenvalues=1.0 - mu, eigenvectors=vec, kernel_scale=float(n),
                      extension=_LazyMarkovExtension(aff, vec / mu[None, :]), method="glgp",
                      n_pieces=_count_unit(mu))


def nystrom_eigenpairs(graph: NystromGraph, n_eigenpairs: int, X) -> Eigenpairs:
    """Top ``M`` Nyström-GLGP eigenpairs, extended to the cloud ``X`` (n x p)."""
    s = graph.induced.points.shape[0]
    M = check_int(n_eigenpairs, "n_eigenpairs", low=1, high=s - 1, high_name="n_induced - 1",
                  fix="Use more induced points or fewer eigenpairs.")
    mu, Vs = _transition_eigenvectors(graph.symmetric, graph.row_sums, M, "Nyström")
    Vs *= deterministic_sign_flip(Vs)
    ext = _DenseExtension(graph, Vs / mu[None, :])
    V = ext.values(X)        # the cloud, validated where the fit began
    return Eigenpairs(eigenvalues=1.0 - mu, eigenvectors=V, kernel_scale=float(s),
                      extension=ext, method="nystrom", n_pieces=_count_unit(mu))
