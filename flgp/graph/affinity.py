r"""Normalised affinity matrices of Gilbert and O'Neill (Sec. 4.1, Algorithms 1-2).

Both start from ``K_ij = exp(-|x_i - x_j|^2 / epsilon)`` (``epsilon = 4 eps^2`` in terms of
the FLGP engine's SE bandwidth ``eps``):

* ``"symmetric"`` (Algorithm 1): ``K^(alpha) = Q^-alpha K Q^-alpha`` with ``q = K 1``
  (Coifman-Lafon density normalisation; alpha = 1 is Algorithm 1), ``v = K^(alpha) 1``,
  ``A = V^-1/2 K^(alpha) V^-1/2``;
* ``"bistochastic"`` (Algorithm 2): ``B = D^-1 K D^-1`` with ``B 1 = 1`` to ``tol``
  (``alpha`` defaults to 0).

Both are symmetric with spectrum in ``[0, 1]`` and top eigenvalue 1; a cloud in pieces
(:func:`flgp.graph.kernel_pieces`) gets :class:`PiecewiseAffinity`. New points' rows use the
same formulas with sums over the cloud (a cloud point gets its own row), in log space so a
far-away point gets tiny, not NaN, entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validation import check_cloud, check_int, check_option, check_points, check_positive
from ..backends import gaussian_matmul, min_sq_distances
from .neighbors import mean_neighbour_sq_distance, nearest_induced_points, pairwise_sq_distances
from .pieces import Pieces

__all__ = ["DenseAffinity", "build_dense_affinity", "dense_affinity", "affinity",
           "check_dense_affinity_size", "LazyAffinity",
           "build_lazy_affinity", "lazy_affinity", "PiecewiseAffinity",
           "build_piecewise_affinity", "default_epsilon", "epsilon_rule",
           "NORMALIZATIONS"]

NORMALIZATIONS = ("symmetric", "bistochastic")
# the dense n x n affinity is refused beyond this many points (8 n^2 bytes: 3 GiB)
DENSE_MAX_SAMPLES = 20_000


def default_epsilon(X: np.ndarray, n_neighbors: int = 10) -> float:
    """Data-driven ``epsilon``: the mean squared distance from each point to its
    ``n_neighbors`` nearest others (GLGP's ``4 eps^2 = mean d^2``); ValueError if it is 0."""
    X = check_points(X)
    return epsilon_rule(X, n_neighbors)


def epsilon_rule(X: np.ndarray, n_neighbors: int = 10) -> float:
    """:func:`default_epsilon` of a validated cloud."""
    r = min(int(n_neighbors), X.shape[0] - 1)
    value = mean_neighbour_sq_distance(X, X, r, skip_self=True)
    if not np.isfinite(value) or value <= 0:
        raise ValueError("every point coincides with its nearest neighbours (mean squared "
                         "distance 0); pass epsilon= explicitly or remove duplicate points.")
    return value


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a if a.flags.writeable else a.copy())   # e.g. read-only memmaps


def _log_kernel(X: np.ndarray, Y: np.ndarray, epsilon: float) -> torch.Tensor:
    return pairwise_sq_distances(_tensor(X), _tensor(Y)).mul_(-1.0 / epsilon)


@dataclass
class DenseAffinity:
    """A normalised affinity on a cloud and the rule that extends it to new points.

    Attributes
    ----------
    points : ndarray (n, p)
    epsilon : float
    normalization : {"symmetric", "bistochastic"}
    alpha : float
    matrix : ndarray (n, n)
        ``A`` (Algorithm 1) or ``B`` (Algorithm 2).
    log_q : ndarray (n,)
        ``log q``, ``q = K 1``.
    log_scale : ndarray (n,)
        ``log v`` (symmetric) or ``log d`` (bistochastic, ``B_ij = K^(alpha)_ij / (d_i d_j)``).
    degrees : ndarray (n,)
        Row sums of ``K^(alpha)``.
    n_iter : int
        Iterations of Algorithm 2 (0 for "symmetric").
    """

    points: np.ndarray
    epsilon: float
    normalization: str
    alpha: float
    matrix: np.ndarray
    log_q: np.ndarray
    log_scale: np.ndarray
    degrees: np.ndarray
    n_iter: int = 0

    def matmat(self, H: np.ndarray) -> np.ndarray:
        """``A H``."""
        return self.matrix @ H

    def apply_rows(self, X_new, W: np.ndarray):
        """``(A(X_new, cloud) W, log degree(X_new))`` through :meth:`rows`."""
        X_new = check_points(X_new, name="X", min_samples=1)
        W = np.asarray(W, dtype=np.float64)
        out = np.empty((X_new.shape[0],) + W.shape[1:])
        log_deg = np.empty(X_new.shape[0])
        for start, stop, rows, ld in self.rows(X_new):
            out[start:stop] = rows @ W
            log_deg[start:stop] = ld
        return out, log_deg

    def rows(self, X_new, chunk: int = 2048):
        """Yield ``(start, stop, rows, log_degree)``: new points' affinity rows against the
        cloud and the log of their ``K^(alpha)`` row sums."""
        X_new = check_points(X_new, name="X", min_samples=1)
        log_q = torch.from_numpy(self.log_q)
        log_s = torch.from_numpy(self.log_scale)
        for start in range(0, X_new.shape[0], chunk):
            stop = min(X_new.shape[0], start + chunk)
            log_k = _log_kernel(X_new[start:stop], self.points, self.epsilon)
            if self.alpha != 0.0:
                log_qx = torch.logsumexp(log_k, dim=1, keepdim=True)
                log_k = log_k - self.alpha * (log_qx + log_q[None, :])
            log_deg = torch.logsumexp(log_k, dim=1, keepdim=True)
            if self.normalization == "symmetric":
                out = log_k - 0.5 * (log_deg + log_s[None, :])
            else:
                # d(x) = sum_j K(x, j) / d_j makes the new row sum to one
                log_dx = torch.logsumexp(log_k - log_s[None, :], dim=1, keepdim=True)
                out = log_k - log_dx - log_s[None, :]
            yield start, stop, out.exp_().numpy(), log_deg[:, 0].numpy()


def _bistochastic_scaling(K: np.ndarray, tol: float, max_iter: int):
    """``(d, iterations)`` with every row sum of ``D^-1 K D^-1`` within ``tol`` of 1 (eq. 30).

    Iterates ``d <- sqrt(d * K (1 / d))``, the paper's ``D = lim D_i^1/2 D_(i+1)^1/2`` at
    every step: Algorithm 2's fixed point, with error contracting by ``(1 - mu) / 2 <= 1/2``
    per step for each eigenvalue ``mu`` of ``B``. ValueError after ``max_iter`` steps.
    """
    log_d = 0.5 * np.log(K.sum(1))
    for it in range(1, max_iter + 1):
        d = np.exp(log_d)
        row_sums = (K @ (1.0 / d)) / d
        gap = float(np.max(np.abs(row_sums - 1.0)))
        if gap <= tol:
            return d, it
        log_d += 0.5 * np.log(row_sums)
    raise ValueError(f"the bistochastic normalisation (Algorithm 2) did not converge in "
                     f"max_iter={max_iter} iterations (max |row sum - 1| = {gap:.2e} > "
                     f"tol={tol:g}). The affinity graph is probably close to falling apart: "
                     f"increase epsilon, raise max_iter or tol, or use "
                     f"normalization='symmetric'.")


def build_dense_affinity(X, *, epsilon: float | None = None,
                         normalization: str = "symmetric", alpha: float | None = None,
                         tol: float = 1e-8, max_iter: int = 1000,
                         max_samples: int = DENSE_MAX_SAMPLES) -> DenseAffinity:
    """The dense normalised affinity of Algorithm 1 or 2 (``8 n^2`` bytes; ValueError
    beyond ``max_samples`` points, or if Algorithm 2 does not converge). ``epsilon``
    defaults to :func:`default_epsilon`, ``alpha`` to 1 ("symmetric") or 0 ("bistochastic")."""
    X = check_cloud(X)
    check_option(normalization, "normalization", NORMALIZATIONS)
    check_dense_affinity_size(X.shape[0], max_samples)
    epsilon = None if epsilon is None else check_positive(epsilon, "epsilon")
    alpha, tol, max_iter = _check_normalisation_options(alpha, tol, max_iter)
    return affinity(X, epsilon=epsilon, normalization=normalization, alpha=alpha, tol=tol,
                    max_iter=max_iter)



def check_dense_affinity_size(n: int, max_samples: int = DENSE_MAX_SAMPLES) -> None:
    """ValueError beyond ``max_samples`` points."""
    if n > max_samples:
        raise ValueError(f"the dense affinity is an {n} x {n} matrix "
                         f"({8 * n * n / 2**30:.1f} GiB); it is meant for n <= {max_samples}. "
                         f"Use method='flgp' for larger clouds.")


def _check_normalisation_options(alpha, tol, max_iter):
    if alpha is not None:
        alpha = float(alpha)
        if not np.isfinite(alpha):
            raise ValueError(f"alpha must be finite; got {alpha}.")
    return alpha, check_positive(tol, "tol"), check_int(max_iter, "max_iter", low=1)


def affinity(X: np.ndarray, *, epsilon: float | None, normalization: str,
             alpha: float | None, tol: float = 1e-8, max_iter: int = 1000,
             lazy: bool = False, backend: str = "keops"):
    """The normalised affinity of a validated cloud: stored (:func:`dense_affinity`) or,
    with ``lazy``, applied by products (:func:`lazy_affinity`); None options take the
    defaults of :func:`build_dense_affinity`."""
    if epsilon is None:
        epsilon = epsilon_rule(X)
    if alpha is None:
        alpha = 1.0 if normalization == "symmetric" else 0.0
    if lazy:
        return lazy_affinity(X, epsilon, normalization, float(alpha), tol, max_iter, backend)
    return dense_affinity(X, epsilon, normalization, float(alpha), tol, max_iter)


def dense_affinity(X: np.ndarray, epsilon: float, normalization: str, alpha: float,
                   tol: float = 1e-8, max_iter: int = 1000) -> DenseAffinity:
    """:func:`build_dense_affinity` on checked arguments (also for one piece of a cloud)."""
    K = _log_kernel(X, X, epsilon).exp_()           # diagonal exp(0) = 1: no row sum is 0
    q = K.sum(1)
    if alpha != 0.0:
        w = q.pow(-alpha)
        K.mul_(w[:, None]).mul_(w[None, :])
    degrees = K.sum(1)
    n_iter = 0
    if normalization == "symmetric":
        scale = degrees
        rs = torch.rsqrt(scale)
        K.mul_(rs[:, None]).mul_(rs[None, :])
    else:
        d, n_iter = _bistochastic_scaling(K.numpy(), tol, max_iter)
        scale = torch.from_numpy(d)
        inv = 1.0 / scale
        K.mul_(inv[:, None]).mul_(inv[None, :])
    return DenseAffinity(points=X, epsilon=float(epsilon), normalization=normalization,
                         alpha=alpha, matrix=K.numpy(), log_q=torch.log(q).numpy(),
                         log_scale=torch.log(scale).numpy(), degrees=degrees.numpy(),
                         n_iter=n_iter)


@dataclass
class LazyAffinity:
    """:class:`DenseAffinity` never stored: ``A = S K S``, ``S = diag(scale)``, ``K`` applied
    by :func:`flgp.backends.gaussian_matmul`, ``scale = q^-alpha v^-1/2`` (symmetric) or
    ``q^-alpha / d`` (bistochastic); ``O(n^2 (p + k))`` time per ``n x k`` product."""

    points: np.ndarray
    epsilon: float
    normalization: str
    alpha: float
    log_q: np.ndarray
    scale: np.ndarray
    degrees: np.ndarray
    n_iter: int
    backend: str

    def matmat(self, H: np.ndarray) -> np.ndarray:
        """``A H``."""
        H2 = np.asarray(H, dtype=np.float64).reshape(self.points.shape[0], -1)
        out = gaussian_matmul(self.points, self.points, self.epsilon,
                              self.scale[:, None] * H2, backend=self.backend)
        return (self.scale[:, None] * out).reshape(np.shape(H))

    def apply_rows(self, X_new, W: np.ndarray):
        """``(A(X_new, cloud) W, log degree(X_new))`` as in :meth:`DenseAffinity.rows`, with
        each kernel value scaled by ``exp(min_j d^2 / epsilon)`` against underflow."""
        X_new = check_points(X_new, name="X", min_samples=1)
        a = self.alpha
        q_a = np.exp(-a * self.log_q)                       # q_j^-alpha
        cols = np.column_stack([np.ones_like(q_a), q_a, self.scale])
        weighted = self.scale[:, None] * np.asarray(W, dtype=np.float64)
        shift = min_sq_distances(X_new, self.points, backend=self.backend) / self.epsilon
        sums = gaussian_matmul(X_new, self.points, self.epsilon,
                               np.column_stack([cols, weighted]), log_shift=shift,
                               backend=self.backend)
        # with log c = -shift: q(x) = c q~, K^(alpha) row sum = c^(1-alpha) q~^-alpha s1~
        log_qx = np.log(sums[:, 0]) - shift
        log_deg = -a * log_qx + np.log(sums[:, 1]) - shift
        if self.normalization == "symmetric":
            # A(x, .) W = q(x)^-alpha deg(x)^-1/2 sum_j K(x, j) scale_j W_j
            log_factor = -a * log_qx - 0.5 * log_deg - shift
        else:
            # d(x) = q(x)^-alpha sum_j K(x, j) scale_j, so B(x, .) W = colW / col2
            log_factor = -np.log(sums[:, 2])
        return np.exp(log_factor)[:, None] * sums[:, 3:], log_deg


    def markov_apply_rows(self, X_new, W: np.ndarray) -> np.ndarray:
        """``P(X_new, cloud) W``, ``P(x, j) = K^(alpha)(x, j) / sum_l K^(alpha)(x, l)``."""
        X_new = check_points(X_new, name="X", min_samples=1)
        q_a = np.exp(-self.alpha * self.log_q)
        W = np.asarray(W, dtype=np.float64).reshape(self.points.shape[0], -1)
        shift = min_sq_distances(X_new, self.points, backend=self.backend) / self.epsilon
        sums = gaussian_matmul(X_new, self.points, self.epsilon,
                               np.column_stack([q_a, q_a[:, None] * W]), log_shift=shift,
                               backend=self.backend)
        return sums[:, 1:] / sums[:, :1]


def build_lazy_affinity(X, *, epsilon: float | None = None,
                        normalization: str = "symmetric", alpha: float | None = None,
                        tol: float = 1e-8, max_iter: int = 1000,
                        backend: str = "keops") -> LazyAffinity:
    """:class:`LazyAffinity`; parameters and errors as :func:`build_dense_affinity`."""
    X = check_cloud(X)
    check_option(normalization, "normalization", NORMALIZATIONS)
    epsilon = None if epsilon is None else check_positive(epsilon, "epsilon")
    alpha, tol, max_iter = _check_normalisation_options(alpha, tol, max_iter)
    return affinity(X, epsilon=epsilon, normalization=normalization, alpha=alpha, tol=tol,
                    max_iter=max_iter, lazy=True, backend=backend)


def lazy_affinity(X: np.ndarray, epsilon: float, normalization: str, alpha: float,
                  tol: float = 1e-8, max_iter: int = 1000,
                  backend: str = "keops") -> LazyAffinity:
    """:func:`build_lazy_affinity` on checked arguments (also for one piece of a cloud)."""
    n = X.shape[0]

    def K(M):
        return gaussian_matmul(X, X, epsilon, M, backend=backend)

    q = K(np.ones(n))[:, 0]
    qa = q ** (-alpha)
    degrees = qa * K(qa)[:, 0]                       # rows of K^(alpha)
    n_iter = 0
    if normalization == "symmetric":
        scale = qa / np.sqrt(degrees)
    else:
        log_d = 0.5 * np.log(degrees)
        for n_iter in range(1, max_iter + 1):
            d = np.exp(log_d)
            row_sums = qa * K(qa / d)[:, 0] / d
            gap = float(np.max(np.abs(row_sums - 1.0)))
            if gap <= tol:
                break
            log_d += 0.5 * np.log(row_sums)
        else:
            raise ValueError(f"the bistochastic normalisation (Algorithm 2) did not converge "
                             f"in max_iter={max_iter} iterations (max |row sum - 1| = "
                             f"{gap:.2e} > tol={tol:g}); increase epsilon, raise max_iter "
                             f"or tol, or use normalization='symmetric'.")
        scale = qa / d
    return LazyAffinity(points=X, epsilon=float(epsilon), normalization=normalization,
                        alpha=alpha, log_q=np.log(q), scale=scale, degrees=degrees,
                        n_iter=n_iter, backend=backend)


# pieces of at most this many points get a stored affinity even when the cloud's is lazy
_LAZY_MIN_PIECE = 2000


@dataclass
class PiecewiseAffinity:
    """Block-diagonal affinity of a cloud in pieces (:func:`flgp.graph.kernel_pieces`),
    with the cloud's ``epsilon`` and ``alpha``; a new point takes its nearest cloud point's
    piece.

    Attributes
    ----------
    points : ndarray (n, p)
    epsilon, normalization, alpha
        As in :class:`DenseAffinity`.
    pieces : Pieces
    parts : list of DenseAffinity or LazyAffinity
        One per piece, over the piece's points in increasing index order.
    """

    points: np.ndarray
    epsilon: float
    normalization: str
    alpha: float
    pieces: Pieces
    parts: list
    backend: str = "auto"

    def __post_init__(self):
        self.index = [self.pieces.members(j) for j in range(self.pieces.n_pieces)]
        self.degrees = np.empty(self.points.shape[0])
        for idx, part in zip(self.index, self.parts):
            self.degrees[idx] = part.degrees
        self.n_iter = max(part.n_iter for part in self.parts)

    def matmat(self, H: np.ndarray) -> np.ndarray:
        """``A H``, block by block."""
        H = np.asarray(H, dtype=np.float64)
        out = np.empty_like(H)
        for idx, part in zip(self.index, self.parts):
            out[idx] = part.matmat(H[idx])
        return out

    def assign(self, X_new: np.ndarray) -> np.ndarray:
        """Piece of each new point: that of its nearest point of the cloud."""
        nearest, _ = nearest_induced_points(X_new, self.points, 1, backend=self.backend)
        return self.pieces.labels[nearest[:, 0]]

    def apply_rows(self, X_new, W: np.ndarray):
        """``(A(X_new, cloud) W, log degree(X_new))``, piece by piece."""
        X_new = check_points(X_new, name="X", min_samples=1)
        W = np.asarray(W, dtype=np.float64)
        out = np.zeros((X_new.shape[0],) + W.shape[1:])
        log_deg = np.empty(X_new.shape[0])
        piece = self.assign(X_new)
        for j in np.unique(piece):
            sel = np.flatnonzero(piece == j)
            out[sel], log_deg[sel] = self.parts[j].apply_rows(X_new[sel], W[self.index[j]])
        return out, log_deg


def build_piecewise_affinity(X: np.ndarray, pieces: Pieces, *, epsilon: float,
                             normalization: str = "symmetric", alpha: float | None = None,
                             tol: float = 1e-8, max_iter: int = 1000, lazy: bool = False,
                             backend: str = "auto") -> PiecewiseAffinity:
    """:class:`PiecewiseAffinity` of the checked ``X`` with ``pieces`` found at ``epsilon``;
    with ``lazy``, pieces above ``_LAZY_MIN_PIECE`` points are :class:`LazyAffinity`."""
    check_option(normalization, "normalization", NORMALIZATIONS)
    epsilon = check_positive(epsilon, "epsilon")
    if alpha is None:
        alpha = 1.0 if normalization == "symmetric" else 0.0
    alpha = float(alpha)
    tol = check_positive(tol, "tol")
    max_iter = check_int(max_iter, "max_iter", low=1)
    parts = []
    for j in range(pieces.n_pieces):
        Xj = X[pieces.members(j)]
        if lazy and Xj.shape[0] > _LAZY_MIN_PIECE:
            parts.append(lazy_affinity(Xj, epsilon, normalization, alpha, tol, max_iter,
                                        backend))
        else:
            parts.append(dense_affinity(Xj, epsilon, normalization, alpha, tol, max_iter))
    return PiecewiseAffinity(points=X, epsilon=float(epsilon), normalization=normalization,
                             alpha=alpha, pieces=pieces, parts=parts, backend=backend)
