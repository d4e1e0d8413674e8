r"""What the diffusion map and the GP embedding share: the spectrum of the heat operator
(dense Algorithms 1-2 or the FLGP engine), the diffusion-time rule and input checks.

Notation: ``mu_0 = 1 >= mu_1 >= ...`` are the eigenvalues of the normalised affinity
``A`` (dense) or of the one-step FLGP operator ``(A Λ^-1 A^T)^{1/2}`` (``mu = 1 - λ``,
``λ`` the engine's Laplacian eigenvalues), with orthonormal eigenvectors ``phi_l`` over the
cloud. Both embeddings approximate the diffusion distance (Gilbert and O'Neill, eq. 26)

.. math:: d^{(t)}(x_i, x_j)^2 = \sum_l \mu_l^{2t} (\phi_l(i) - \phi_l(j))^2
          = \| a^{(t)}_i - a^{(t)}_j \|^2,

with ``a^{(t)}_i`` the rows of ``A^t``.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from scipy.sparse.csgraph import connected_components
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import (check_int, check_option, check_points, check_positive,
                           check_random_state)
from ..backends import BACKENDS, resolve_backend
from ..graph.affinity import NORMALIZATIONS, build_dense_affinity, build_lazy_affinity
from ..spectral.compute import compute_eigenpairs, default_n_induced
from ..spectral.dense import _top_eigh

__all__ = []

METHODS = ("dense", "flgp")
# the diffusion-time rule: the components a k-dimensional embedding leaves out may carry at
# most this fraction of the diffusion variance sum_l mu_l^{2t} kept in the first k
TAIL_FRACTION = 0.1
# ... but diffuse no longer than until mu_1^{2t} falls to this (a spectrum with no gap after
# the k-th eigenvalue, e.g. k = 1 on a circle, would otherwise ask for t -> infinity)
MIN_FIRST_WEIGHT = 1e-3
_UNIT = 1.0 - 1e-9


def auto_diffusion_time(mu: np.ndarray, n_components: int) -> int:
    r"""The default diffusion time ``t`` from the spectrum.

    ``mu`` are the non-trivial eigenvalues ``mu_1 >= mu_2 >= ...`` (the top ``mu_0 = 1``
    removed). ``t`` is the smallest integer ``>= 1`` with

    .. math:: \sum_{l > k} \mu_l^{2t} \le 0.1 \sum_{l \le k} \mu_l^{2t},

    i.e. the diffusion distance at time ``t`` lives, to 90%, in the ``k`` coordinates an
    embedding keeps — capped where ``mu_1^{2t}`` falls below ``1e-3``. Only the computed
    eigenvalues enter the tail sum.
    """
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim != 1 or not np.all(np.isfinite(mu)):
        raise ValueError("mu must be a 1-d array of finite eigenvalues (the top eigenvalue "
                         "1 removed), sorted in decreasing order.")
    if np.any(np.diff(mu) > 1e-12):
        raise ValueError("mu must be sorted in decreasing order (mu_1 >= mu_2 >= ...).")
    mu = np.clip(mu, 0.0, 1.0)
    k = check_int(n_components, "n_components", low=1)
    if mu.shape[0] <= k or mu[0] <= 0.0:
        return 1
    log_mu = np.log(np.maximum(mu, 1e-300))
    t_max = 1 if mu[0] >= 1.0 else max(1, int(np.floor(np.log(MIN_FIRST_WEIGHT)
                                                       / (2.0 * log_mu[0]))))

    def small_tail(t):
        w = np.exp(2.0 * t * (log_mu - log_mu[0]))          # (mu_l / mu_1)^{2t}
        return w[k:].sum() <= TAIL_FRACTION * w[:k].sum()

    # the tail's share of the variance does not increase with t (every kept mu is at least
    # every left-out one), so the smallest admissible integer is found by bisection
    lo, hi = 1, t_max
    if not small_tail(hi):
        return int(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if small_tail(mid):
            hi = mid
        else:
            lo = mid + 1
    return int(hi)


class _Spectrum:
    """Top eigenpairs of the heat operator and the map that extends them to new points.

    ``mu`` (descending, ``mu[0]`` the top eigenvalue 1) and ``phi`` (n x m, orthonormal).
    ``extend(X)`` returns ``(phi(X), log_degree(X) or None)``.
    """

    def __init__(self, mu, phi, extend, epsilon, affinity=None, eigenpairs=None):
        self.mu = mu
        self.epsilon = epsilon
        self.phi = phi
        self._extend = extend
        self.affinity = affinity
        self.eigenpairs = eigenpairs

    def extend(self, X):
        return self._extend(X)


def _count_pieces(matrix: np.ndarray) -> int:
    """Connected components of the affinity's nonzero pattern (1 without a zero entry)."""
    if np.all(matrix > 0):
        return 1
    return int(connected_components(scipy.sparse.csr_matrix(matrix > 0), directed=False)[0])


def _falls_apart(pieces: int, epsilon: float) -> ValueError:
    return ValueError(
        f"the affinity graph falls apart into {pieces} pieces at epsilon={epsilon:.4g} "
        f"(kernel entries between them underflow, or nearly so, and each piece gets "
        f"eigenvalue 1). Increase epsilon, or embed each piece separately.")


def _dense_spectrum(X, n_eig, est) -> _Spectrum:
    """Dense Algorithms 1-2, then the top ``n_eig`` eigenpairs (``n_eig=None``: none; the
    GP embedding with a fixed power needs only products with ``A``)."""
    if resolve_backend(est.backend) == "keops":
        # never stores the n x n matrix: KeOps products, Lanczos for the eigenpairs
        aff = build_lazy_affinity(X, epsilon=est.epsilon, normalization=est._normalization,
                                  alpha=est.alpha, tol=est.tol, max_iter=est.max_iter,
                                  backend="keops")
        if n_eig is None:
            return _Spectrum(None, None, None, aff.epsilon, affinity=aff)
        mu, phi = _lanczos_top(aff, n_eig, est.random_state)
    else:
        aff = build_dense_affinity(X, epsilon=est.epsilon, normalization=est._normalization,
                                   alpha=est.alpha, tol=est.tol, max_iter=est.max_iter)
        pieces = _count_pieces(aff.matrix)
        if pieces > 1:
            raise _falls_apart(pieces, aff.epsilon)
        if n_eig is None:
            return _Spectrum(None, None, None, aff.epsilon, affinity=aff)
        mu, phi = _top_eigh(aff.matrix, n_eig)
    if mu.shape[0] > 1 and mu[1] > _UNIT:
        raise _falls_apart(max(2, int(np.sum(mu > _UNIT))), aff.epsilon)
    mu = np.clip(mu, 0.0, 1.0)
    # deterministic signs: each column's largest-magnitude entry positive (the top
    # eigenvector of a connected graph has one sign, so it comes out positive)
    rows = np.argmax(np.abs(phi), axis=0)
    phi = phi * np.sign(phi[rows, np.arange(phi.shape[1])])[None, :]
    return _Spectrum(mu, phi, _NystromExtension(aff, phi / np.maximum(mu, 1e-300)[None, :]),
                     aff.epsilon, affinity=aff)


def _lanczos_top(aff, m: int, random_state):
    """Top ``m`` eigenpairs (descending) of an operator known only through products."""
    n = aff.points.shape[0]
    op = scipy.sparse.linalg.LinearOperator((n, n), matvec=aff.matmat, matmat=aff.matmat,
                                            dtype=np.float64)
    v0 = check_random_state(random_state).standard_normal(n)
    mu, phi = scipy.sparse.linalg.eigsh(op, k=m, which="LA", v0=v0, tol=1e-10)
    order = np.argsort(mu)[::-1]
    return mu[order], phi[:, order]


class _NystromExtension:
    """``phi_l(x) = a(x) . phi_l / mu_l`` and ``log`` of the new points' degrees."""

    def __init__(self, affinity, vectors_over_mu):
        self.affinity = affinity
        self.vectors_over_mu = vectors_over_mu

    def __call__(self, X_new):
        return self.affinity.apply_rows(X_new, self.vectors_over_mu)


class _EngineExtension:
    def __init__(self, eigenpairs):
        self.eigenpairs = eigenpairs

    def __call__(self, X_new):
        return self.eigenpairs.extend(X_new), None


def _flgp_spectrum(X, n_eig, est) -> _Spectrum:
    bandwidth = None if est.epsilon is None else float(np.sqrt(est.epsilon / 4.0))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*connected components.*")
        ep = compute_eigenpairs(X, method="flgp", kernel="se", subsample="kmeans",
                                n_induced=est.n_induced, n_eigenpairs=n_eig,
                                n_neighbors=est.n_neighbors, bandwidth=bandwidth,
                                random_state=est.random_state, backend=est.backend)
    if ep.n_components > 1:
        raise ValueError(
            f"the FLGP graph falls apart into {ep.n_components} connected components; the "
            f"embedding would only tell the pieces apart. Increase n_neighbors, epsilon or "
            f"n_induced, or embed each piece separately.")
    mu = np.clip(1.0 - ep.eigenvalues, 0.0, 1.0)
    epsilon = 4.0 * ep.extension.graph.bandwidth ** 2
    return _Spectrum(mu, ep.eigenvectors, _EngineExtension(ep), epsilon,
                     eigenpairs=ep)


class _HeatEmbedding(TransformerMixin, BaseEstimator):
    """Shared fit/transform plumbing of :class:`DiffusionMap` and :class:`GPEmbedding`."""

    _dense_cost_grows_with_t = False
    # diffusion coordinates are eigenvectors (k < n - 1 of them); a sketch can have any k
    _components_are_eigenvectors = True

    def _check_params(self, n: int):
        check_option(self.method, "method", METHODS)
        check_option(self.backend, "backend", BACKENDS)
        if self._components_are_eigenvectors:
            k = check_int(self.n_components, "n_components", low=1, high=n - 2,
                          high_name="n_samples - 2",
                          fix="Diffusion maps of n points have at most n - 2 coordinates.")
        else:
            k = check_int(self.n_components, "n_components", low=1)
        if self.normalization is None:
            self._normalization = "symmetric" if self.method == "dense" else "bistochastic"
        else:
            check_option(self.normalization, "normalization", NORMALIZATIONS)
            if self.method == "flgp" and self.normalization != "bistochastic":
                raise ValueError(
                    "method='flgp' has one normalisation: FLGP's two-step operator "
                    "A Λ^-1 A^T is symmetric and bistochastic by construction. Use "
                    "normalization=None (or 'bistochastic'), or method='dense' for "
                    "Algorithm 1's symmetric normalisation.")
            self._normalization = self.normalization
        if self.method == "flgp" and self.alpha is not None:
            raise ValueError("alpha (density normalisation) applies to method='dense' only; "
                             "leave alpha=None with method='flgp'.")
        if self.epsilon is not None:
            check_positive(self.epsilon, "epsilon")
        t = self.t
        if not (isinstance(t, str) and t == "auto"):
            if isinstance(t, bool) or not isinstance(t, numbers.Real):
                raise TypeError(f"t must be 'auto' or a positive number; got {t!r}.")
            check_positive(t, "t")
        return k

    def _n_eigenpairs(self, n: int, k: int):
        """Eigenpairs to compute: the top one, k kept, and a tail for the t rule (None:
        none needed)."""
        if self.method == "flgp":
            s = default_n_induced(n) if self.n_induced is None else self.n_induced
            low = k + 1 if self._components_are_eigenvectors else 2
            if self.n_eigenpairs is None and s - 1 < low:
                raise ValueError(f"n_components={k} needs {low} eigenpairs but n_induced={s} "
                                 f"gives at most {s - 1}; use n_induced >= {low + 1} or "
                                 f"fewer components.")
            m = self.n_eigenpairs if self.n_eigenpairs is not None else min(
                max(100, low), s - 1)
            return check_int(m, "n_eigenpairs", low=low, high=s - 1,
                             high_name="n_induced - 1",
                             fix="Use more induced points or fewer components.")
        low = k + 1 if self._components_are_eigenvectors else 2
        if self.n_eigenpairs is not None:
            return check_int(self.n_eigenpairs, "n_eigenpairs", low=low, high=n - 1,
                             high_name="n_samples - 1")
        if self.t == "auto":
            return min(n - 1, max(3 * (min(k, n) + 1), 30))
        return self._dense_eigenpairs_without_auto(k)

    def _dense_eigenpairs_without_auto(self, k: int):
        return k + 1

    def _fit_spectrum(self, X):
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3)
        X = check_points(X, min_samples=3)
        n = X.shape[0]
        k = self._check_params(n)
        m = self._n_eigenpairs(n, k)
        spec = (_dense_spectrum if self.method == "dense" else _flgp_spectrum)(X, m, self)
        self.t_ = (auto_diffusion_time(spec.mu[1:], k) if self.t == "auto"
                   else float(self.t))
        if self.t_ > 1000 and self.method == "dense" and self._dense_cost_grows_with_t:
            warnings.warn(f"t={self.t_:g} asks for {self.t_:g} products with the dense "
                          f"n x n affinity; a larger epsilon shortens the time scale, "
                          f"method='flgp' costs the same at any t.", stacklevel=3)
        if spec.mu is not None and spec.mu.size > 1:
            with np.errstate(under="ignore"):
                top = float(np.max(np.abs(spec.mu[1:k + 1]) ** self.t_))
            if not (top > 1e-250 and abs(spec.mu[1]) > 1e-8):
                raise ValueError(
                    f"every diffusion coordinate vanishes at t={self.t_:g}: the largest "
                    f"kept eigenvalue is {abs(spec.mu[1]):.3g} and its t-th power is "
                    f"{top:.3g}. Use a smaller t (or t='auto'); if the eigenvalues "
                    f"themselves are near 0, epsilon is so large that every pair of points "
                    f"looks alike - leave epsilon=None for the data-driven scale.")
            if self.epsilon is not None and abs(spec.mu[1]) < 1e-4:
                warnings.warn(f"the largest non-trivial eigenvalue is {abs(spec.mu[1]):.3g}: "
                              f"epsilon={self.epsilon:g} is so large against the distances "
                              f"that the affinity is nearly constant, and the coordinates "
                              f"shrink with it. Leave epsilon=None for the data-driven "
                              f"scale.", UserWarning, stacklevel=4)
        self.epsilon_ = spec.epsilon
        self.eigenvalues_ = spec.mu if spec.mu is not None else None
        # Algorithm 2's iterations; 1 for the one-pass Algorithm 1 and the FLGP operator
        self.n_iter_ = max(1, spec.affinity.n_iter) if spec.affinity is not None else 1
        self._spectrum = spec
        return X, k, spec

    def _check_transform_X(self, X):
        check_is_fitted(self, "embedding_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return check_points(X, min_samples=1)

    def fit(self, X, y=None):
        self.fit_transform(X)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
