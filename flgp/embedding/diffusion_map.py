r"""Diffusion maps (Gilbert and O'Neill, Algorithm 3; Coifman and Lafon).

``y_i = (mu_1^t phi_1(i), ..., mu_k^t phi_k(i))``: the top ``k`` non-trivial eigenvectors
of the normalised affinity scaled by their eigenvalues to the power ``t``. ``|y_i - y_j|``
approximates the diffusion distance (eq. 26), exactly when ``k`` covers the spectrum.
"""

from __future__ import annotations

import numpy as np

from sklearn.base import _fit_context
from sklearn.utils._param_validation import StrOptions

from ._base import _HeatEmbedding

__all__ = ["DiffusionMap"]

COORDINATES = ("symmetric", "markov")


class DiffusionMap(_HeatEmbedding):
    r"""Diffusion-map embedding, dense (Algorithm 3) or from FLGP eigenpairs (linear in n).

    Parameters
    ----------
    n_components : int, default=2
        ``k``, the embedding dimension.
    method : {"auto", "dense", "flgp"}, default="auto"
        "dense": Algorithms 1-3 on the full ``n x n`` affinity (``O(n^2)`` memory, ``O(n^3)``
        time; n up to ~10,000). "flgp": the FLGP engine's eigenpairs (SE cross kernel,
        k-means induced points; ``mu = 1 - λ``), linear in ``n``. "auto": "dense" for at most
        700 points (docs/embedding.md, "Which method") or when a dense-only option
        (``normalization="symmetric"``, ``alpha``) is set, else "flgp".
    epsilon : float, optional
        ``epsilon`` in ``exp(-|x - y|^2 / epsilon)``. Default: dense, the mean squared distance
        to the 10 nearest neighbours (:func:`flgp.graph.affinity.default_epsilon`); FLGP, the
        mean squared distance to the ``n_neighbors`` nearest induced points.
    t : float or "auto", default="auto"
        Diffusion steps, the power in ``A^t`` (not the models' continuous
        ``diffusion_time``). "auto": :func:`flgp.embedding.auto_diffusion_steps`.
    normalization : {"symmetric", "bistochastic"}, optional
        Dense: Algorithm 1 (default) or 2. FLGP's operator is bistochastic (only choice).
    alpha : float, optional
        Dense only: density normalisation ``K / (q_i q_j)^alpha``; default 1 for "symmetric"
        (Algorithm 1), 0 for "bistochastic" (Algorithm 2).
    coordinates : {"symmetric", "markov"}, default="symmetric"
        "symmetric": eigenvectors ``phi`` of the symmetric operator (Algorithm 3). "markov":
        right eigenvectors of the Markov matrix, ``psi = phi / sqrt(pi)`` (García-Heredia et
        al., eq. 19); equal up to ``sqrt(n)`` for a bistochastic operator.
    tol, max_iter : float, int
        Algorithm 2's tolerance ``delta`` and iteration cap (an error if not converged).
    n_induced, n_neighbors, n_eigenpairs : int, optional
        FLGP: ``M`` eigenpairs (default ``max(3 (k + 1), 30)``, at most ``s - 1``), ``s``
        induced points (default ``10 M``, at most ``n // 4`` and 1000, at least 10) and ``r``
        (3). Dense: ``n_eigenpairs`` computed (default ``k + 1``, or up to
        ``max(3 (k + 1), 30)`` for ``t="auto"``).
    disconnected : {"warn", "raise"}, default="warn"
        When the graph falls apart (kernel weights to the rest all below ``1e-9 / n``;
        :func:`flgp.graph.kernel_pieces`; FLGP: the engine's components). "warn": a
        ``UserWarning`` and the block-diagonal operator's embedding, whose first
        ``n_pieces - 1`` coordinates (eigenvalue 1) tell pieces apart (docs/embedding.md); a
        new point joins its nearest fitted point's piece (FLGP: its most probable induced
        point's). "raise": a ``ValueError``.
    backend : {"auto", "torch", "keops"}, default="auto"
        :mod:`flgp.backends`. Dense: "keops" never stores the ``n x n`` affinity (Lanczos
        eigenpairs, ``O(n k)`` memory); "torch" stores it.
    random_state : int, Generator or None
        FLGP's k-means seeding.
    induced_points : array-like of shape (n_induced, n_features), optional
        FLGP: use these instead of k-means centres.

    Attributes
    ----------
    embedding_ : ndarray (n_samples, n_components)
    eigenvalues_ : ndarray
        All computed ``mu_0 = 1 >= mu_1 >= ...``.
    t_, epsilon_ : float
        The diffusion steps and kernel scale used.
    n_iter_ : int
        Iterations of Algorithm 2 (1 for Algorithm 1 and FLGP).
    method_ : str
        "dense" or "flgp".
    n_pieces_ : int
        Connected pieces of the graph (1 when connected).
    piece_labels_ : ndarray (n_samples,)
        Piece of each fitted point (numbered in order of their first point).

    Notes
    -----
    ``transform`` uses the Nyström extension ``phi_l(x) = a(x) . phi_l / mu_l`` (dense) or
    the FLGP out-of-sample map; a fitted point gets back its own row of ``embedding_``.
    With ``method="flgp"``, ``X`` may be a dask or zarr array (``pip install 'flgp[dask]'``);
    ``fit_transform``, ``embedding_``, ``piece_labels_`` and ``transform`` are then lazy.

    Examples
    --------
    >>> from flgp.datasets import make_swiss_roll
    >>> from flgp.embedding import DiffusionMap
    >>> X, t = make_swiss_roll(500, random_state=0)
    >>> dm = DiffusionMap(n_components=2).fit(X)     # dense: at most 700 points
    >>> dm.method_, dm.embedding_.shape
    ('dense', (500, 2))
    >>> print(dm.eigenvalues_[:3].round(3))
    [1.    0.992 0.986]
    >>> dm.transform(X[:3] + 0.01).shape             # new points: Nyström extension
    (3, 2)
    """

    def __init__(self, n_components=2, *, method="auto", epsilon=None, t="auto",
                 normalization=None, alpha=None, coordinates="symmetric", tol=1e-8,
                 max_iter=1000, n_induced=None, n_neighbors=3, n_eigenpairs=None,
                 disconnected="warn", backend="auto", random_state=None,
                 induced_points=None):
        self.n_components = n_components
        self.method = method
        self.epsilon = epsilon
        self.t = t
        self.normalization = normalization
        self.alpha = alpha
        self.coordinates = coordinates
        self.tol = tol
        self.max_iter = max_iter
        self.n_induced = n_induced
        self.n_neighbors = n_neighbors
        self.n_eigenpairs = n_eigenpairs
        self.disconnected = disconnected
        self.backend = backend
        self.random_state = random_state
        self.induced_points = induced_points

    def _coordinate_map(self):
        spec = self._eigenbasis
        aff = spec.affinity
        uniform = aff is None or aff.normalization == "bistochastic"
        return _DiffusionCoordinates(
            spec.mu[1:self.n_components + 1] ** self.t_, self.coordinates == "markov",
            1.0 / spec.n_samples if uniform else None,
            None if uniform else self._log_total_degree)

    _parameter_constraints: dict = {
        **_HeatEmbedding._parameter_constraints,
        "coordinates": [StrOptions(set(COORDINATES))],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Fit on ``X``; return its diffusion coordinates (lazy for a dask ``X``)."""
        X, k, spec = self._fit_eigenbasis(X)
        if spec.affinity is not None:
            self._log_total_degree = float(np.log(np.sum(spec.affinity.degrees)))
        coords = self._coordinate_map()
        if spec.blockwise:
            self.embedding_ = spec.map_phi(coords, n_columns=k, parallel=True)
        else:
            log_degree = (np.log(spec.affinity.degrees) if spec.affinity is not None
                          else None)
            self.embedding_ = coords(spec.phi, log_degree)
        return self.embedding_

    def transform(self, X):
        X = self._check_transform_X(X)
        return self._eigenbasis.map_new(X, self._coordinate_map(), self.n_components)


class _DiffusionCoordinates:
    """``phi[:, 1:k+1] mu^t`` (symmetric), or divided by ``sqrt(pi)`` (Markov) with ``pi``
    uniform (bistochastic, FLGP) or ``exp(log_degree - log_total)``. Picklable for Dask tasks."""

    def __init__(self, weights, markov: bool, uniform_pi, log_total_degree):
        self.weights = weights
        self.markov = markov
        self.uniform_pi = uniform_pi
        self.log_total_degree = log_total_degree

    def __call__(self, phi, log_degree):
        k = self.weights.shape[0]
        Y = phi[:, 1:k + 1] * self.weights[None, :]
        if self.markov:
            if self.uniform_pi is not None:
                pi = np.full(phi.shape[0], self.uniform_pi)
            else:
                pi = np.exp(log_degree - self.log_total_degree)
            Y = Y / np.sqrt(pi)[:, None]
        return Y
