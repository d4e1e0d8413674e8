r"""Gaussian-process embeddings (Gilbert and O'Neill, Algorithms 4-5).

``Y = A^t G / sqrt(k)`` with ``G`` an ``n x k`` matrix of i.i.d. ``N(0, 1)`` (Algorithm 4)
or ``±1`` (Algorithm 5) entries: ``k`` draws of a process with covariance ``A^{2t}``. By
Proposition 3.2 / 4.1, ``E |y_i - y_j|^2`` is the squared diffusion distance for any
``k``, with spread shrinking like ``1 / sqrt(k)`` (Theorem 3.3).

With FLGP eigenpairs, ``Y = Phi diag(mu^t) Xi / sqrt(k)`` with ``Xi = Phi^T G``
(``M x k``): drawn directly as i.i.d. ``N(0, 1)`` for Gaussian ``G``, computed from ``G``
in chunks for Bernoulli. Cost ``O(n M k)``.
"""

from __future__ import annotations

import numbers

import numpy as np

from sklearn.base import _fit_context
from sklearn.utils._param_validation import StrOptions

from .._validation import check_random_state
from ._base import _HeatEmbedding, check_powering_cost

__all__ = ["GPEmbedding", "SKETCHES"]


SKETCHES = ("gaussian", "rademacher")


def sketch_matrix(shape, sketch: str, rng: np.random.Generator) -> np.ndarray:
    """``G``: i.i.d. ``N(0, 1)`` ("gaussian") or ``±1`` with probability 1/2 ("rademacher")."""
    if sketch == "gaussian":
        return rng.standard_normal(shape)
    return rng.integers(0, 2, size=shape).astype(np.float64) * 2.0 - 1.0


class GPEmbedding(_HeatEmbedding):
    r"""Gaussian-process embedding: a sketch of the heat kernel ``A^t``.

    Parameters
    ----------
    n_components : int, default=2
        ``k``, the number of sketch columns (embedding dimension).
    method : {"auto", "dense", "flgp"}, default="auto"
        "dense": Algorithms 1-2 and 4-5 exactly (``t`` products with the ``n x n`` affinity;
        integer ``t`` only). "flgp": the FLGP engine's eigenpairs, linear in ``n``, any
        ``t > 0``. "auto": as in :class:`DiffusionMap`, and "flgp" for a non-integer ``t``.
    epsilon, t, normalization, alpha, tol, max_iter, n_induced, n_neighbors, n_eigenpairs,
    disconnected, backend, induced_points :
        As in :class:`DiffusionMap`; ``t`` is the paper's power ``p``. FLGP sketches with all
        computed eigenpairs.
    sketch : {"gaussian", "rademacher"}, default="gaussian"
        Algorithm 4 (Gaussian) or Algorithm 5 (symmetric Bernoulli).
    random_state : int, Generator or None
        Seeds the sketch (and FLGP's k-means).

    Attributes
    ----------
    embedding_ : ndarray (n_samples, n_components)
    eigenvalues_ : ndarray
        Computed eigenvalues of the operator (FLGP, or dense with ``t="auto"``).
    t_, epsilon_, method_, n_iter_, n_pieces_, piece_labels_ :
        As in :class:`DiffusionMap`.
    sketch_coefficients_ : ndarray (M, k)
        FLGP: ``Xi / sqrt(k)``, so that ``Y = Phi diag(mu^t) Xi / sqrt(k)``.

    Notes
    -----
    ``transform(X)`` gives ``a(x) A^{t-1} G / sqrt(k)`` (dense) or
    ``phi(x) diag(mu^t) Xi / sqrt(k)`` (FLGP); a fitted point gets back its own row. FLGP
    accepts dask or zarr arrays as :class:`DiffusionMap` does; Rademacher rows are seeded per
    window of 65,536 rows, so results do not depend on blocking.

    Examples
    --------
    >>> from flgp.datasets import make_swiss_roll
    >>> from flgp.embedding import GPEmbedding
    >>> X, t = make_swiss_roll(5000, random_state=0)
    >>> emb = GPEmbedding(n_components=8, random_state=0).fit(X)   # FLGP above 700 points
    >>> emb.method_, emb.embedding_.shape
    ('flgp', (5000, 8))
    >>> emb.transform(X[:3] * 1.01).shape
    (3, 8)
    """

    def __init__(self, n_components=2, *, method="auto", epsilon=None, t="auto",
                 normalization=None, alpha=None, sketch="gaussian", tol=1e-8,
                 max_iter=1000, n_induced=None, n_neighbors=3, n_eigenpairs=None,
                 disconnected="warn", backend="auto", random_state=None,
                 induced_points=None):
        self.n_components = n_components
        self.method = method
        self.epsilon = epsilon
        self.t = t
        self.normalization = normalization
        self.alpha = alpha
        self.sketch = sketch
        self.tol = tol
        self.max_iter = max_iter
        self.n_induced = n_induced
        self.n_neighbors = n_neighbors
        self.n_eigenpairs = n_eigenpairs
        self.disconnected = disconnected
        self.backend = backend
        self.random_state = random_state
        self.induced_points = induced_points

    _dense_cost_grows_with_t = True
    _components_are_eigenvectors = False

    def _non_integer_t(self) -> bool:
        t = self.t
        return (not isinstance(t, str) and isinstance(t, numbers.Real)
                and not isinstance(t, bool) and np.isfinite(t) and float(t) != int(t))

    def _needs_flgp(self) -> bool:
        return self._non_integer_t()      # A^t for a non-integer t needs the eigenpairs

    def _check_dense_power(self):
        t = self.t
        if self._method == "dense" and not (isinstance(t, str)) and (
                not isinstance(t, numbers.Real) or float(t) != int(t)):
            raise ValueError(f"method='dense' takes integer powers A^t (Algorithm 4); got "
                             f"t={t!r}. Use an integer t, t='auto', or method='flgp' for "
                             f"any t > 0.")

    def _check_params(self, n: int):
        k = super()._check_params(n)
        self._check_dense_power()
        return k

    def _dense_eigenpairs_without_auto(self, k: int):
        return None                     # products with A only: no eigendecomposition

    _parameter_constraints: dict = {
        **_HeatEmbedding._parameter_constraints,
        "sketch": [StrOptions(set(SKETCHES))],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Fit on ``X``; return its embedding (lazy for a dask ``X``)."""
        X, k, spec = self._fit_eigenbasis(X)
        rng = check_random_state(self.random_state)
        if self._method == "flgp":
            self.sketch_coefficients_ = self._flgp_coefficients(spec, k, rng)
            self._weights = spec.mu ** self.t_
            self.embedding_ = spec.map_phi(
                _SketchCoordinates(self._weights, self.sketch_coefficients_), n_columns=k,
                parallel=True)
            return self.embedding_
        aff = spec.affinity
        steps = int(round(self.t_))
        n = X.shape[0]
        auto = "" if self.t == "auto" else " t='auto',"
        check_powering_cost(steps, float(n) * n * k, what=f"the dense {n} x {n} affinity",
                            fix=f"Use method='flgp' (the same cost at any t),{auto} or a "
                                f"larger epsilon, which shortens the time scale.")
        H = sketch_matrix((X.shape[0], k), self.sketch, rng) / np.sqrt(k)
        for _ in range(steps - 1):
            H = aff.matmat(H)
        self._propagated = H                      # A^{t-1} G / sqrt(k)
        self.embedding_ = aff.matmat(H)
        return self.embedding_

    def _flgp_coefficients(self, spec, k, rng):
        M = spec.mu.shape[0]
        if self.sketch == "gaussian":
            xi = rng.standard_normal((M, k))
        else:                               # Xi = Phi^T G, block by block
            term = _WindowSketch(int(rng.integers(2**63)), k, self.sketch, spec.phi_map)
            xi = spec.eigenpairs.reduce_chunks(term, (M, k))
        return xi / np.sqrt(k)

    def transform(self, X):
        X = self._check_transform_X(X)
        if self.method_ == "flgp":
            return self._eigenbasis.map_new(
                X, _SketchCoordinates(self._weights, self.sketch_coefficients_),
                self.n_components)
        return self._eigenbasis.affinity.apply_rows(X, self._propagated)[0]


# rows of the Rademacher sketch drawn from one seed (FLGP)
SKETCH_WINDOW = 65536


class _WindowSketch:
    """``phi_bᵀ G_b`` for a block of rows from ``start``; ``G``'s rows are drawn in windows of
    :data:`SKETCH_WINDOW` rows seeded by ``(entropy, w)``, the same whatever the blocks."""

    def __init__(self, entropy: int, k: int, sketch: str, phi_map):
        self.entropy = entropy
        self.k = k
        self.sketch = sketch
        self.phi_map = phi_map

    def rows(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.k))
        for w in range(start // SKETCH_WINDOW, (stop - 1) // SKETCH_WINDOW + 1):
            lo = w * SKETCH_WINDOW
            a, b = max(start, lo), min(stop, lo + SKETCH_WINDOW)
            # the window's first b - lo rows: a generator fills row by row, so these do
            # not depend on the window's length
            G = sketch_matrix((b - lo, self.k), self.sketch,
                              np.random.default_rng([self.entropy, w]))
            out[a - start:b - start] = G[a - lo:]
        return out

    def __call__(self, V, components, start):
        phi = self.phi_map(V, components)
        return phi.T @ self.rows(start, start + phi.shape[0])


class _SketchCoordinates:
    """``(phi * mu^t) @ Xi / sqrt(k)``: small and picklable (Dask tasks run it)."""

    def __init__(self, weights, coefficients):
        self.weights = weights
        self.coefficients = coefficients

    def __call__(self, phi, log_degree):
        return (phi * self.weights[None, :]) @ self.coefficients
