r"""What the diffusion map and the GP embedding share: the heat operator's eigenbasis (dense
Algorithms 1-2 or the FLGP engine), the diffusion-steps rule and input checks.

Notation: ``mu_0 = 1 >= mu_1 >= ...`` are the eigenvalues of the normalised affinity ``A``
(dense) or of the one-step FLGP operator ``(A Λ^-1 A^T)^{1/2}`` (``mu = 1 - λ``, ``λ`` the
engine's Laplacian eigenvalues), with orthonormal eigenvectors ``phi_l``. Both embeddings
approximate the diffusion distance (Gilbert and O'Neill, eq. 26)

.. math:: d^{(t)}(x_i, x_j)^2 = \sum_l \mu_l^{2t} (\phi_l(i) - \phi_l(j))^2
          = \| a^{(t)}_i - a^{(t)}_j \|^2,

with ``a^{(t)}_i`` the rows of ``A^t``.
"""

from __future__ import annotations

import numbers
import os
import sys
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._chunks import is_dask_array, is_zarr_array
from .._validation import check_int, check_points
from ..backends import BACKENDS, resolve_backend
from ..graph.affinity import (NORMALIZATIONS, affinity, build_piecewise_affinity,
                              check_dense_affinity_size, epsilon_rule)
from ..graph.pieces import Pieces, kernel_pieces
from ..graph.cross_graph import check_graph_options, cross_graph, validate_cloud
from ..spectral.flgp import flgp_eigenpairs
from ..spectral.dense import top_eigenpairs, top_eigenpairs_lanczos
from ._pieces import assemble, unit_basis

__all__ = []

EMBEDDING_METHODS = ("auto", "dense", "flgp")
DISCONNECTED = ("warn", "raise")
# method="auto": the dense algorithm up to this many points, FLGP eigenpairs above
# (benchmarks/embedding.py; docs/embedding.md, "Which method")
AUTO_DENSE_MAX_SAMPLES = 700
# FLGP's default induced points per computed eigenpair (docs/embedding.md)
INDUCED_PER_EIGENPAIR = 10
# t rule: left-out coordinates carry at most this fraction of the kept diffusion variance
TAIL_FRACTION = 0.1
# ... capped where mu_1^{2t} falls to this (without a spectral gap after the k-th
# eigenvalue, e.g. k = 1 on a circle, t would grow without bound)
MIN_FIRST_WEIGHT = 1e-3
_UNIT = 1.0 - 1e-9
POSITIVE = Interval(numbers.Real, 0, None, closed="neither")


# most multiply-adds a transformer spends powering a diffusion operator step by step, and
# each step's fixed overhead in the same units
MAX_POWERING_WORK = 1e12
STEP_OVERHEAD = 1e4


def check_powering_cost(steps: int, work_per_step: float, *, what: str, fix: str) -> None:
    """Raise before powering a diffusion operator ``steps`` times when
    ``steps x (work_per_step + overhead)`` exceeds :data:`MAX_POWERING_WORK` (used by the
    dense GP embedding and the compressed diffusion map). ``what`` names the operator, ``fix``
    says what to change."""
    cost = float(steps) * (float(work_per_step) + STEP_OVERHEAD)
    if cost > MAX_POWERING_WORK:
        raise ValueError(f"{int(steps)} products with {what} (about {cost:.2g} multiply-adds) "
                         f"would run for hours. {fix}")


def auto_diffusion_steps(mu: np.ndarray, n_components: int) -> int:
    r"""The default number of diffusion steps ``t`` (the operator's power) from its eigenvalues.

    ``mu`` are the non-trivial eigenvalues ``mu_1 >= mu_2 >= ...`` (``mu_0 = 1`` removed).
    ``t`` is the smallest integer ``>= 1`` with

    .. math:: \sum_{l > k} \mu_l^{2t} \le 0.1 \sum_{l \le k} \mu_l^{2t},

    i.e. 90% of the diffusion distance lives in the ``k`` kept coordinates — capped where
    ``mu_1^{2t}`` falls below ``1e-3``. Only the computed eigenvalues enter the tail sum.
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

    # the tail's share is non-increasing in t (kept mu >= left-out mu): bisect
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


class _Eigenbasis:
    """Top eigenpairs of the heat operator and their extension to new points.

    ``mu`` (descending, ``mu[0] = 1``) and ``phi`` (n x m, orthonormal). ``extend(X)`` returns
    ``(phi(X), log_degree(X) or None)``. ``pieces``: the connected pieces when the graph falls
    apart (then ``mu[:n_pieces]`` are the eigenvalue-1 basis of
    :mod:`flgp.embedding._pieces`), else None.

    Dense spectra store ``phi``. FLGP spectra keep the engine's eigenpairs and a
    :class:`_PhiMap` and produce ``phi`` in row blocks: :meth:`map_phi` (fitted points),
    :meth:`map_new` (new points).
    """

    def __init__(self, mu, phi, extend, epsilon, affinity=None, eigenpairs=None,
                 pieces=None, phi_map=None):
        self.mu = mu
        self.epsilon = epsilon
        self._phi = phi
        self._extend = extend
        self.affinity = affinity
        self.eigenpairs = eigenpairs
        self.pieces = pieces
        self.phi_map = phi_map

    @property
    def n_pieces(self) -> int:
        return 1 if self.pieces is None else self.pieces.n_pieces

    @property
    def blockwise(self) -> bool:
        """FLGP: ``phi`` comes in blocks of rows from the engine's eigenpairs."""
        return self.phi_map is not None

    @property
    def n_samples(self) -> int:
        return self.eigenpairs.n_samples if self.blockwise else self._phi.shape[0]

    @property
    def phi(self):
        """All ``n x m`` rows of ``phi`` (stored, or computed from the eigenpairs)."""
        if self._phi is None and self.blockwise:
            return self.map_phi(_phi_only, n_columns=self.mu.shape[0])
        return self._phi

    def map_phi(self, func, n_columns: int, parallel: bool = False):
        """``func(phi_rows, None)`` over blocks of the fitted points (numpy, or a lazy dask
        array for a Dask fit); a dense spectrum applies it to all rows at once."""
        if not self.blockwise:
            return func(self._phi, None)
        return self.eigenpairs.map_chunks(_OnPhi(func, self.phi_map), n_columns=n_columns,
                                          parallel=parallel)

    def map_new(self, X, func, n_columns: int):
        """``func(phi(X), log_degree(X))`` at new points, in blocks for FLGP."""
        if not self.blockwise:
            return func(*self._extend(X))
        return self.eigenpairs.map_points(X, _OnPhi(func, self.phi_map), n_columns=n_columns,
                                          restrict=self.pieces is not None)

    def extend(self, X):
        if self.blockwise:
            return self.map_new(X, _phi_only, self.mu.shape[0]), None
        return self._extend(X)


class _PhiMap:
    """Engine eigenvector rows -> ``phi`` rows: when the graph falls apart, the first ``n_unit``
    columns become the eigenvalue-1 basis of each row's piece (``unit_rows``, one row per
    piece; :func:`flgp.embedding._pieces.unit_basis`)."""

    def __init__(self, unit_rows=None, n_unit: int = 0):
        self.unit_rows = unit_rows
        self.n_unit = n_unit

    def __call__(self, V, components):
        if not self.n_unit:
            return V
        V = V.copy()
        V[:, :self.n_unit] = self.unit_rows[components]
        return V


class _OnPhi:
    """``func(phi_map(V, components), None)``: small and picklable (Dask tasks run it)."""

    def __init__(self, func, phi_map):
        self.func = func
        self.phi_map = phi_map

    def __call__(self, V, components):
        return self.func(self.phi_map(V, components), None)


def _phi_only(phi, log_degree):
    return phi


def _user_stacklevel() -> int:
    """``stacklevel`` for the first frame outside flgp and scikit-learn's output wrapper, so a
    warning points at the user's ``fit``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wrapper = os.path.join("sklearn", "utils", "_set_output.py")
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith(package)
                                 or frame.f_code.co_filename.endswith(wrapper)):
        frame, level = frame.f_back, level + 1
    return level


def _falls_apart(pieces: str, epsilon: float) -> ValueError:
    return ValueError(
        f"the affinity graph falls apart into {pieces} at epsilon={epsilon:.4g} "
        f"(kernel entries between them underflow, or nearly so, and each piece gets "
        f"eigenvalue 1). Increase epsilon, or embed each piece separately "
        f"(disconnected='warn' does that for you).")


def _pieces_warning(pieces: Pieces, graph: str, fix: str, k: int) -> str:
    kept = min(k, pieces.n_pieces - 1)
    return (f"the {graph} falls apart into {pieces.describe()}: each piece is embedded on "
            f"its own eigenpairs, and the first {kept} coordinate(s) (eigenvalue 1) only "
            f"tell the pieces apart. {fix} to connect them, or pass disconnected='raise' to "
            f"make this an error.")


def _sign_columns(phi: np.ndarray) -> np.ndarray:
    """Each column's largest-magnitude entry positive (the top eigenvector of a connected
    graph has one sign, so it comes out positive)."""
    rows = np.argmax(np.abs(phi), axis=0)
    signs = np.sign(phi[rows, np.arange(phi.shape[1])])
    signs[signs == 0] = 1.0
    return phi * signs[None, :]


def _top_pairs(aff, m: int, random_state):
    """Top ``min(m, n)`` eigenpairs (descending) of a stored or lazy affinity."""
    n = aff.points.shape[0]
    m = min(m, n)
    if hasattr(aff, "matrix"):
        mu, phi = top_eigenpairs(aff.matrix, m)
    else:
        mu, phi = top_eigenpairs_lanczos(aff.matmat, n, m, random_state)
    return np.clip(mu, 0.0, 1.0), _sign_columns(phi)


def _dense_eigenbasis(X, n_eig, est) -> _Eigenbasis:
    """Dense Algorithms 1-2, then the top ``n_eig`` eigenpairs (``None``: none, for the GP
    embedding with a fixed power). A cloud that falls apart (:func:`flgp.graph.kernel_pieces`)
    gets the block-diagonal affinity of its pieces
    (:class:`flgp.graph.affinity.PiecewiseAffinity`)."""
    lazy = resolve_backend(est.backend) == "keops"
    epsilon = epsilon_rule(X) if est.epsilon is None else float(est.epsilon)
    pieces = kernel_pieces(X, epsilon, backend=est.backend)
    if pieces.n_pieces > 1:
        return _piecewise_dense_eigenbasis(X, n_eig, est, pieces, epsilon, lazy)
    if not lazy:      # KeOps never stores the n x n matrix (Lanczos for the eigenpairs)
        check_dense_affinity_size(X.shape[0])
    aff = affinity(X, epsilon=epsilon, normalization=est._normalization, alpha=est.alpha,
                   tol=est.tol, max_iter=est.max_iter, lazy=lazy, backend="keops")
    if n_eig is None:
        return _Eigenbasis(None, None, None, aff.epsilon, affinity=aff)
    mu, phi = _top_pairs(aff, n_eig, est.random_state)
    if mu.shape[0] > 1 and mu[1] > _UNIT:
        n_unit = max(2, int(np.sum(mu > _UNIT)))
        if est.disconnected == "raise":
            raise _falls_apart(f"{n_unit} pieces", aff.epsilon)
        warnings.warn(f"the affinity graph nearly falls apart at epsilon={aff.epsilon:.4g}: "
                      f"{n_unit} eigenvalues are within 1e-9 of 1 although every group of "
                      f"points is linked by kernel weights above 1e-9/n, so the leading "
                      f"coordinates are ill-determined. Increase epsilon.", UserWarning,
                      stacklevel=_user_stacklevel())
    return _Eigenbasis(mu, phi, _NystromExtension(aff, phi / np.maximum(mu, 1e-300)[None, :]),
                     aff.epsilon, affinity=aff)


def _piecewise_dense_eigenbasis(X, n_eig, est, pieces, epsilon, lazy) -> _Eigenbasis:
    if est.disconnected == "raise":
        raise _falls_apart(pieces.describe(), epsilon)
    warnings.warn(_pieces_warning(pieces, f"affinity graph (epsilon={epsilon:.4g})",
                                  "Increase epsilon", est.n_components),
                  UserWarning, stacklevel=_user_stacklevel())
    aff = build_piecewise_affinity(X, pieces, epsilon=epsilon,
                                   normalization=est._normalization, alpha=est.alpha,
                                   tol=est.tol, max_iter=est.max_iter, lazy=lazy,
                                   backend=est.backend)
    if n_eig is None:
        return _Eigenbasis(None, None, None, epsilon, affinity=aff, pieces=pieces)
    spectra = [_top_pairs(part, n_eig, est.random_state) for part in aff.parts]
    if est._normalization == "symmetric":
        masses = np.array([part.degrees.sum() for part in aff.parts])
    else:                                   # bistochastic: uniform stationary weights
        masses = pieces.sizes.astype(np.float64)
    mu, phi = assemble(aff.index, spectra, masses, X.shape[0], n_eig)
    return _Eigenbasis(mu, phi, _NystromExtension(aff, phi / np.maximum(mu, 1e-300)[None, :]),
                     epsilon, affinity=aff, pieces=pieces)


class _NystromExtension:
    """``phi_l(x) = a(x) . phi_l / mu_l`` and ``log`` of the new points' degrees."""

    def __init__(self, affinity, vectors_over_mu):
        self.affinity = affinity
        self.vectors_over_mu = vectors_over_mu

    def __call__(self, X_new):
        return self.affinity.apply_rows(X_new, self.vectors_over_mu)


def _flgp_eigenbasis(X, n_eig, est) -> _Eigenbasis:
    bandwidth = None if est.epsilon is None else float(np.sqrt(est.epsilon / 4.0))
    induced = getattr(est, "induced_points", None)
    options = check_graph_options(
        X.shape[0], X.shape[1], n_induced=est._n_induced, n_neighbors=est.n_neighbors,
        subsample="kmeans", kernel="se", bandwidth=bandwidth, bandwidth_scale=1.0,
        lae_regularization=1e-3, backend=est.backend, induced_points=induced,
        random_state=est.random_state)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pieces \\(connected components\\).*")
        eigenpairs = flgp_eigenpairs(cross_graph(X, options), n_eig)
    mu = np.clip(1.0 - eigenpairs.eigenvalues, 0.0, 1.0)
    epsilon = 4.0 * eigenpairs.extension.graph.bandwidth ** 2
    if eigenpairs.n_pieces == 1:
        return _Eigenbasis(mu, None, None, epsilon, eigenpairs=eigenpairs, phi_map=_PhiMap())
    pieces = Pieces(labels=eigenpairs.piece_labels,
                    sizes=np.asarray(eigenpairs.piece_sizes, dtype=np.int64))
    if est.disconnected == "raise":
        raise ValueError(
            f"the FLGP graph falls apart into {pieces.describe()}; the embedding would "
            f"only tell the pieces apart. Increase n_neighbors, epsilon or n_induced, or "
            f"embed each piece separately (disconnected='warn' does that for you).")
    warnings.warn(_pieces_warning(pieces, "FLGP graph",
                                  "Increase n_neighbors, epsilon or n_induced",
                                  est.n_components), UserWarning,
                  stacklevel=_user_stacklevel())
    # the engine's first n_pieces eigenvectors span the pieces' indicators (sigma = 1);
    # replace them by the basis of unit_basis, whose rows depend on the piece only
    c = pieces.n_pieces
    n_unit = min(c, mu.shape[0])
    R = unit_basis(pieces.sizes.astype(np.float64))
    unit_rows = R[:, :n_unit] / np.sqrt(pieces.sizes)[:, None]
    mu[:n_unit] = 1.0
    return _Eigenbasis(mu, None, None, epsilon, eigenpairs=eigenpairs, pieces=pieces,
                     phi_map=_PhiMap(unit_rows, n_unit))


def embedding_n_induced(n_samples: int, n_eigenpairs: int) -> int:
    """The embeddings' default FLGP ``s``: ``10 M`` for ``M`` eigenpairs, at most ``n // 4`` and
    1000, at least 10 (and at most ``n``)."""
    return int(min(n_samples, max(10, min(n_samples // 4,
                                          INDUCED_PER_EIGENPAIR * n_eigenpairs, 1000))))


class _HeatEmbedding(TransformerMixin, BaseEstimator):
    """Shared fit/transform plumbing of :class:`DiffusionMap` and :class:`GPEmbedding`:
    parameter constraints, input checks, the eigenbasis (dense or FLGP) and the t rule."""

    _parameter_constraints: dict = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "method": [StrOptions(set(EMBEDDING_METHODS))],
        "epsilon": [POSITIVE, None],
        "t": [StrOptions({"auto"}), POSITIVE],
        "normalization": [StrOptions(set(NORMALIZATIONS)), None],
        "alpha": [Interval(numbers.Real, None, None, closed="neither"), None],
        "tol": [POSITIVE],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_induced": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_eigenpairs": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "disconnected": [StrOptions(set(DISCONNECTED))],
        "backend": [StrOptions(set(BACKENDS))],
        "random_state": ["random_state", np.random.Generator],
        "induced_points": ["array-like", None],
    }

    _dense_cost_grows_with_t = False
    # diffusion coordinates are eigenvectors (k < n - 1 of them); a sketch can have any k
    _components_are_eigenvectors = True

    def _needs_dense(self) -> bool:
        """Whether a dense-only parameter is set (then method="auto" means "dense" at any size)."""
        return self.normalization == "symmetric" or self.alpha is not None

    def _needs_flgp(self) -> bool:
        return False

    def _resolve_method(self, n: int) -> str:
        if self.method != "auto":
            return self.method
        if self._needs_dense():
            return "dense"
        if self._needs_flgp() or n > AUTO_DENSE_MAX_SAMPLES:
            return "flgp"
        return "dense"

    def _check_params(self, n: int):
        """Checks the constraints cannot express: finiteness, and what depends on the cloud or the
        resolved method."""
        for name in ("epsilon", "alpha", "tol"):
            value = getattr(self, name)
            if value is not None and not np.isfinite(value):
                raise ValueError(f"{name} must be finite; got {value!r}.")
        if not isinstance(self.t, str) and not np.isfinite(self.t):
            raise ValueError(f"t must be 'auto' or a finite positive number; got {self.t!r}.")
        method = self._method
        if self._components_are_eigenvectors:
            k = check_int(self.n_components, "n_components", low=1, high=n - 2,
                          high_name="n_samples - 2",
                          fix="n points have n - 1 non-trivial diffusion coordinates, "
                              "and the eigensolvers here compute at most n - 2 of them "
                              "beside the trivial one; ask for fewer.")
        else:
            k = int(self.n_components)
        if self.normalization is None:
            self._normalization = "symmetric" if method == "dense" else "bistochastic"
        else:
            if method == "flgp" and self.normalization != "bistochastic":
                raise ValueError(
                    "method='flgp' has one normalisation: FLGP's two-step operator "
                    "A Λ^-1 A^T is symmetric and bistochastic by construction. Use "
                    "normalization=None (or 'bistochastic'), or method='dense' for "
                    "Algorithm 1's symmetric normalisation.")
            self._normalization = self.normalization
        if method == "flgp" and self.alpha is not None:
            raise ValueError("alpha (density normalisation) applies to method='dense' only; "
                             "leave alpha=None with method='flgp'.")
        return k

    def _auto_eigenpairs(self, k: int) -> int:
        """Eigenpairs for the ``t="auto"`` rule: the ``k + 1`` used and a tail."""
        return max(3 * (k + 1), 30)

    def _n_eigenpairs(self, n: int, k: int):
        """Eigenpairs to compute: the top one, ``k`` kept, and a tail for the t rule (None: none
        needed). FLGP also sets ``self._n_induced``."""
        low = k + 1 if self._components_are_eigenvectors else 2
        if self._method == "flgp":
            want = (self.n_eigenpairs if self.n_eigenpairs is not None
                    else self._auto_eigenpairs(k))
            induced = getattr(self, "induced_points", None)
            if induced is not None:
                s = int(np.shape(induced)[0])
                if self.n_induced is not None and int(self.n_induced) != s:
                    raise ValueError(f"n_induced={self.n_induced} but induced_points has {s} "
                                     f"rows; leave n_induced=None when passing "
                                     f"induced_points.")
            elif self.n_induced is None:
                s = embedding_n_induced(n, check_int(want, "n_eigenpairs", low=1))
            else:
                s = check_int(self.n_induced, "n_induced", low=2, high=n,
                              high_name="n_samples",
                              fix="Use at most as many induced points as there are points.")
            self._n_induced = s
            if self.n_eigenpairs is None and s - 1 < low:
                raise ValueError(f"n_components={k} needs {low} eigenpairs but n_induced={s} "
                                 f"gives at most {s - 1}; use n_induced >= {low + 1} or "
                                 f"fewer components.")
            m = self.n_eigenpairs if self.n_eigenpairs is not None else min(want, s - 1)
            return check_int(m, "n_eigenpairs", low=low, high=s - 1,
                             high_name="n_induced - 1",
                             fix="Use more induced points or fewer components.")
        if self.n_eigenpairs is not None:
            return check_int(self.n_eigenpairs, "n_eigenpairs", low=low, high=n - 1,
                             high_name="n_samples - 1")
        if self.t == "auto":
            return min(n - 1, self._auto_eigenpairs(min(k, n)))
        return self._dense_eigenpairs_without_auto(k)

    def _dense_eigenpairs_without_auto(self, k: int):
        return k + 1

    def _fit_eigenbasis(self, X):
        lazy = is_dask_array(X) or is_zarr_array(X)
        if lazy:
            from .._chunks.dask_blocks import as_dask_points

            X = as_dask_points(X, min_samples=3)
            self.n_features_in_ = int(X.shape[1])
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3,
                              ensure_all_finite=False)
        n = X.shape[0]
        self._method = self._resolve_method(n)
        if lazy and self.method == "auto" and not self._needs_dense():
            self._method = "flgp"                  # whatever n: the cloud is not in memory
        if lazy and self._method != "flgp":
            raise ValueError(f"dask and zarr arrays are embedded with method='flgp' (linear "
                             f"in n); method={self.method!r} resolves to "
                             f"{self._method!r}.")
        k = self._check_params(n)
        X = validate_cloud(X, min_samples=3)          # once: NaN, scale, duplicates
        m = self._n_eigenpairs(n, k)
        spec = (_dense_eigenbasis if self._method == "dense" else _flgp_eigenbasis)(X, m, self)
        c = spec.n_pieces
        if self.t != "auto":
            self.t_ = float(self.t)
        elif c == 1:
            self.t_ = auto_diffusion_steps(spec.mu[1:], k)
        else:
            # the c - 1 coordinates of eigenvalue 1 do not decay: the rule sees the rest
            self.t_ = auto_diffusion_steps(spec.mu[c:], max(1, k - (c - 1)))
        if self.t_ > 1000 and self._method == "dense" and self._dense_cost_grows_with_t:
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
        self.method_ = self._method
        self.epsilon_ = spec.epsilon
        self.eigenvalues_ = spec.mu if spec.mu is not None else None
        # Algorithm 2's iterations; 1 for the one-pass Algorithm 1 and the FLGP operator
        self.n_iter_ = max(1, spec.affinity.n_iter) if spec.affinity is not None else 1
        if spec.pieces is None:
            self.n_pieces_ = 1
            if lazy:
                import dask.array as da

                self.piece_labels_ = da.zeros(n, chunks=X.chunks[0], dtype=np.int64)
            else:
                self.piece_labels_ = np.zeros(n, dtype=np.int64)
        else:
            self.n_pieces_ = spec.pieces.n_pieces
            self.piece_labels_ = spec.pieces.labels
        self._eigenbasis = spec
        return X, k, spec

    def _check_transform_X(self, X):
        check_is_fitted(self, "embedding_")
        if is_dask_array(X) or is_zarr_array(X):
            from .._chunks.dask_blocks import as_dask_points

            X = as_dask_points(X)
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} "
                                 f"is expecting {self.n_features_in_} features as input.")
            if self.method_ != "flgp":
                raise ValueError("dask and zarr arrays are embedded with method='flgp'; this "
                                 "transformer was fitted with the dense method. Compute X "
                                 "first.")
            return X
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return check_points(X, min_samples=1)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit on ``X`` (see ``fit_transform``); returns the transformer."""
        self.fit_transform(X)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        tags.input_tags.allow_nan = False
        return tags
